#include "interpose/compute_limit.h"

#include <pthread.h>

#include <mutex>
#include <new>

#include "common/log.h"
#include "compute/controller.h"
#include "compute/limiter.h"
#include "compute/time_source.h"
#include "interpose/compute_events.h"
#include "interpose/driver_imports.h"
#include "interpose/memory_accounting.h"
#include "interpose/runtime.h"
#include "ledger/ledger.h"

namespace vgpu::compute_limit {

using compute::ComputeLimits;

constexpr int64_t kTickPeriodNs = 2'000'000;  // opportunistic Tick at most this often per device

// One device's limiter. Never destroyed (launching threads may hold a pointer at any time; after
// fork the child abandons it). Members are constant after construction except where noted.
struct DeviceLimiter {
  DeviceLimiter(int ledger_device, compute::ComputeShareState* state, const ComputeLimits& limits,
                CUcontext context)
      : device(ledger_device),
        tracker(&ops, compute::BusyTrackerOptions{}),
        controller(state, /*board=*/nullptr, /*signals=*/nullptr, compute::ControllerOptions{}, limits),
        limiter(&controller, &tracker),
        ctx(context),
        applied(limits) {}

  const int device;                         // ledger device index
  RealEventOps ops;
  compute::BusyTracker tracker;
  compute::Controller controller;
  compute::ComputeLimiter limiter;
  std::atomic<CUcontext> ctx;               // the context owning the tracker's events
  std::atomic<int64_t> next_tick_ns{0};
  std::mutex mu;                            // guards re-binding and `applied`
  ComputeLimits applied;                    // guarded by mu
};

namespace {

enum DeviceState : int { kUnknown = 0, kLimited = 1, kUnlimited = 2 };

struct Registry {
  std::mutex mu;  // serialises creation
  std::atomic<DeviceLimiter*> limiters[ledger::kLedgerMaxDevices];
  std::atomic<int> state[ledger::kLedgerMaxDevices];
};

alignas(Registry) unsigned char g_registry_storage[sizeof(Registry)];
Registry* g_registry = nullptr;
pthread_once_t g_registry_once = PTHREAD_ONCE_INIT;

void ForgetAll() {
  for (int d = 0; d < ledger::kLedgerMaxDevices; ++d) {
    g_registry->limiters[d].store(nullptr, std::memory_order_relaxed);  // abandoned, never freed
    g_registry->state[d].store(kUnknown, std::memory_order_relaxed);
  }
}

void InitRegistry() {
  g_registry = new (g_registry_storage) Registry();
  ForgetAll();
  // The child has none of the parent's contexts (nor its tracker's mutex owners): start afresh.
  pthread_atfork(nullptr, nullptr, [] {
    new (&g_registry->mu) std::mutex();
    ForgetAll();
  });
}

Registry& R() {
  pthread_once(&g_registry_once, InitRegistry);
  return *g_registry;
}

bool IsLimit(int percent) { return percent > 0 && percent < 100; }

ComputeLimits LimitsOf(const ledger::Ledger& ledger, int device) {
  return ComputeLimits::FromPercent(ledger.SmLimit(device), ledger.SmSoftLimit(device), ledger.TaskPriority());
}

DeviceLimiter* CreateLocked(Registry& r, int device, CUcontext ctx) {
  ledger::Ledger* ledger = memory::SharedLedger();
  if (ledger == nullptr || !IsLimit(ledger->SmLimit(device)) || ledger->ComputeState(device) == nullptr) {
    r.state[device].store(kUnlimited, std::memory_order_release);
    return nullptr;
  }
  auto* created = new (std::nothrow) DeviceLimiter(device, ledger->ComputeState(device), LimitsOf(*ledger, device), ctx);
  if (created == nullptr) return nullptr;
  VGPU_INFO("compute limit %d%% on ledger device %d", ledger->SmLimit(device), device);
  r.limiters[device].store(created, std::memory_order_release);
  r.state[device].store(kLimited, std::memory_order_release);
  return created;
}

// The limiter of `device`, created on first use when `create`; nullptr when it has no limit.
DeviceLimiter* Find(int device, CUcontext ctx, bool create) {
  if (device < 0 || device >= ledger::kLedgerMaxDevices) return nullptr;
  Registry& r = R();
  if (DeviceLimiter* found = r.limiters[device].load(std::memory_order_acquire)) return found;
  if (!create || r.state[device].load(std::memory_order_acquire) == kUnlimited) return nullptr;
  std::lock_guard<std::mutex> lock(r.mu);
  if (DeviceLimiter* found = r.limiters[device].load(std::memory_order_acquire)) return found;
  if (r.state[device].load(std::memory_order_acquire) == kUnlimited) return nullptr;
  return CreateLocked(r, device, ctx);
}

CUcontext CurrentContext() {
  CUcontext ctx = nullptr;
  if (g_cuda.cuCtxGetCurrent == nullptr || g_cuda.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS) return nullptr;
  return ctx;
}

// A launch from another context than the one owning the events: their handles are useless
// there, so the tracker starts afresh in the new context (the budget, in the ledger, is kept).
void BindContext(DeviceLimiter* dl, CUcontext ctx) {
  if (__builtin_expect(dl->ctx.load(std::memory_order_acquire) == ctx, 1)) return;
  std::lock_guard<std::mutex> lock(dl->mu);
  if (dl->ctx.load(std::memory_order_relaxed) == ctx) return;
  dl->limiter.Reset(/*destroy_events=*/false);
  dl->ctx.store(ctx, std::memory_order_release);
}

// The current context's limiter if it exists and owns the events; never creates one.
DeviceLimiter* CurrentLimiter() {
  const CUcontext ctx = CurrentContext();
  if (ctx == nullptr) return nullptr;
  DeviceLimiter* dl = Find(memory::CurrentDevice(), ctx, /*create=*/false);
  return dl != nullptr && dl->ctx.load(std::memory_order_acquire) == ctx ? dl : nullptr;
}

// Limits the authority rewrote in the ledger take effect here (at most every tick).
void RefreshLimits(DeviceLimiter* dl) {
  ledger::Ledger* ledger = memory::SharedLedger();
  if (ledger == nullptr) return;
  const ComputeLimits now = LimitsOf(*ledger, dl->device);
  std::lock_guard<std::mutex> lock(dl->mu);
  if (now.hard_ppm == dl->applied.hard_ppm && now.soft_ppm == dl->applied.soft_ppm &&
      now.task_priority == dl->applied.task_priority) {
    return;
  }
  dl->applied = now;
  dl->controller.SetLimits(now);
}

void MaybeTick(DeviceLimiter* dl, int64_t now) {
  int64_t due = dl->next_tick_ns.load(std::memory_order_relaxed);
  if (now < due || !dl->next_tick_ns.compare_exchange_strong(due, now + kTickPeriodNs,
                                                             std::memory_order_relaxed)) {
    return;
  }
  dl->limiter.Tick(now);
  RefreshLimits(dl);
}

bool Capturing(CUstream stream, bool ptsz) {
  auto is_capturing = ptsz ? g_cuda.cuStreamIsCapturing_ptsz : g_cuda.cuStreamIsCapturing;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (is_capturing == nullptr || is_capturing(stream, &status) != CUDA_SUCCESS) return false;
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

}  // namespace

void InitForCuInit() {
  const Runtime& runtime = GetRuntime();
  if (runtime.passthrough() || runtime.config.core_policy == CorePolicy::kDisable) return;
  ledger::Ledger* ledger = memory::SharedLedger();
  if (ledger == nullptr) return;
  const ledger::LimitSet limits = ledger->Limits();
  bool any = IsLimit(limits.default_sm_limit);
  for (const ledger::DeviceLimit& device : limits.devices) any = any || IsLimit(device.sm_limit);
  if (!any) return;
  R();
  g_compute_enabled.store(true, std::memory_order_release);
}

LaunchGuard::LaunchGuard(CUstream stream, bool ptsz) {
  const CUcontext ctx = CurrentContext();
  if (ctx == nullptr) return;  // the driver refuses the launch the same way
  DeviceLimiter* dl = Find(memory::CurrentDevice(), ctx, /*create=*/true);
  if (dl == nullptr || Capturing(stream, ptsz)) return;
  BindContext(dl, ctx);
  ticket_ = dl->limiter.WaitForAdmission(StreamKeyOf(stream, ptsz), compute::SystemClock(),
                                         compute::SystemSleeper());
  device_ = dl;
}

CUresult LaunchGuard::Finish(CUresult result) {
  if (device_ == nullptr) return result;
  const int64_t now = compute::SystemClock()->NowNs();
  device_->limiter.AfterLaunch(ticket_, result == CUDA_SUCCESS, now);
  MaybeTick(device_, now);
  return result;
}

void BeforeSynchronize() {
  if (DeviceLimiter* dl = CurrentLimiter()) dl->limiter.BeforeSynchronize(compute::SystemClock()->NowNs());
}

void AfterSynchronize() {
  if (DeviceLimiter* dl = CurrentLimiter()) MaybeTick(dl, compute::SystemClock()->NowNs());
}

void OnStreamDestroyed(CUstream stream) {
  // The stream may belong to any device's limiter; a limiter that never saw it ignores the call.
  const compute::StreamKey key = StreamKeyOf(stream, /*ptsz=*/false);
  const int64_t now = compute::SystemClock()->NowNs();
  Registry& r = R();
  for (int d = 0; d < ledger::kLedgerMaxDevices; ++d) {
    if (DeviceLimiter* dl = r.limiters[d].load(std::memory_order_acquire)) dl->limiter.OnStreamDestroyed(key, now);
  }
}

}  // namespace vgpu::compute_limit

namespace vgpu::compute_limit {
namespace {

// At debug level, what each limiter measured over the process's life: the figures to compare
// with an outside measurement (nvidia-smi, a throughput ratio) when a share is off target.
__attribute__((destructor)) void LogSummaries() {
  if (g_registry == nullptr || !LogEnabled(LogLevel::kDebug)) return;
  const int64_t now = compute::SystemClock()->NowNs();
  for (int d = 0; d < ledger::kLedgerMaxDevices; ++d) {
    DeviceLimiter* dl = g_registry->limiters[d].load(std::memory_order_acquire);
    if (dl == nullptr) continue;
    const compute::ControllerSnapshot c = dl->controller.Snapshot(now);
    const compute::TrackerStats t = dl->tracker.stats();
    VGPU_LOG_UNLIMITED(LogLevel::kDebug,
                       "compute device %d: target %d ppm, measured %d ppm, correction %d ppm, busy %.1f ms, "
                       "throttled %.1f ms; %lld launches, %lld marks (%lld begins), %lld queries, %lld event errors",
                       d, c.target_ppm, c.measured_ppm, c.correction_ppm, c.busy_total_ns / 1e6,
                       c.throttled_total_ns / 1e6, static_cast<long long>(t.launches), static_cast<long long>(t.marks),
                       static_cast<long long>(t.begins), static_cast<long long>(t.queries),
                       static_cast<long long>(t.event_errors));
  }
}

}  // namespace
}  // namespace vgpu::compute_limit
