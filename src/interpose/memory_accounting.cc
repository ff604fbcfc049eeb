#include "interpose/memory_accounting.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <mutex>

#include "common/log.h"
#include "interpose/allocation_map.h"
#include "interpose/driver_imports.h"
#include "interpose/loader.h"
#include "interpose/memory_pools.h"
#include "interpose/registration.h"
#include "interpose/runtime.h"
#include "ledger/ledger.h"
#include "ledger/limits_from_config.h"

namespace vgpu::memory {
namespace {

constexpr int64_t kReconcileIntervalNs = 100'000'000;  // periodic NVML reconciliation
// A reservation that would bring the device within this distance of its limit first reads this
// process's usage from NVML (Reconcile) instead of trusting the last periodic reading. The driver
// also allocates memory that no allocation call reports (an H200 with driver 580 adds about
// 70 MiB at a process's first stream-ordered allocation; lazily loaded modules add more), and
// without a fresh reading that memory would be found only after the limit had been passed.
constexpr uint64_t kNearLimitBytes = 256ULL << 20;
constexpr int kUnbound = -2;
constexpr int kFailed = -1;

struct State {
  std::mutex init_mu;                          // serialises InitForCuInit
  std::unique_ptr<ledger::Ledger> ledger;      // set once, before `enabled`
  std::atomic<int> slot{-1};
  pid_t registered_pid = 0;                    // guarded by init_mu
  std::atomic<int> ordinal_device[kMaxDevices];
  std::atomic<int64_t> next_reconcile_ns[ledger::kLedgerMaxDevices];
  std::atomic<int64_t> inflight[ledger::kLedgerMaxDevices];
  std::atomic<uint64_t> overhead_floor[ledger::kLedgerMaxDevices];
  std::atomic<int64_t> graph_charged[ledger::kLedgerMaxDevices];
  std::atomic<int> device_ordinal[ledger::kLedgerMaxDevices];
  std::mutex reconcile_mu[ledger::kLedgerMaxDevices];  // one reconciliation per device at a time
  std::mutex nvml_mu;                          // our own NVML session and handle cache
  bool nvml_ready = false;                     // guarded by nvml_mu
  nvmlDevice_t nvml_device[ledger::kLedgerMaxDevices] = {};  // guarded by nvml_mu
  std::string device_uuid[ledger::kLedgerMaxDevices];        // guarded by nvml_mu
};

std::atomic<bool> g_enabled{false};
alignas(State) unsigned char g_state_storage[sizeof(State)];
State* g_state = nullptr;
std::once_flag g_state_once;

State& S() {
  std::call_once(g_state_once, [] {
    g_state = new (g_state_storage) State();
    for (auto& d : g_state->ordinal_device) d.store(kUnbound);
    for (auto& t : g_state->next_reconcile_ns) t.store(0);
    for (auto& v : g_state->inflight) v.store(0);
    for (auto& v : g_state->overhead_floor) v.store(0);
    for (auto& v : g_state->graph_charged) v.store(0);
    for (auto& v : g_state->device_ordinal) v.store(-1);
    pthread_atfork(nullptr, nullptr, [] {
      // The child owns none of the parent's allocations and must register itself again.
      ResetAfterFork();
      new (&g_state->init_mu) std::mutex();
      new (&g_state->nvml_mu) std::mutex();
      for (auto& mu : g_state->reconcile_mu) new (&mu) std::mutex();
      for (auto& v : g_state->inflight) v.store(0);
      for (auto& v : g_state->overhead_floor) v.store(0);
      g_state->slot.store(-1);
    });
  });
  return *g_state;
}

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

bool RegisterProcess(State& s, std::string* error) {
  const pid_t pid = getpid();
  if (s.slot.load() >= 0 && s.registered_pid == pid) return true;
  const int slot = s.ledger->RegisterProcess(pid, registration::HostPid(), ledger::ProcessStartTime(pid));
  if (slot < 0) {
    *error = "the ledger's process table is full";
    return false;
  }
  s.registered_pid = pid;
  s.slot.store(slot);
  return true;
}

// Whether the environment states any limit the ledger records (memory, compute, priority,
// oversubscription).
bool StatesLimits(const Config& config) {
  return config.HasAnyMemoryLimit() || config.HasAnySmLimit() || config.task_priority_set || config.oversubscribe;
}

}  // namespace

bool InitForCuInit(std::string* error) {
  State& s = S();
  const Runtime& runtime = GetRuntime();
  const Config& config = runtime.config;
  if (runtime.passthrough()) return true;
  // A compute limit needs the ledger too: its budget is shared by the container's processes there
  // (and so does taking part in priorities: the limiter that yields keeps its state there).
  // The node daemon's answer names the container's ledger (registration.h); the environment's wins.
  const std::string registered_ledger = registration::LedgerPath();
  const bool wanted = config.HasAnyMemoryLimit() || config.HasAnySmLimit() || config.task_priority_set ||
                      !config.shared_cache_path.empty() || !registered_ledger.empty();
  if (!wanted) return true;
  std::lock_guard<std::mutex> lock(s.init_mu);
  if (!s.ledger) {
    const std::string path = !config.shared_cache_path.empty() ? config.shared_cache_path
                             : !registered_ledger.empty()      ? registered_ledger
                                                               : ledger::DefaultLedgerPath();
    ledger::LedgerStatus status;
    std::string disagreement;
    s.ledger = ledger::Ledger::Open(path, ledger::LimitSetFromConfig(config, ledger::Authority::kLibrary), &status, &disagreement);
    if (!s.ledger) {
      *error = status.message;
      return false;
    }
    // An environment that states no limits has nothing to disagree with: the process joins the
    // limits of the ledger its authority wrote (typically vgpu-node's, named by the registration
    // answer). Only limits stated on both sides and different are an inconsistency to report.
    if (!disagreement.empty() && StatesLimits(config)) {
      VGPU_ERROR("the ledger %s holds other limits than this process's environment; the "
                 "ledger's limits apply: %s", path.c_str(), disagreement.c_str());
    } else if (!disagreement.empty()) {
      VGPU_INFO("the environment sets no limits: the limits of ledger %s apply", path.c_str());
    }
    VGPU_INFO("memory accounting against ledger %s", path.c_str());
  }
  if (!RegisterProcess(s, error)) return false;
  g_enabled.store(true, std::memory_order_release);
  return true;
}

bool Enabled() { return g_enabled.load(std::memory_order_relaxed); }

ledger::Ledger* SharedLedger() {
  return g_enabled.load(std::memory_order_acquire) ? S().ledger.get() : nullptr;
}

std::string UuidOfOrdinal(int ordinal) {
  if (!EnsureCudaLoaded() || !g_cuda.cuDeviceGet || !g_cuda.cuDeviceGetUuid_v2) return {};
  CUdevice dev;
  CUuuid uuid;
  if (g_cuda.cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS) return {};
  if (g_cuda.cuDeviceGetUuid_v2(&uuid, dev) != CUDA_SUCCESS) return {};
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char text[48];
  snprintf(text, sizeof(text),
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
           b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return text;
}

int DeviceForOrdinal(int ordinal) {
  if (ordinal < 0 || ordinal >= kMaxDevices) return -1;
  State& s = S();
  const int cached = s.ordinal_device[ordinal].load(std::memory_order_acquire);
  if (cached != kUnbound) return cached;
  const std::string uuid = UuidOfOrdinal(ordinal);
  int device = kFailed;
  if (uuid.empty()) {
    VGPU_ERROR("cannot read the UUID of CUDA device %d; its allocations are refused", ordinal);
  } else {
    // GPU_DEVICES_UUID, when given, says which limit index belongs to which GPU.
    const auto& listed = GetRuntime().config.device_uuids;
    int limit_index = ordinal;
    for (size_t i = 0; i < listed.size(); ++i) {
      if (listed[i] == uuid) limit_index = static_cast<int>(i);
    }
    std::string error;
    device = s.ledger->BindDevice(limit_index, uuid, &error);
    if (device < 0) {
      VGPU_ERROR("CUDA device %d (%s): %s; its allocations are refused", ordinal, uuid.c_str(),
                 error.c_str());
      device = kFailed;
    } else {
      std::lock_guard<std::mutex> lock(s.nvml_mu);
      s.device_uuid[device] = uuid;
      s.device_ordinal[device].store(ordinal);
    }
  }
  s.ordinal_device[ordinal].store(device, std::memory_order_release);
  return device;
}

int CurrentDevice() {
  CUdevice dev;
  if (!g_cuda.cuCtxGetDevice || g_cuda.cuCtxGetDevice(&dev) != CUDA_SUCCESS) return -1;
  return DeviceForOrdinal(static_cast<int>(dev));
}

bool Reserve(int device, uint64_t bytes, bool log_refusal) {
  State& s = S();
  const int slot = s.slot.load(std::memory_order_relaxed);
  const uint64_t limit = s.ledger->MemoryLimit(device);
  if (bytes > 0 && limit > 0 && s.ledger->DeviceUsed(device) + bytes + kNearLimitBytes > limit) Reconcile(device);
  if (s.ledger->TryReserve(slot, device, bytes)) return true;
  // Before refusing: our overhead may have shrunk (a pool trimmed, a module unloaded). Then try
  // once more (TryReserve itself reclaims dead processes before it refuses).
  RefreshAllPools();
  Reconcile(device);
  if (s.ledger->TryReserve(slot, device, bytes)) return true;
  if (log_refusal) {
    VGPU_INFO("refused %" PRIu64 " bytes on ledger device %d: %" PRIu64 " of %" PRIu64 " in use",
              bytes, device, s.ledger->DeviceUsed(device), s.ledger->MemoryLimit(device));
  }
  return false;
}

void Release(int device, uint64_t bytes) {
  State& s = S();
  s.ledger->Release(s.slot.load(std::memory_order_relaxed), device, bytes);
}

uint64_t HostLimit(int device) { return S().ledger->HostLimit(device); }
uint64_t Spilled(int device) { return S().ledger->DeviceSpilled(device); }

bool ReserveHost(int device, uint64_t bytes) {
  State& s = S();
  return s.ledger->TrySpill(s.slot.load(std::memory_order_relaxed), device, bytes);
}

void ReleaseHost(int device, uint64_t bytes) {
  State& s = S();
  s.ledger->ReleaseSpill(s.slot.load(std::memory_order_relaxed), device, bytes);
}

uint64_t Limit(int device) { return S().ledger->MemoryLimit(device); }
uint64_t Used(int device) { return S().ledger->DeviceUsed(device); }

namespace {

// Our own NVML session (nvmlInit is reference-counted, so the application's nvmlShutdown does
// not end it). REQUIRES: s.nvml_mu held.
bool EnsureNvml(State& s) {
  if (s.nvml_ready) return true;
  if (!EnsureNvmlLoaded() || !g_nvml.nvmlInit_v2 || g_nvml.nvmlInit_v2() != NVML_SUCCESS) return false;
  s.nvml_ready = true;
  return true;
}

// NVML's per-process usage of this process on `device`, or -1.
int64_t NvmlProcessUsage(State& s, int device) {
  std::lock_guard<std::mutex> lock(s.nvml_mu);
  if (!EnsureNvml(s) || s.device_uuid[device].empty()) return -1;
  if (s.nvml_device[device] == nullptr &&
      (g_nvml.nvmlDeviceGetHandleByUUID == nullptr ||
       g_nvml.nvmlDeviceGetHandleByUUID(s.device_uuid[device].c_str(), &s.nvml_device[device]) != NVML_SUCCESS)) {
    return -1;
  }
  if (g_nvml.nvmlDeviceGetComputeRunningProcesses_v3 == nullptr) return -1;
  nvmlProcessInfo_t infos[256];
  unsigned int count = 256;
  if (g_nvml.nvmlDeviceGetComputeRunningProcesses_v3(s.nvml_device[device], &count, infos) != NVML_SUCCESS) {
    return -1;
  }
  const unsigned int pid = static_cast<unsigned int>(registration::HostPid());  // NVML lists host pids
  for (unsigned int i = 0; i < count; ++i) {
    if (infos[i].pid == pid) return static_cast<int64_t>(infos[i].usedGpuMemory);
  }
  return 0;  // no context on this device yet
}

}  // namespace

void NoteInflight(int device, int64_t delta) {
  if (device >= 0) S().inflight[device].fetch_add(delta, std::memory_order_acq_rel);
}

void NoteGraphCharge(int device, int64_t delta) {
  if (device >= 0) S().graph_charged[device].fetch_add(delta, std::memory_order_acq_rel);
}

namespace {

// Graph memory charged but not yet reserved by the driver on `device`.
int64_t UnlaunchedGraphMemory(State& s, int device) {
  const int64_t charged = s.graph_charged[device].load(std::memory_order_acquire);
  if (charged <= 0) return 0;
  cuuint64_t reserved = 0;
  const int ordinal = s.device_ordinal[device].load();
  if (ordinal < 0 || g_cuda.cuDeviceGetGraphMemAttribute == nullptr ||
      g_cuda.cuDeviceGetGraphMemAttribute(ordinal, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS) {
    return charged;
  }
  return std::max<int64_t>(0, charged - static_cast<int64_t>(reserved));
}

// Charges of this process on `device` that NVML can see now.
uint64_t VisibleCharge(State& s, int slot, int device) {
  const int64_t charged = static_cast<int64_t>(s.ledger->SlotCharged(slot, device));
  const int64_t hidden = s.inflight[device].load(std::memory_order_acquire) + UnlaunchedGraphMemory(s, device);
  return static_cast<uint64_t>(std::max<int64_t>(0, charged - hidden));
}

}  // namespace

void Reconcile(int device, bool after_context) {
  State& s = S();
  if (device < 0) return;
  s.next_reconcile_ns[device].store(NowNs() + kReconcileIntervalNs, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(s.reconcile_mu[device]);
  const int slot = s.slot.load(std::memory_order_relaxed);
  const uint64_t visible_before = VisibleCharge(s, slot, device);
  const int64_t used = NvmlProcessUsage(s, device);
  if (used < 0) return;
  const uint64_t visible = std::min(visible_before, VisibleCharge(s, slot, device));
  uint64_t overhead = static_cast<uint64_t>(used) > visible ? static_cast<uint64_t>(used) - visible : 0;
  if (after_context && overhead > s.overhead_floor[device].load(std::memory_order_relaxed)) {
    s.overhead_floor[device].store(overhead, std::memory_order_relaxed);
  }
  overhead = std::max(overhead, s.overhead_floor[device].load(std::memory_order_relaxed));
  s.ledger->SetOverhead(slot, device, overhead);
}

void MaybeReconcile(int device) {
  if (device < 0) return;
  if (NowNs() >= S().next_reconcile_ns[device].load(std::memory_order_relaxed)) Reconcile(device);
}

int DeviceForUuid(const std::string& uuid) {
  if (!Enabled() || uuid.empty()) return -1;
  State& s = S();
  {
    std::lock_guard<std::mutex> lock(s.nvml_mu);
    for (int d = 0; d < ledger::kLedgerMaxDevices; ++d) {
      if (s.device_uuid[d] == uuid) return d;
    }
  }
  // Not bound yet (an NVML-only process such as nvidia-smi): enumerate the CUDA devices, which
  // needs the driver initialised. cuInit is idempotent; the real one is called, not our hook.
  auto real_init = reinterpret_cast<Pfn_cuInit>(RealCuda(kHook_cuInit));
  int count = 0;
  if (real_init == nullptr || real_init(0) != CUDA_SUCCESS || !g_cuda.cuDeviceGetCount ||
      g_cuda.cuDeviceGetCount(&count) != CUDA_SUCCESS) {
    return -1;
  }
  for (int ordinal = 0; ordinal < count && ordinal < kMaxDevices; ++ordinal) {
    if (UuidOfOrdinal(ordinal) == uuid) return DeviceForOrdinal(ordinal);
  }
  return -1;
}

}  // namespace vgpu::memory
