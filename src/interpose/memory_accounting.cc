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
#include <vector>

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
  // Bytes being reserved by ReserveUnseen: from just before the ledger is asked until they are
  // in `inflight` (see ReserveUnseen).
  std::atomic<int64_t> reserving[ledger::kLedgerMaxDevices];
  std::atomic<uint64_t> overhead_floor[ledger::kLedgerMaxDevices];
  std::atomic<int64_t> graph_charged[ledger::kLedgerMaxDevices];
  std::atomic<int> device_ordinal[ledger::kLedgerMaxDevices];
  std::atomic<uint64_t> granularity[ledger::kLedgerMaxDevices];  // 0 = not known: 2 MiB
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
    for (auto& v : g_state->reserving) v.store(0);
    for (auto& v : g_state->overhead_floor) v.store(0);
    for (auto& v : g_state->graph_charged) v.store(0);
    for (auto& v : g_state->device_ordinal) v.store(-1);
    for (auto& v : g_state->granularity) v.store(0);
    pthread_atfork(nullptr, nullptr, [] {
      // The child owns none of the parent's allocations and must register itself again.
      ResetAfterFork();
      new (&g_state->init_mu) std::mutex();
      new (&g_state->nvml_mu) std::mutex();
      for (auto& mu : g_state->reconcile_mu) new (&mu) std::mutex();
      for (auto& v : g_state->inflight) v.store(0);
      for (auto& v : g_state->reserving) v.store(0);
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
    std::string disagreement, replaced;
    // Registered while the limits are checked: a ledger an earlier run of the library left behind,
    // held by no live process, takes this process's limits (Ledger::Open), and a process opening
    // it at the same moment finds this one alive.
    ledger::Ledger::Opener opener;
    opener.pid = getpid();
    opener.host_pid = registration::HostPid();
    opener.start_time = ledger::ProcessStartTime(opener.pid);
    opener.states_limits = StatesLimits(config);
    int slot = -1;
    s.ledger = ledger::Ledger::Open(path, ledger::LimitSetFromConfig(config, ledger::Authority::kLibrary), &status,
                                    &disagreement, &opener, &slot, &replaced);
    if (!s.ledger) {
      *error = status.message;
      return false;
    }
    if (slot >= 0) {
      s.registered_pid = opener.pid;
      s.slot.store(slot);
    }
    if (!replaced.empty()) VGPU_INFO("%s", replaced.c_str());
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

namespace {

// The driver's minimum allocation granularity on CUDA ordinal `ordinal` (0 when unknown).
uint64_t AllocationGranularity(int ordinal) {
  if (g_cuda.cuMemGetAllocationGranularity == nullptr) return 0;
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = ordinal;
  size_t granularity = 0;
  if (g_cuda.cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS) {
    return 0;
  }
  return granularity;
}

}  // namespace

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
      s.granularity[device].store(AllocationGranularity(ordinal));
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

uint64_t Headroom(int device) { return GetRuntime().config.MemoryHeadroom(S().ledger->MemoryLimit(device)); }

uint64_t Available(int device) {
  State& s = S();
  const uint64_t limit = s.ledger->MemoryLimit(device);
  const uint64_t taken = s.ledger->DeviceUsed(device) + Headroom(device);
  return limit > taken ? limit - taken : 0;
}

uint64_t ChargeSize(int device, uint64_t bytes) {
  constexpr uint64_t kDefaultGranularity = 2ULL << 20;
  constexpr uint64_t kSmallUnit = 512;
  uint64_t granularity = device >= 0 ? S().granularity[device].load(std::memory_order_relaxed) : 0;
  if (granularity == 0) granularity = kDefaultGranularity;
  const uint64_t unit = bytes > granularity / 2 ? granularity : kSmallUnit;
  if (bytes > UINT64_MAX - unit) return bytes;
  return (bytes + unit - 1) / unit * unit;
}

namespace {

// One ledger reservation. `unseen`: the bytes are marked in flight as they are charged, with no
// moment at which a reconciliation could read them charged and not in flight (ReserveUnseen).
bool TryCharge(State& s, int slot, int device, uint64_t bytes, uint64_t headroom, bool unseen) {
  if (!unseen) return s.ledger->TryReserve(slot, device, bytes, headroom);
  s.reserving[device].fetch_add(static_cast<int64_t>(bytes), std::memory_order_acq_rel);
  const bool reserved = s.ledger->TryReserve(slot, device, bytes, headroom);
  if (reserved) s.inflight[device].fetch_add(static_cast<int64_t>(bytes), std::memory_order_acq_rel);
  s.reserving[device].fetch_sub(static_cast<int64_t>(bytes), std::memory_order_acq_rel);
  return reserved;
}

bool ReserveImpl(int device, uint64_t bytes, bool log_refusal, bool unseen) {
  State& s = S();
  const int slot = s.slot.load(std::memory_order_relaxed);
  const uint64_t limit = s.ledger->MemoryLimit(device);
  const uint64_t headroom = Headroom(device);
  if (bytes > 0 && limit > 0 && s.ledger->DeviceUsed(device) + bytes + headroom + kNearLimitBytes > limit) {
    Reconcile(device);
  }
  if (TryCharge(s, slot, device, bytes, headroom, unseen)) return true;
  // Before refusing: our overhead may have shrunk (a pool trimmed, a module unloaded), or a dead
  // process's memory may have been let go by the driver (Reconcile tells the ledger). Then try
  // once more (TryReserve itself reclaims dead processes before it refuses).
  RefreshAllPools();
  Reconcile(device);
  if (TryCharge(s, slot, device, bytes, headroom, unseen)) return true;
  if (log_refusal) {
    VGPU_INFO("refused %" PRIu64 " bytes on ledger device %d: %" PRIu64 " of %" PRIu64 " in use, %" PRIu64
              " kept free as headroom", bytes, device, s.ledger->DeviceUsed(device), s.ledger->MemoryLimit(device),
              headroom);
  }
  return false;
}

}  // namespace

bool Reserve(int device, uint64_t bytes, bool log_refusal) {
  return ReserveImpl(device, bytes, log_refusal, /*unseen=*/false);
}

bool ReserveUnseen(int device, uint64_t bytes, bool log_refusal) {
  return ReserveImpl(device, bytes, log_refusal, /*unseen=*/true);
}

bool ReserveIntoHeadroom(int device, uint64_t bytes) {
  State& s = S();
  return s.ledger->TryReserve(s.slot.load(std::memory_order_relaxed), device, bytes, /*keep_free=*/0);
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

// Whether NVML can be asked at all (its library loaded and initialised).
bool NvmlAnswers(State& s) {
  std::lock_guard<std::mutex> lock(s.nvml_mu);
  return EnsureNvml(s);
}

// NVML's list of every compute process on `device` (host pids), read at *read_at (the ledger's
// drain clock, read before asking NVML). false when NVML cannot answer.
bool NvmlProcesses(State& s, int device, std::vector<ledger::Ledger::DriverProcess>* out, uint64_t* read_at) {
  std::lock_guard<std::mutex> lock(s.nvml_mu);
  if (!EnsureNvml(s) || s.device_uuid[device].empty()) return false;
  if (s.nvml_device[device] == nullptr &&
      (g_nvml.nvmlDeviceGetHandleByUUID == nullptr ||
       g_nvml.nvmlDeviceGetHandleByUUID(s.device_uuid[device].c_str(), &s.nvml_device[device]) != NVML_SUCCESS)) {
    return false;
  }
  if (g_nvml.nvmlDeviceGetComputeRunningProcesses_v3 == nullptr) return false;
  *read_at = ledger::Ledger::ClockNs();
  std::vector<nvmlProcessInfo_t> infos(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned int count = static_cast<unsigned int>(infos.size());
    const nvmlReturn_t rc = g_nvml.nvmlDeviceGetComputeRunningProcesses_v3(s.nvml_device[device], &count, infos.data());
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
      infos.resize(std::max<size_t>(count + 16, infos.size() * 2));  // processes came and went
      continue;
    }
    if (rc != NVML_SUCCESS) return false;
    out->clear();
    for (unsigned int i = 0; i < count; ++i) {
      const uint64_t bytes = infos[i].usedGpuMemory == NVML_VALUE_NOT_AVAILABLE_ULL ? 0 : infos[i].usedGpuMemory;
      out->push_back({static_cast<int32_t>(infos[i].pid), bytes});
    }
    return true;
  }
  return false;
}

// Reads NVML's list for `device` into *processes and hands it to the ledger: what the
// container's processes hold beyond their charges, and which dead ones the driver let go
// (Ledger::ApplyDriverView). false when NVML cannot answer.
bool ReadDriverView(State& s, int device, std::vector<ledger::Ledger::DriverProcess>* processes) {
  uint64_t read_at = 0;
  if (!NvmlProcesses(s, device, processes, &read_at)) return false;
  s.ledger->ApplyDriverView(device, processes->data(), static_cast<int>(processes->size()), read_at);
  return true;
}

// This process's figure in an NVML list (0: no context on the device yet).
int64_t OwnUsage(const std::vector<ledger::Ledger::DriverProcess>& processes) {
  const int32_t pid = registration::HostPid();  // NVML lists host pids
  for (const auto& p : processes) {
    if (p.host_pid == pid) return static_cast<int64_t>(p.bytes);
  }
  return 0;
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
  const int64_t hidden = s.inflight[device].load(std::memory_order_acquire) +
                         s.reserving[device].load(std::memory_order_acquire) + UnlaunchedGraphMemory(s, device);
  return static_cast<uint64_t>(std::max<int64_t>(0, charged - hidden));
}

}  // namespace

bool Reconcile(int device, bool after_context) {
  State& s = S();
  if (device < 0) return false;
  s.next_reconcile_ns[device].store(NowNs() + kReconcileIntervalNs, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(s.reconcile_mu[device]);
  const int slot = s.slot.load(std::memory_order_relaxed);
  const uint64_t visible_before = VisibleCharge(s, slot, device);
  std::vector<ledger::Ledger::DriverProcess> processes;
  if (!ReadDriverView(s, device, &processes)) return false;
  const int64_t used = OwnUsage(processes);
  const uint64_t visible = std::min(visible_before, VisibleCharge(s, slot, device));
  uint64_t overhead = static_cast<uint64_t>(used) > visible ? static_cast<uint64_t>(used) - visible : 0;
  if (after_context && overhead > s.overhead_floor[device].load(std::memory_order_relaxed)) {
    s.overhead_floor[device].store(overhead, std::memory_order_relaxed);
  }
  overhead = std::max(overhead, s.overhead_floor[device].load(std::memory_order_relaxed));
  s.ledger->SetOverhead(slot, device, overhead);
  return true;
}

void RefreshFromDriver(int device) {
  if (device < 0) return;
  std::vector<ledger::Ledger::DriverProcess> processes;
  ReadDriverView(S(), device, &processes);
}

bool ReserveContext(int ordinal, bool new_memory, ContextCharge* charge) {
  *charge = ContextCharge{};
  if (!Enabled() || !new_memory) return true;
  const int device = DeviceForOrdinal(ordinal);
  if (device < 0 || Limit(device) == 0) return true;
  State& s = S();
  const int slot = s.slot.load(std::memory_order_relaxed);
  // The size learned from the container's earlier contexts. Before the first one is measured
  // it is a generous guess (a runtime context is 518 MiB on an H200; the limit less the headroom
  // when that is smaller), held only where all of it fits: processes starting together then wait
  // for the first measurement instead of creating contexts on a guess that may be short. The
  // guess used to be cut to the room left, and tried before looking for a measurement that had
  // come meanwhile: on the simulated driver, of six processes starting together under 1 GiB,
  // one reserved the 48 MiB left for its 64 MiB context while the others' allocations filled the
  // rest, 16 MiB over the limit until FinishContext refused it. Only once the wait is over with
  // no measurement is a guess cut to what is left. What a guess holds is never refused outright:
  // FinishContext measures the real size and refuses a context that does not fit after all.
  // Without NVML (a container given the driver's compute libraries only) nothing is ever
  // measured and every context is charged its guess: there is nothing to wait for.
  constexpr uint64_t kFirstContextGuess = 1ULL << 30;
  constexpr int64_t kWaitForMeasurementNs = 5'000'000'000;
  charge->device = device;
  charge->overhead_before = s.ledger->SlotOverhead(slot, device);
  uint64_t estimate = s.ledger->ContextBytes(device);
  if (estimate == 0) {
    const uint64_t room = Limit(device) > Headroom(device) ? Limit(device) - Headroom(device) : 0;
    const int64_t deadline = NowNs() + (NvmlAnswers(s) ? kWaitForMeasurementNs : 0);
    for (;;) {
      estimate = s.ledger->ContextBytes(device);
      if (estimate > 0) break;  // measured meanwhile: reserve that below
      const bool late = NowNs() >= deadline;
      const uint64_t guess = std::min(kFirstContextGuess, late ? Available(device) : room);
      if (guess > 0 && ReserveUnseen(device, guess, /*log_refusal=*/false)) {  // not in NVML's figure yet
        charge->reserved = guess;
        return true;
      }
      if (late) return true;  // nothing to go by: FinishContext decides
      const timespec pause{0, 5'000'000};  // another process is creating the first context
      nanosleep(&pause, nullptr);
    }
  }
  if (!ReserveUnseen(device, estimate)) {  // not in NVML's figure yet
    VGPU_ERROR("a new context on CUDA device %d needs about %" PRIu64 " MiB and does not fit the memory limit "
               "(%" PRIu64 " MiB, %" PRIu64 " MiB in use by the container); refused with CUDA_ERROR_OUT_OF_MEMORY",
               ordinal, estimate >> 20, Limit(device) >> 20, Used(device) >> 20);
    charge->device = -1;
    return false;
  }
  charge->reserved = estimate;
  return true;
}

bool FinishContext(const ContextCharge& charge, bool created) {
  if (charge.device < 0) return true;
  State& s = S();
  const int slot = s.slot.load(std::memory_order_relaxed);
  bool measured = false;
  if (created) {
    measured = Reconcile(charge.device, /*after_context=*/true);
    const uint64_t after = s.ledger->SlotOverhead(slot, charge.device);
    if (measured && after > charge.overhead_before) s.ledger->NoteContextBytes(charge.device, after - charge.overhead_before);
    // Without NVML the reservation stands in for the context's memory.
    if (!measured && charge.reserved > 0) {
      s.ledger->SetOverhead(slot, charge.device, charge.overhead_before + charge.reserved);
    }
  }
  if (charge.reserved > 0) {
    Release(charge.device, charge.reserved);
    NoteInflight(charge.device, -static_cast<int64_t>(charge.reserved));
  }
  if (!created) return true;
  const uint64_t limit = Limit(charge.device);
  return limit == 0 || Used(charge.device) <= limit;
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
