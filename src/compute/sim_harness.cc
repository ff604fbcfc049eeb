#include "compute/sim_harness.h"

#include <algorithm>

namespace vgpu::compute::sim {

// Lagged, windowed versions of what NVML would report, computed from the model's ground truth.
class Simulation::Signals final : public LoadSignals {
 public:
  Signals(const Simulation* sim, int container) : sim_(sim), container_(container) {}
  double OthersBusy(int64_t now) override {
    const ContainerSpec& spec = Spec();
    if (!spec.others_signal) return -1;
    int64_t end = Lagged(now);
    int64_t begin = std::max<int64_t>(0, end - spec.signal_window_ns);
    if (end <= begin) return -1;
    double device = sim_->DeviceShare(begin, end);
    return std::max(0.0, device - sim_->ContainerShare(container_, begin, end));
  }
  double ReferenceShare(int64_t now) override {
    const ContainerSpec& spec = Spec();
    if (!spec.reference_signal) return -1;
    int64_t end = Lagged(now);
    int64_t begin = std::max<int64_t>(0, end - spec.signal_window_ns);
    if (end <= begin) return -1;
    return sim_->ContainerShare(container_, begin, end);
  }

 private:
  const ContainerSpec& Spec() const;
  int64_t Lagged(int64_t now) const { return now / Spec().signal_lag_ns * Spec().signal_lag_ns; }
  const Simulation* sim_;
  int container_;
};

struct Simulation::Container {
  ContainerSpec spec;
  ComputeShareState state{};
  BusyRing ring{};
  std::unique_ptr<Signals> signals;
  std::vector<int> contexts;
};

const ContainerSpec& Simulation::Signals::Spec() const {
  return sim_->containers_[container_]->spec;
}

struct Simulation::Process {
  int container;
  int context;
  std::unique_ptr<SimEventOps> ops;
  std::unique_ptr<BusyTracker> tracker;
  std::unique_ptr<Controller> controller;
  std::unique_ptr<ComputeLimiter> limiter;
  int64_t next_tick = kNever;
  int64_t next_light = 0;
  int64_t launches = 0;
};

struct Simulation::Thread {
  Process* process;
  WorkloadSpec spec;
  LaunchPhase wave;  // the spec's own launches (WorkloadSpec::trough)
  std::mt19937_64 rng;
  int64_t ready_ns = 0;       // next step; kNever while waiting on the GPU
  enum class Wait { kNone, kSync, kQueue, kAnyQueue } wait = Wait::kNone;
  int queue_stream = -1;
  int lane = -1;     // skip_full: the stream the current batch goes to
  int in_batch = 0;  // skip_full: launches of the current batch done
  std::vector<int> streams;
  int64_t launches = 0;
  int since_sync = 0;
  size_t next_kernel = 0;
};

Simulation::Simulation(const SimGpuParams& gpu, const HostCosts& costs) : gpu_(gpu), costs_(costs) {}

Simulation::~Simulation() = default;

int Simulation::AddContainer(const ContainerSpec& spec) {
  auto c = std::make_unique<Container>();
  c->spec = spec;
  c->signals = std::make_unique<Signals>(this, static_cast<int>(containers_.size()));
  containers_.push_back(std::move(c));
  return static_cast<int>(containers_.size()) - 1;
}

int Simulation::AddProcess(int container) {
  Container& c = *containers_[container];
  auto p = std::make_unique<Process>();
  p->container = container;
  p->context = gpu_.AddContext();
  c.contexts.push_back(p->context);
  p->ops = std::make_unique<SimEventOps>(&gpu_, p->context, costs_.ops);
  BusyTrackerOptions tracker = c.spec.tracker;
  if (c.spec.mark_gpu_from_gpu) tracker.mark_gpu_ns = gpu_.params().event_gpu_ns;
  p->tracker = std::make_unique<BusyTracker>(p->ops.get(), tracker, c.spec.shared_busy ? &c.ring : nullptr);
  p->controller = std::make_unique<Controller>(&c.state, &board_, c.signals.get(),
                                               c.spec.controller, c.spec.limits, &turn_);
  p->limiter = std::make_unique<ComputeLimiter>(p->controller.get(), p->tracker.get());
  if (c.spec.tick_ns > 0) p->next_tick = c.spec.tick_ns;
  processes_.push_back(std::move(p));
  return static_cast<int>(processes_.size()) - 1;
}

void Simulation::AddThread(int process, const WorkloadSpec& workload) {
  auto t = std::make_unique<Thread>();
  t->process = processes_[process].get();
  t->spec = workload;
  t->wave = LaunchPhase{workload.kernels_ns, workload.graph_kernels, workload.sync_every, workload.think_ns};
  t->rng.seed(workload.seed);
  t->ready_ns = workload.start_ns;
  for (int i = 0; i < std::max(workload.streams, 1); ++i) {
    t->streams.push_back(gpu_.AddStream(t->process->context));
  }
  threads_.push_back(std::move(t));
}

// --- Threads -------------------------------------------------------------------------------

int Simulation::Queued(const WorkloadSpec& w, int stream) const {
  return w.queue_counts_events ? gpu_.PendingCommands(stream) : gpu_.PendingKernels(stream);
}

bool Simulation::HasRoomForBatch(const Thread& th, int stream) const {
  return Queued(th.spec, stream) + std::max(th.spec.batch, 1) <= th.spec.max_queue;
}

// The launches a thread's workload makes at `t` (WorkloadSpec::trough).
const LaunchPhase& Simulation::PhaseAt(const Thread& th, int64_t t) {
  const WorkloadSpec& w = th.spec;
  if (w.trough_ns > 0 && (t - w.start_ns) % (w.wave_ns + w.trough_ns) >= w.wave_ns) return w.trough;
  return th.wave;
}

void Simulation::StepLaunch(Thread& th, int64_t t) {
  Process& p = *th.process;
  const WorkloadSpec& w = th.spec;
  const LaunchPhase& phase = PhaseAt(th, t);
  const int batch = std::max(w.batch, 1);
  if (w.skip_full && th.in_batch == 0) {
    const int n = static_cast<int>(th.streams.size());
    int next = -1;
    for (int i = 1; i <= n && next < 0; ++i) {
      const int lane = (th.lane + i + n) % n;
      if (HasRoomForBatch(th, th.streams[lane])) next = lane;
    }
    if (next < 0) {
      th.wait = Thread::Wait::kAnyQueue;
      th.ready_ns = kNever;
      return;
    }
    th.lane = next;
  }
  int stream = w.skip_full ? th.streams[th.lane]
                            : th.streams[static_cast<size_t>(th.launches / batch) % th.streams.size()];
  if (!w.skip_full && Queued(w, stream) >= w.max_queue) {
    th.wait = Thread::Wait::kQueue;
    th.queue_stream = stream;
    th.ready_ns = kNever;
    return;
  }
  bool limited = containers_[p.container]->spec.use_limiter;
  int64_t cursor = t + (limited ? costs_.hook_ns : 0);
  p.ops->set_cursor(&cursor);
  LaunchTicket ticket;
  if (limited) {
    int64_t wait = p.limiter->BeforeLaunch(static_cast<StreamKey>(stream), t, &ticket);
    if (wait > 0) {
      th.ready_ns = cursor + wait + costs_.oversleep_ns;
      return;
    }
  }
  auto pick = [&]() {
    size_t i = w.shuffle && w.trough_ns == 0 ? static_cast<size_t>(th.rng() % phase.kernels_ns.size())
                                             : th.next_kernel++ % phase.kernels_ns.size();
    return phase.kernels_ns[i];
  };
  // The launch reaches the GPU's queue as its call ends (a driver rings the doorbell late in the
  // call: on an H200 kernels started ~9 us after the call returned, about what a begin event
  // takes from its record); the GPU sees it submit_latency_ns later. A graph's kernels count as
  // possibly starting earlier (LaunchTicket::starts_after_return), as on the driver.
  cursor += costs_.launch_ns;
  ticket.starts_after_return = phase.graph_kernels == 0;
  if (phase.graph_kernels > 0) {
    std::vector<int64_t> kernels;
    for (int i = 0; i < phase.graph_kernels; ++i) kernels.push_back(pick());
    gpu_.LaunchGraph(stream, cursor, kernels, w.width);
  } else {
    gpu_.Launch(stream, cursor, pick(), w.width);
  }
  if (limited) p.limiter->AfterLaunch(ticket, true, cursor);
  p.ops->set_cursor(nullptr);
  ++th.launches;
  th.in_batch = (th.in_batch + 1) % batch;
  ++p.launches;
  ++th.since_sync;
  th.ready_ns = cursor + phase.think_ns;
}

void Simulation::Step(Thread& th, int64_t t) {
  const WorkloadSpec& w = th.spec;
  if (t >= w.stop_ns) {
    th.ready_ns = kNever;
    return;
  }
  const int sync_every = PhaseAt(th, t).sync_every;
  if (sync_every > 0 && th.since_sync >= sync_every) {
    Process& p = *th.process;
    int64_t cursor = t;
    p.ops->set_cursor(&cursor);
    if (containers_[p.container]->spec.use_limiter) p.limiter->BeforeSynchronize(t);
    p.ops->set_cursor(nullptr);
    th.since_sync = 0;
    th.wait = Thread::Wait::kSync;
    th.ready_ns = kNever;
    return;
  }
  StepLaunch(th, t);
}

void Simulation::WakeWaiters(int64_t t) {
  for (auto& th : threads_) {
    if (th->wait == Thread::Wait::kNone) continue;
    bool done = true;
    if (th->wait == Thread::Wait::kQueue) {
      done = Queued(th->spec, th->queue_stream) < th->spec.max_queue;
    } else if (th->wait == Thread::Wait::kAnyQueue) {
      done = false;
      for (int stream : th->streams) {
        done = done || HasRoomForBatch(*th, stream);
      }
    } else {
      for (int stream : th->streams) done = done && gpu_.StreamDrained(stream);
    }
    if (!done) continue;
    int64_t extra = th->wait == Thread::Wait::kSync ? costs_.sync_wake_ns + th->spec.think_after_sync_ns : 0;
    th->wait = Thread::Wait::kNone;
    th->ready_ns = t + extra;
  }
}

int64_t Simulation::NextTick() const {
  int64_t next = kNever;
  for (const auto& p : processes_) next = std::min(next, p->next_tick);
  return next;
}

void Simulation::RunTicks(int64_t t) {
  for (auto& p : processes_) {
    if (p->next_tick > t) continue;
    int64_t cursor = t;
    p->ops->set_cursor(&cursor);
    p->limiter->Tick(t);
    p->ops->set_cursor(nullptr);
    const ContainerSpec& spec = containers_[p->container]->spec;
    p->next_tick = t + spec.tick_ns;
    if (spec.light_forced) {
      p->tracker->SetLight(true, t);
    } else if (spec.light_period_ns > 0 && t >= p->next_light) {
      p->next_light = t + spec.light_period_ns;
      const double device = t >= spec.light_window_ns ? DeviceShare(t - spec.light_window_ns, t) : -1.0;
      const int processes = static_cast<int>(containers_[p->container]->contexts.size());
      const Controller::LightRefusal why = p->controller->LightRefusalOf(device, processes, t);
      p->tracker->SetLight(why == Controller::LightRefusal::kNone, t);
      p->tracker->SetBankLight(Controller::BankMayDecide(why));
    }
  }
}

void Simulation::RunUntil(int64_t end) {
  for (;;) {
    int64_t next = std::min(gpu_.NextChangeNs(), NextTick());
    for (const auto& th : threads_) next = std::min(next, th->ready_ns);
    if (next > end) break;
    next = std::max(next, now_);
    gpu_.AdvanceTo(next);
    now_ = next;
    WakeWaiters(now_);
    RunTicks(now_);
    for (auto& th : threads_) {
      if (th->ready_ns <= now_) Step(*th, now_);
    }
    WakeWaiters(now_);  // a synchronisation on streams that are already drained returns at once
  }
  gpu_.AdvanceTo(end);
  now_ = end;
}

// --- Results -------------------------------------------------------------------------------

double Simulation::ContainerShare(int container, int64_t from, int64_t to) const {
  int64_t busy = 0;
  for (int ctx : containers_[container]->contexts) busy += gpu_.ContextBusyNs(ctx, from, to);
  return to > from ? static_cast<double>(busy) / static_cast<double>(to - from) : 0;
}

int64_t Simulation::ContainerWorkNs(int container, int64_t from, int64_t to) const {
  int64_t work = 0;
  for (int ctx : containers_[container]->contexts) work += gpu_.ContextWorkNs(ctx, from, to);
  return work;
}

double Simulation::DeviceShare(int64_t from, int64_t to) const {
  return to > from ? static_cast<double>(gpu_.DeviceBusyNs(from, to)) / static_cast<double>(to - from) : 0;
}

ControllerSnapshot Simulation::Snapshot(int container) const {
  for (const auto& p : processes_) {
    if (p->container == container) return p->controller->Snapshot(now_);
  }
  return {};
}

TrackerStats Simulation::Stats(int process) const { return processes_[process]->tracker->stats(); }

int64_t Simulation::launches(int process) const { return processes_[process]->launches; }

}  // namespace vgpu::compute::sim
