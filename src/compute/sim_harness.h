// Test-only: simulated containers, processes and application threads driving the real limiter
// (ComputeLimiter = BusyTracker + Controller) against the SimGpu, on a simulated clock.
//
// A Simulation is one GPU. Containers own a ComputeShareState (shared by their processes) and
// limits; each process is one GPU context with its own BusyTracker and ComputeLimiter over a
// SimEventOps; each thread runs a WorkloadSpec: launches kernels (or graphs) round-robin over its
// streams, optionally synchronising every N launches, thinking between launches, blocking when
// a stream holds max_queue commands (CUDA's launch queue). Host costs (launch call, event record
// and query, oversleep of nanosleep, wake-up after a synchronisation) advance the thread's clock;
// a launch reaches the GPU's queue as its call ends (an event as its record starts), and the GPU
// sees it SimGpuParams::submit_latency_ns later.
//
// Deterministic: no wall clock, no threads; randomness from explicit seeds.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "compute/busy_tracker.h"
#include "compute/compute_state.h"
#include "compute/controller.h"
#include "compute/limiter.h"
#include "compute/sim_model.h"

namespace vgpu::compute::sim {

// Defaults measured on an H200 (driver 580, CUDA 13.0): cuLaunchKernel 4.3 us; the event calls'
// costs are SimOpCosts' (sim_model.h).
struct HostCosts {
  int64_t launch_ns = 4'300;      // the application's launch call
  int64_t hook_ns = 100;          // limiter bookkeeping per launch attempt
  int64_t oversleep_ns = 60'000;  // nanosleep overshoot (default 50 us timer slack + wake-up)
  int64_t sync_wake_ns = 5'000;   // stream drained -> synchronising thread runs again
  SimOpCosts ops;
};

// What a thread launches in one phase of its workload (WorkloadSpec::trough).
struct LaunchPhase {
  std::vector<int64_t> kernels_ns{50'000};  // durations, cycled
  int graph_kernels = 0;
  int sync_every = 0;
  int64_t think_ns = 0;
};

struct WorkloadSpec {
  std::vector<int64_t> kernels_ns{50'000};  // durations, cycled (or drawn at random: shuffle)
  bool shuffle = false;
  uint64_t seed = 1;
  int graph_kernels = 0;        // > 0: every launch is a graph of this many kernels
  double width = 0;             // fraction of the SMs each kernel occupies (SimGpu; 0: unbounded)
  int streams = 1;              // launches go round-robin over this many streams of the process
  int batch = 1;                // ... this many launches on one stream before the next
  int sync_every = 0;           // synchronise every N launches (0: never)
  int64_t think_ns = 0;         // host time between launches
  int64_t think_after_sync_ns = 0;
  int max_queue = 1024;         // a launch blocks while the stream holds this many commands
  // Batches go to the next stream with room for a whole batch (at most max_queue commands after
  // it), skipping full ones; the thread waits only while every stream is full. So does an
  // application with flow control per stream (bench/compute/concurrency.cu keeps two batches in
  // flight per stream). false: the streams are fed in turn, each launch waiting for room.
  bool skip_full = false;
  // What max_queue counts: every command on the stream (true: the limiter's events take room, as
  // for an application that waits for its stream's queue) or only kernels (false: an application
  // whose own events pace it, such as bench/compute/concurrency.cu, keeping max_queue kernels in
  // flight whatever the limiter records between them).
  bool queue_counts_events = true;
  int64_t start_ns = 0;
  int64_t stop_ns = kNever;
  // Waves (a server's decode steps between its prefills): trough_ns > 0, from start_ns the thread
  // runs wave_ns of the launches above, then trough_ns of `trough`'s (on the same streams), and
  // again; neither phase's kernels are shuffled (each picks from its own list with one running
  // index). The phase is chosen when a launch or synchronisation is due.
  int64_t wave_ns = 0;
  int64_t trough_ns = 0;
  LaunchPhase trough;
};

struct ContainerSpec {
  ComputeLimits limits;
  ControllerOptions controller;
  BusyTrackerOptions tracker;
  bool use_limiter = true;        // false: launches bypass vgpu entirely (no limit, no heartbeat)
  bool shared_busy = true;        // the processes' trackers share a BusyRing (as libvgpu's do)
  bool others_signal = true;      // provide OthersBusy() (device busy minus own, lagged)
  bool reference_signal = false;  // provide ReferenceShare() (own true share, lagged)
  int64_t signal_window_ns = 200'000'000;
  int64_t signal_lag_ns = 100'000'000;  // signals are computed up to a multiple of this
  int64_t tick_ns = 0;            // > 0: a background Tick() every tick_ns in each process
  // With ticks, as libvgpu's monitor thread does: every light_period_ns the tracker's light
  // measurement is set from Controller::Unbound with the whole GPU's busy share over the last
  // light_window_ns (NVML's GPU-Util; VGPU_COMPUTE_LIGHT), for a container of one process. 0:
  // never light.
  int64_t light_period_ns = 100'000'000;
  int64_t light_window_ns = 167'000'000;
  // Tests: light measurement set on at every tick whatever the controller says (its debt, the
  // GPU's busy share): the state a container whose light estimates undercharge could keep itself
  // in through its bank. A wait still ends it until the next tick (tracker.light_hold_ns).
  bool light_forced = false;
  // The trackers take the simulated GPU's event_gpu_ns for tracker.mark_gpu_ns (whose default
  // describes an H200's events); false: tracker.mark_gpu_ns as given.
  bool mark_gpu_from_gpu = true;
};

class Simulation {
 public:
  explicit Simulation(const SimGpuParams& gpu = SimGpuParams(), const HostCosts& costs = HostCosts());
  ~Simulation();

  int AddContainer(const ContainerSpec& spec);
  int AddProcess(int container);
  void AddThread(int process, const WorkloadSpec& workload);

  void RunUntil(int64_t time);

  // Ground truth: fraction of [from, to) during which the container's kernels ran.
  double ContainerShare(int container, int64_t from, int64_t to) const;
  // Ground truth: kernel time the container's kernels did over [from, to), summed over the
  // kernels running at once (its throughput, whatever its concurrency).
  int64_t ContainerWorkNs(int container, int64_t from, int64_t to) const;
  double DeviceShare(int64_t from, int64_t to) const;
  ControllerSnapshot Snapshot(int container) const;
  TrackerStats Stats(int process) const;
  int64_t launches(int process) const;
  SimGpu& gpu() { return gpu_; }
  int64_t now() const { return now_; }

 private:
  struct Container;
  struct Process;
  struct Thread;
  class Signals;

  void Step(Thread& thread, int64_t t);
  void StepLaunch(Thread& thread, int64_t t);
  static const LaunchPhase& PhaseAt(const Thread& thread, int64_t t);
  int Queued(const WorkloadSpec& w, int stream) const;  // what max_queue counts on the stream
  bool HasRoomForBatch(const Thread& thread, int stream) const;  // skip_full
  void WakeWaiters(int64_t t);
  int64_t NextTick() const;
  void RunTicks(int64_t t);

  SimGpu gpu_;
  HostCosts costs_;
  int64_t now_ = 0;
  PriorityBoard board_{};
  GpuTurn turn_{};
  std::vector<std::unique_ptr<Container>> containers_;
  std::vector<std::unique_ptr<Process>> processes_;
  std::vector<std::unique_ptr<Thread>> threads_;
};

}  // namespace vgpu::compute::sim
