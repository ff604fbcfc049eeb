#include "interpose/compute_limit.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "common/log.h"
#include "compute/controller.h"
#include "compute/limiter.h"
#include "compute/time_source.h"
#include "compute/trace.h"
#include "interpose/compute_events.h"
#include "interpose/compute_signals.h"
#include "interpose/driver_imports.h"
#include "interpose/memory_accounting.h"
#include "interpose/runtime.h"
#include "ledger/board.h"
#include "ledger/ledger.h"

namespace vgpu::compute_limit {

using compute::ComputeLimits;

constexpr int64_t kTickPeriodNs = 2'000'000;  // opportunistic Tick at most this often per device

// One device's limiter. Never destroyed (launching threads may hold a pointer at any time; after
// fork the child abandons it). Members are constant after construction except where noted.
struct DeviceLimiter {
  DeviceLimiter(int ledger_device, compute::ComputeShareState* state, compute::BusyRing* ring,
                const ComputeLimits& limits, CUcontext context, const std::string& uuid,
                compute::PriorityBoard* board, compute::GpuTurn* turn, const compute::ControllerOptions& options)
      : device(ledger_device),
        signals(uuid),
        tracker(&ops, compute::BusyTrackerOptions{}, ring),
        controller(state, board, &signals, options, limits, turn),
        limiter(&controller, &tracker),
        ctx(context),
        applied(limits) {}

  const int device;                         // ledger device index
  NvmlLoadSignals signals;                  // sampled by the monitor thread only
  RealEventOps ops;
  compute::BusyTracker tracker;
  compute::Controller controller;
  compute::ComputeLimiter limiter;
  std::atomic<CUcontext> ctx;               // the context owning the tracker's events
  std::atomic<int64_t> next_tick_ns{0};
  // The monitor's light-measurement verdicts, by compute::Controller::LightRefusal (index 0: light
  // allowed), for the summary at exit; written by the monitor thread only (none with
  // VGPU_COMPUTE_LIGHT=false).
  std::atomic<int64_t> light_verdicts[compute::Controller::kLightRefusals] = {};
  std::mutex mu;                            // guards re-binding and `applied`
  ComputeLimits applied;                    // guarded by mu
};

namespace {

enum DeviceState : int { kUnknown = 0, kLimited = 1, kUnlimited = 2 };

struct Registry {
  std::mutex mu;  // serialises creation
  std::atomic<DeviceLimiter*> limiters[ledger::kLedgerMaxDevices];
  std::atomic<int> state[ledger::kLedgerMaxDevices];
  bool monitor_running = false;  // guarded by mu
};

// Constant after InitForCuInit (set before g_compute_enabled is published).
bool g_priorities = false;            // CUDA_TASK_PRIORITY given: unlimited devices get a limiter too
bool g_turns = true;                  // VGPU_COMPUTE_TURNS
bool g_light = true;                  // VGPU_COMPUTE_LIGHT
bool g_run_hold = true;               // VGPU_COMPUTE_RUN_HOLD
bool g_give_way = true;               // VGPU_COMPUTE_GIVE_WAY
int64_t g_period_ns = 0;              // VGPU_COMPUTE_PERIOD (0: bursts; set from the config)
ledger::Board* g_board = nullptr;     // the node-wide board, or nullptr (priorities then inactive)
compute::ComputeTrace* g_trace = nullptr;  // VGPU_COMPUTE_TRACE, or nullptr; never destroyed
std::string* g_trace_path = nullptr;       // its file (%p replaced)

// VGPU_COMPUTE_TRACE's records of a device's busy intervals, charges and launching threads' sleeps.
void TraceInterval(void* context, int64_t begin_ns, int64_t end_ns) {
  g_trace->Add(compute::ComputeTrace::kBusy, static_cast<DeviceLimiter*>(context)->device, begin_ns, end_ns);
}

void TraceCharge(void* context, int64_t now, int64_t estimated_ns, int64_t measured_ns, int64_t unmeasured_ns) {
  const int device = static_cast<DeviceLimiter*>(context)->device;
  g_trace->Add(compute::ComputeTrace::kCharge, device, now, estimated_ns, measured_ns);
  if (unmeasured_ns > 0) g_trace->Add(compute::ComputeTrace::kUnmeasured, device, now, unmeasured_ns);
}

class TraceSleeper final : public compute::Sleeper {
 public:
  explicit TraceSleeper(int device) : device_(device) {}
  void SleepNs(int64_t ns) override {
    g_trace->Add(compute::ComputeTrace::kSleep, device_, compute::SystemClock()->NowNs(), ns);
    compute::SystemSleeper()->SleepNs(ns);
  }

 private:
  const int device_;
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
    g_trace = nullptr;  // the parent's records are the parent's; cuInit in the child starts its own
    g_registry->monitor_running = false;  // threads do not survive fork
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

std::string UuidOfDevice(const ledger::Ledger& ledger, int device) {
  for (const ledger::DeviceUsage& d : ledger.Read().devices) {
    if (d.index == device) return d.uuid;
  }
  return {};
}

void StartMonitorLocked(Registry& r);

DeviceLimiter* CreateLocked(Registry& r, int device, CUcontext ctx) {
  ledger::Ledger* ledger = memory::SharedLedger();
  if (ledger == nullptr || (!IsLimit(ledger->SmLimit(device)) && !g_priorities) ||
      ledger->ComputeState(device) == nullptr) {
    r.state[device].store(kUnlimited, std::memory_order_release);
    return nullptr;
  }
  const std::string uuid = UuidOfDevice(*ledger, device);
  compute::PriorityBoard* board = nullptr;
  compute::GpuTurn* turn = nullptr;
  if (g_board != nullptr) {
    std::string error;
    board = g_board->Lookup(uuid, &error, &turn);
    if (board == nullptr) {
      VGPU_WARN("priorities and turns inactive on ledger device %d: %s", device, error.c_str());
      turn = nullptr;
    }
  }
  compute::ControllerOptions options;
  options.take_turns = g_turns;
  if (!g_run_hold) {
    options.run_hold_ns = 0;
    options.charge_held_runs = false;
  }
  if (!g_give_way) options.light_waiter_queue_ns = 0;
  options.period_ns = g_period_ns;
  auto* created = new (std::nothrow) DeviceLimiter(device, ledger->ComputeState(device), ledger->ComputeBusy(device),
                                                   LimitsOf(*ledger, device), ctx, uuid, board, turn, options);
  if (created == nullptr) return nullptr;
  if (g_trace != nullptr) {
    created->tracker.ObserveIntervals(TraceInterval, created);
    created->limiter.ObserveCharges(TraceCharge, created);
  }
  VGPU_INFO("compute limit %d%% (soft %d%%, priority %d, runs of share x %lld ms) on ledger device %d (%s)",
            ledger->SmLimit(device), ledger->SmSoftLimit(device), ledger->TaskPriority(),
            static_cast<long long>(g_period_ns / 1'000'000), device, uuid.c_str());
  r.limiters[device].store(created, std::memory_order_release);
  r.state[device].store(kLimited, std::memory_order_release);
  StartMonitorLocked(r);
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

// --- The monitor thread ----------------------------------------------------------------------
// Started with the first limiter. Every kMonitorPeriodNs it polls completions of limiters with
// work in flight (so a long kernel keeps the priority heartbeat alive and its busy time is
// charged while the application waits in a synchronisation we do not see), and every
// kSignalPeriodNs it samples NVML for the soft limit, the reference share and light measurement
// (VGPU_COMPUTE_LIGHT: docs/compute.md). It never launches and never blocks a launching thread
// (the limiter's locks are held briefly).

constexpr int64_t kMonitorPeriodNs = 5'000'000;
constexpr int64_t kMonitorIdlePeriodNs = 50'000'000;  // nothing launched for kIdleAfterNs
constexpr int64_t kIdleAfterNs = 1'000'000'000;
constexpr int64_t kSignalPeriodNs = 100'000'000;

std::vector<int32_t> ContainerPids(const ledger::Ledger& ledger) {
  std::vector<int32_t> pids;
  for (const ledger::ProcessUsage& p : ledger.Read().processes) pids.push_back(p.host_pid > 0 ? p.host_pid : p.pid);
  return pids;
}

void* MonitorMain(void*) {
  Registry& r = R();
  // Relaxed: this thread never captures, and in the default (global) mode its event queries
  // would count as unsafe calls during an application thread's capture and invalidate it.
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (g_cuda.cuThreadExchangeStreamCaptureMode != nullptr) g_cuda.cuThreadExchangeStreamCaptureMode(&mode);
  CUcontext current = nullptr;
  int64_t next_signals = 0;
  int64_t period = kMonitorPeriodNs;
  for (;;) {
    const struct timespec pause = {0, static_cast<long>(period)};
    nanosleep(&pause, nullptr);
    const int64_t now = compute::SystemClock()->NowNs();
    const bool sample = now >= next_signals;
    if (sample) next_signals = now + kSignalPeriodNs;
    bool active = false;
    std::vector<int32_t> pids;  // the container's processes, read once per sampling pass
    if (sample) {
      if (ledger::Ledger* ledger = memory::SharedLedger()) pids = ContainerPids(*ledger);
    }
    for (int d = 0; d < ledger::kLedgerMaxDevices; ++d) {
      DeviceLimiter* dl = r.limiters[d].load(std::memory_order_acquire);
      if (dl == nullptr) continue;
      if (dl->tracker.HasPendingWork()) {
        active = true;
        const CUcontext ctx = dl->ctx.load(std::memory_order_acquire);
        if (ctx != current && g_cuda.cuCtxSetCurrent != nullptr && g_cuda.cuCtxSetCurrent(ctx) == CUDA_SUCCESS) {
          current = ctx;
        }
        if (ctx == current) MaybeTick(dl, now);
      } else {
        dl->controller.MaybeUpdate(now);
      }
      active = active || now - dl->controller.LastActivityNs() < kIdleAfterNs;
      if (sample) {
        dl->signals.Sample(pids, dl->controller.Snapshot(now).measured_ppm / 1e6, now);
        // Below its limit by NVML's account of the whole GPU, and the container's only
        // process: measure cheaply until a launch is told to wait or the next sample says otherwise.
        const compute::Controller::LightRefusal why =
            dl->controller.LightRefusalOf(dl->signals.device_busy(), static_cast<int>(pids.size()), now);
        if (g_light) dl->light_verdicts[static_cast<int>(why)].fetch_add(1, std::memory_order_relaxed);
        dl->tracker.SetLight(g_light && why == compute::Controller::LightRefusal::kNone, now);
        dl->tracker.SetBankLight(g_light && compute::Controller::BankMayDecide(why));
      }
    }
    period = active ? kMonitorPeriodNs : kMonitorIdlePeriodNs;
  }
  return nullptr;
}

void StartMonitorLocked(Registry& r) {
  if (r.monitor_running) return;
  // The thread must never take the application's signals.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t thread;
  const int rc = pthread_create(&thread, nullptr, MonitorMain, nullptr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) {
    VGPU_WARN("compute monitor thread not started (error %d): no soft limit, priority heartbeats only "
              "from launches", rc);
    return;
  }
  pthread_setname_np(thread, "vgpu-monitor");
  pthread_detach(thread);
  r.monitor_running = true;
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
  const bool priorities = runtime.config.task_priority_set;
  if (!any && !priorities) return;
  Registry& r = R();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (g_board == nullptr) {
      const std::string path = runtime.config.board_path.empty() ? ledger::kDefaultBoardPath : runtime.config.board_path;
      ledger::LedgerStatus status;
      std::unique_ptr<ledger::Board> board = ledger::Board::Open(path, &status);
      if (board == nullptr) {
        VGPU_WARN("priorities and turns inactive (limits still apply): %s", status.message.c_str());
      } else {
        g_board = board.release();  // never destroyed: launching threads may use it until exit
      }
    }
    g_priorities = priorities;
    g_turns = runtime.config.compute_turns;
    g_light = runtime.config.compute_light;
    g_run_hold = runtime.config.compute_run_hold;
    g_give_way = runtime.config.compute_give_way;
    g_period_ns = runtime.config.compute_period_ms * 1'000'000;
    if (g_trace == nullptr && !runtime.config.compute_trace_path.empty()) {
      g_trace_path = new std::string(compute::TracePath(runtime.config.compute_trace_path, getpid()));
      g_trace = new (std::nothrow) compute::ComputeTrace();
      VGPU_INFO("compute trace: %s (written at exit)", g_trace_path->c_str());
    }
  }
  g_compute_enabled.store(true, std::memory_order_release);
}

LaunchGuard::LaunchGuard(CUstream stream, bool ptsz, bool starts_after_return) {
  const CUcontext ctx = CurrentContext();
  if (ctx == nullptr) return;  // the driver refuses the launch the same way
  DeviceLimiter* dl = Find(memory::CurrentDevice(), ctx, /*create=*/true);
  if (dl == nullptr || Capturing(stream, ptsz)) return;
  BindContext(dl, ctx);
  TraceSleeper traced(dl->device);
  compute::Sleeper* sleeper = compute::SystemSleeper();
  if (__builtin_expect(g_trace != nullptr, 0)) {
    trace_start_ns_ = compute::SystemClock()->NowNs();
    sleeper = &traced;
  }
  ticket_ = dl->limiter.WaitForAdmission(StreamKeyOf(stream, ptsz), compute::SystemClock(), sleeper);
  ticket_.starts_after_return = starts_after_return;
  device_ = dl;
}

CUresult LaunchGuard::Finish(CUresult result) {
  if (device_ == nullptr) return result;
  const int64_t now = compute::SystemClock()->NowNs();
  device_->limiter.AfterLaunch(ticket_, result == CUDA_SUCCESS, now);
  MaybeTick(device_, now);
  if (__builtin_expect(g_trace != nullptr, 0)) {  // the hook's whole time, its bookkeeping after the launch included
    g_trace->Add(compute::ComputeTrace::kLaunch, device_->device, trace_start_ns_, compute::SystemClock()->NowNs());
  }
  return result;
}

void BeforeSynchronize() {
  if (DeviceLimiter* dl = CurrentLimiter()) dl->limiter.BeforeSynchronize(compute::SystemClock()->NowNs());
}

void BeforeStreamWait(CUstream stream, bool ptsz) {
  DeviceLimiter* dl = CurrentLimiter();
  if (dl == nullptr) return;
  const compute::StreamKey key = StreamKeyOf(stream, ptsz);
  const int64_t now = compute::SystemClock()->NowNs();
  if (key == reinterpret_cast<uintptr_t>(CU_STREAM_LEGACY)) {
    dl->limiter.BeforeSynchronize(now);
  } else {
    dl->limiter.BeforeWait(now, &key);
  }
}

void BeforeEventWait() {
  if (DeviceLimiter* dl = CurrentLimiter()) dl->limiter.BeforeWait(compute::SystemClock()->NowNs(), nullptr);
}

void AfterSynchronize() {
  if (DeviceLimiter* dl = CurrentLimiter()) MaybeTick(dl, compute::SystemClock()->NowNs());
}

int64_t TraceNow() { return __builtin_expect(g_trace != nullptr, 0) ? compute::SystemClock()->NowNs() : 0; }

void TraceSync(int64_t entry_ns, int64_t call_start_ns, int64_t call_end_ns) {
  if (g_trace == nullptr || entry_ns == 0) return;
  if (DeviceLimiter* dl = CurrentLimiter()) {
    g_trace->Add(compute::ComputeTrace::kSync, dl->device, entry_ns, compute::SystemClock()->NowNs(),
                 call_end_ns - call_start_ns);
  }
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

// VGPU_COMPUTE_TRACE: the records so far (launches still running on other threads may add more,
// which are not written).
void WriteTrace() {
  if (g_trace == nullptr) return;
  std::string error;
  if (!g_trace->WriteTo(*g_trace_path, &error)) {
    VGPU_WARN("compute trace not written: %s", error.c_str());
  } else if (g_trace->dropped() > 0) {
    VGPU_WARN("compute trace %s: its buffer filled up, the last %llu records were dropped", g_trace_path->c_str(),
              static_cast<unsigned long long>(g_trace->dropped()));
  }
}

using Why = compute::Controller::LightRefusal;

// The monitor's light-measurement verdicts of one kind, and of every kind.
long long Verdicts(const DeviceLimiter& dl, Why why) {
  return dl.light_verdicts[static_cast<int>(why)].load(std::memory_order_relaxed);
}
long long AllVerdicts(const DeviceLimiter& dl) {
  long long n = 0;
  for (const auto& v : dl.light_verdicts) n += v.load(std::memory_order_relaxed);
  return n;
}

// At exit: the trace, and at debug level what each limiter measured over the process's life: the
// figures to compare with an outside measurement (nvidia-smi, a throughput ratio) when a share is
// off target.
__attribute__((destructor)) void LogSummaries() {
  WriteTrace();
  if (g_registry == nullptr || !LogEnabled(LogLevel::kDebug)) return;
  const int64_t now = compute::SystemClock()->NowNs();
  for (int d = 0; d < ledger::kLedgerMaxDevices; ++d) {
    DeviceLimiter* dl = g_registry->limiters[d].load(std::memory_order_acquire);
    if (dl == nullptr) continue;
    const compute::ControllerSnapshot c = dl->controller.Snapshot(now);
    const compute::TrackerStats t = dl->tracker.stats();
    VGPU_LOG_UNLIMITED(LogLevel::kDebug,
                       "compute device %d: mode %u, target %d ppm, measured %d ppm, correction %d ppm, busy %.1f ms, "
                       "throttled %.1f ms, NVML share %.3f, others busy %.3f; %lld launches, %lld marks "
                       "(%lld begins), %lld measured lightly (%lld by the bank), %lld queries (%lld by polls), %lld event errors; "
                       "%lld queue waits (%.1f ms; "
                       "window %lld, work %lld, age %lld); "
                       "%lld intervals of other processes read (%lld skipped); period %.1f ms; "
                       "light measurement allowed at %lld of %lld samples (refused: busy %lld, debt %lld, "
                       "mode %lld, processes %lld, no signal %lld), launches onto dry streams measured exactly "
                       "while held after a wait %lld, beside another stream %lld; launches overlap %.2f "
                       "(gives way: %s)",
                       d, static_cast<unsigned>(c.mode), c.target_ppm, c.measured_ppm, c.correction_ppm,
                       c.busy_total_ns / 1e6, c.throttled_total_ns / 1e6, dl->signals.container_share(),
                       dl->signals.OthersBusy(now), static_cast<long long>(t.launches), static_cast<long long>(t.marks),
                       static_cast<long long>(t.begins), static_cast<long long>(t.light_launches),
                       static_cast<long long>(t.light_banked),
                       static_cast<long long>(t.queries),
                       static_cast<long long>(t.poll_queries), static_cast<long long>(t.event_errors),
                       static_cast<long long>(t.queue_waits), t.queue_wait_ns / 1e6,
                       static_cast<long long>(t.queue_waits_window), static_cast<long long>(t.queue_waits_work),
                       static_cast<long long>(t.queue_waits_age),
                       static_cast<long long>(t.shared_read), static_cast<long long>(t.shared_skipped),
                       dl->controller.PeriodNs(now) / 1e6, Verdicts(*dl, Why::kNone), AllVerdicts(*dl),
                       Verdicts(*dl, Why::kBusy), Verdicts(*dl, Why::kDebt), Verdicts(*dl, Why::kMode),
                       Verdicts(*dl, Why::kProcesses), Verdicts(*dl, Why::kOff),
                       static_cast<long long>(t.light_held), static_cast<long long>(t.light_not_alone),
                       dl->tracker.Overlap(), dl->controller.GivesWayByOverlap() ? "yes" : "no");
  }
}

}  // namespace
}  // namespace vgpu::compute_limit
