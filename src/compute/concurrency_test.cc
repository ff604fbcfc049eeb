// The compute limit keeps the application's concurrency: under a limit of P a container gets P%
// of the throughput it achieves alone, whatever its streams, host threads and processes. On the
// simulated GPU (kernels of a given width share the SMs, sim_model.h) every row of the
// concurrency matrix runs natively and under limits of 30 and 60; the share is the kernel time
// done (summed over kernels running at once) against the native run's, over the same window.
//
// A limiter that throttles stream by stream serialises concurrent kernels (on an H200, 8 streams
// of 1 ms kernels kept 4% of their throughput at a limit of 30); one that lets a stream slip past
// its window over-delivers. Both fail here. The table is printed (ctest -V); docs/compute.md
// quotes it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "compute/sim_harness.h"

namespace vgpu::compute::sim {
namespace {

constexpr int64_t kUs = 1'000;
constexpr int64_t kMs = 1'000'000;
constexpr int64_t kSec = 1'000'000'000;
constexpr int64_t kWarmup = 1 * kSec;
constexpr int64_t kEnd = 4 * kSec;

// One row of the matrix: `processes` processes of one container, each with `threads` threads,
// each thread launching ~1 ms of kernels on one stream, then on the next (round-robin over
// `streams` streams), with at most ~2 ms of kernels queued per stream (the application's own flow
// control, which the limiter's events take no room from), as bench/compute/concurrency.cu does
// on the GPU.
struct Row {
  std::string name;
  int64_t kernel_ns;
  double width;
  int streams = 1;
  int threads = 1;
  int processes = 1;
};

std::vector<Row> Rows() {
  const double spin = 1.0 / 8;  // one 256-thread block per SM: 8 such kernels fit an H200's SMs
  return {
      {"1 stream, 2 ms", 2 * kMs, spin},
      {"1 stream, 50 us", 50 * kUs, spin},
      {"2 streams, 500 us", 500 * kUs, spin, 2},
      {"4 streams, 200 us", 200 * kUs, spin, 4},
      {"8 streams, 1 ms", 1 * kMs, spin, 8},
      {"16 streams, 50 us", 50 * kUs, spin, 16},
      {"16 streams, 5 ms", 5 * kMs, spin, 16},
      {"8 streams, 1 ms, 2 blocks/SM", 1 * kMs, 2 * spin, 8},
      {"2 streams, full-width 2 ms", 2 * kMs, 1.0, 2},
      {"4 threads x 1 stream, 200 us", 200 * kUs, spin, 1, 4},
      {"2 processes x 2 streams, 1 ms", 1 * kMs, spin, 2, 1, 2},
  };
}

// `event_gpu_ns`: GPU time each timing event takes on its stream (SimGpuParams).
int64_t Work(const Row& row, int target, int64_t event_gpu_ns = 0) {
  SimGpuParams gpu;
  gpu.hardware_queues = 8;  // CUDA_DEVICE_MAX_CONNECTIONS' default
  gpu.event_gpu_ns = event_gpu_ns;
  Simulation sim(gpu);
  ContainerSpec spec;
  spec.limits = ComputeLimits::FromPercent(target, 0, 1);
  spec.use_limiter = target > 0;
  spec.tick_ns = 2 * kMs;  // the library's monitor thread
  const int c = sim.AddContainer(spec);
  for (int p = 0; p < row.processes; ++p) {
    const int process = sim.AddProcess(c);
    for (int t = 0; t < row.threads; ++t) {
      WorkloadSpec w;
      w.kernels_ns = {row.kernel_ns};
      w.streams = row.streams;
      w.width = row.width;
      w.batch = static_cast<int>(std::max<int64_t>(1, 2 * kMs / row.kernel_ns));
      w.max_queue = 2 * w.batch;
      w.skip_full = true;
      w.queue_counts_events = false;  // concurrency.cu paces itself with its own events
      w.seed = 1 + p * 16 + t;
      sim.AddThread(process, w);
    }
  }
  sim.RunUntil(kEnd);
  return sim.ContainerWorkNs(c, kWarmup, kEnd);
}

// The simulated GPU's and the tracker's settings for RunSolo.
struct SoloGpu {
  int64_t event_gpu_ns = 0;  // GPU time each timing event takes (SimGpuParams)
  int64_t mark_gpu_ns = -1;  // >= 0: what the tracker is told of it (default: the truth)
  int64_t submit_latency_ns = SimGpuParams().submit_latency_ns;
  int64_t submit_jitter_ns = 0;     // SimGpuParams
  bool light = true;                // light measurement allowed (ContainerSpec::light_period_ns)
  bool light_forced = false;        // ... and held on (ContainerSpec::light_forced, no hold after a wait)
  double start_delay_excess = 0;    // BusyTrackerOptions
};

struct SoloRun {
  double work = 0;     // kernel time done (ContainerWorkNs)
  double busy = 0;     // share of the window its kernels ran (ContainerShare)
  TrackerStats stats;  // the limiter's tracker (limited runs only)
  double measured_over_truth = 0;  // the limiter's busy time over the kernels' (limited runs only)
  double throttled_ms = 0;         // its launching threads' sleeps
};

// One container of one process whose one thread runs `w` under `target` (0: natively, without the
// library), over the window [kWarmup, kEnd).
SoloRun RunSolo(int target, const WorkloadSpec& w, int64_t tick_ns, const SoloGpu& setup = SoloGpu()) {
  SimGpuParams gpu;
  gpu.hardware_queues = 8;
  gpu.event_gpu_ns = setup.event_gpu_ns;
  gpu.submit_latency_ns = setup.submit_latency_ns;
  gpu.submit_jitter_ns = setup.submit_jitter_ns;
  Simulation sim(gpu);
  ContainerSpec spec;
  spec.limits = ComputeLimits::FromPercent(target, 0, 1);
  spec.use_limiter = target > 0;
  spec.tick_ns = tick_ns;
  if (!setup.light) spec.light_period_ns = 0;
  if (setup.light_forced) {
    spec.light_forced = true;
    spec.tracker.light_hold_ns = 0;
  }
  spec.tracker.start_delay_excess = setup.start_delay_excess;
  if (setup.mark_gpu_ns >= 0) {
    spec.mark_gpu_from_gpu = false;
    spec.tracker.mark_gpu_ns = setup.mark_gpu_ns;
  }
  const int c = sim.AddContainer(spec);
  const int process = sim.AddProcess(c);
  sim.AddThread(process, w);
  sim.RunUntil(kEnd);
  SoloRun run;
  run.work = static_cast<double>(sim.ContainerWorkNs(c, kWarmup, kEnd));
  run.busy = sim.ContainerShare(c, kWarmup, kEnd);
  if (target > 0) {
    run.stats = sim.Stats(process);
    const ControllerSnapshot snap = sim.Snapshot(c);
    run.measured_over_truth = snap.busy_total_ns / (sim.ContainerShare(c, 0, kEnd) * kEnd);
    run.throttled_ms = snap.throttled_total_ns / 1e6;
  }
  return run;
}

// What a limit leaves a workload busy `native_busy` of the time natively, in % of its native
// throughput (E): the limit over that share, at most all of it.
double WhatTheLimitLeaves(double limit, double native_busy) { return std::min(100.0, limit / native_busy); }

// Timing events recorded per launch (begins and marks).
double EventsPerLaunch(const TrackerStats& stats) {
  return static_cast<double>(stats.marks) / static_cast<double>(stats.launches);
}

TEST(ConcurrencyTest, EveryRowGetsItsShareOfItsOwnThroughput) {
  std::printf("[ matrix ] %-32s %9s %7s %7s\n", "row", "native", "30", "60");
  for (const Row& row : Rows()) {
    SCOPED_TRACE(row.name);
    const double native = static_cast<double>(Work(row, 0));
    ASSERT_GT(native, 0);
    double shares[2];
    const int targets[2] = {30, 60};
    for (int i = 0; i < 2; ++i) shares[i] = 100.0 * static_cast<double>(Work(row, targets[i])) / native;
    std::printf("[ matrix ] %-32s %8.2fx %7.1f %7.1f\n", row.name.c_str(), native / (kEnd - kWarmup), shares[0],
                shares[1]);
    for (int i = 0; i < 2; ++i) EXPECT_NEAR(shares[i], targets[i], 3.0) << "limit " << targets[i];
  }
}

// On an H200 a timing event between two queued kernels takes ~2 us of GPU time
// (bench/compute/event_cost.cu): a limiter that marks a GPU-bound stream densely loses its
// throughput to its own events (one mark per 5 us kernel would cost a quarter of it); marks that
// grow sparse on a deep queue cost next to nothing. At a limit of 99 (1% taken by the limit).
TEST(ConcurrencyTest, MarksTakingGpuTimeCostAGpuBoundStreamLittle) {
  const double spin = 1.0 / 8;
  for (const Row& row : {Row{"1 stream, 5 us", 5 * kUs, spin}, Row{"16 streams, 50 us", 50 * kUs, spin, 16}}) {
    SCOPED_TRACE(row.name);
    const double native = static_cast<double>(Work(row, 0, 2 * kUs));
    const double share = 100.0 * static_cast<double>(Work(row, 99, 2 * kUs)) / native;
    std::printf("[ matrix ] %s at 99 with events taking 2 us of GPU time: %.1f of native\n", row.name.c_str(),
                share);
    EXPECT_GT(share, 97.0);
  }
}

// A server's steps: a few launches submitted at once, mostly cheap, now and then an expensive one
// (a prefill among decode steps), then a synchronisation and host work. Learned uniform from its
// cheap launches, the stream's intervals after each idle start used to be capped at the cheap
// cost, so the expensive launches went unseen: the first steps kept their native busy time (67%)
// at limits of 10 and 30, the second ran at 54.5% at 30 (the third too, at 53.1%, once uniform
// streams' marks grew sparse, with which the H200's serving row ran at 23% GPU-Util at 10). The
// GPU idles only while the host has not submitted yet, so what follows the last submission in an
// interval is busy whatever the cap.
TEST(ConcurrencyTest, SynchronisedStepsWithAnExpensiveLaunchAmongCheapOnesAreCounted) {
  struct Steps {
    const char* name;
    std::vector<int64_t> kernels_ns;
    int sync_every;
    int64_t think_after_sync_ns;
  };
  std::vector<int64_t> mix(7, 20 * kUs);
  mix.push_back(2 * kMs);
  std::vector<int64_t> decode(30, 20 * kUs);
  decode.push_back(4 * kMs);
  std::vector<int64_t> small(16, 5 * kUs);
  small.push_back(1 * kMs);
  for (const Steps& steps : {Steps{"4 launches of 7 x 20 us + 2 ms, host 500 us", mix, 4, 500 * kUs},
                             Steps{"30 x 20 us + 4 ms per step, host 3 ms", decode, 31, 3 * kMs},
                             Steps{"17 of 16 x 5 us + 1 ms, host 200 us", small, 17, 200 * kUs}}) {
    for (int target : {10, 30}) {
      SCOPED_TRACE(std::string(steps.name) + " at " + std::to_string(target));
      Simulation sim;
      ContainerSpec spec;
      spec.limits = ComputeLimits::FromPercent(target, 0, 1);
      spec.tick_ns = 2 * kMs;
      const int c = sim.AddContainer(spec);
      const int process = sim.AddProcess(c);
      WorkloadSpec w;
      w.kernels_ns = steps.kernels_ns;
      w.shuffle = true;
      w.sync_every = steps.sync_every;
      w.think_after_sync_ns = steps.think_after_sync_ns;
      sim.AddThread(process, w);
      sim.RunUntil(kEnd);
      const double busy = 100.0 * sim.ContainerShare(c, kWarmup, kEnd);
      std::printf("[ matrix ] steps of %s at %d: busy %.1f%%\n", steps.name, target, busy);
      EXPECT_NEAR(busy, target, 3.0);
    }
  }
}

// One host thread launching 2 us kernels faster than nothing but slower than they run (the GPU
// idle between them ~20% of the time natively): a uniform stream's marks stay sparse and the
// limited launch path keeps the launch rate (at 99: 0.81 of native and a mark every two launches
// while uniform streams' mark interval could not grow without a deep queue; the H200's launch
// path check read 0.52-0.81 in that mode). At 60 the share of the native throughput is on the
// limit, not on what the limit leaves a workload this idle natively (E = 60 / its native busy
// share, printed): the limiter charges the gaps between its kernels that hide in its sparse
// intervals (capped at their launches x the learned cost x 1.25), so it gets less than E, never
// more (docs/compute.md, Limits, "Tiny kernels at the host's maximum rate").
TEST(ConcurrencyTest, HostBoundTinyKernelsKeepTheirLaunchRateAndShare) {
  WorkloadSpec w;
  w.kernels_ns = {2 * kUs};
  w.batch = 1000;  // as bench/compute/concurrency.cu: ~2 ms per batch, two batches in flight
  w.max_queue = 2 * w.batch;
  w.skip_full = true;
  double native = 0, native_busy = 0;
  for (int target : {0, 99, 60}) {
    SCOPED_TRACE(target);
    const SoloRun run = RunSolo(target, w, 2 * kMs);
    if (target == 0) {
      native = run.work;
      native_busy = run.busy;
      ASSERT_LT(run.busy, 0.9);  // host-bound natively
      continue;
    }
    const TrackerStats& t = run.stats;
    const double share = 100.0 * run.work / native;
    const double marks = EventsPerLaunch(t);
    std::printf("[ matrix ] host-bound 2 us kernels at %d: %.1f of native (E %.1f), %.3f marks and %.3f queries per launch\n",
                target, share, WhatTheLimitLeaves(target, native_busy), marks,
                static_cast<double>(t.queries) / static_cast<double>(t.launches));
    EXPECT_LT(marks, 0.05);
    if (target == 99) {
      EXPECT_GT(share, 94.0);
    } else {
      EXPECT_NEAR(share, 60.0, 3.0);
    }
  }
}

// One thread launching 5 us kernels (6.4 us on the GPU with its overhead) about as fast as they
// run, as 5 us spin kernels are on an H200 under a limit (docs/benchmarks.md 2026-11-28: the
// limiter's intervals 0.900 of the window at 90, the GPU's own busy time 0.82-0.87): its queue
// runs dry between launches, its marks are sparse (a uniform stream), and the gaps inside its
// intervals are charged as far as the cap (launches x the learned cost x 1.25) lets them. Such a
// launcher gets at least its limit, at most what the limit leaves it (E = limit / its native busy
// share), and is never charged less than its kernels ran; how far below E it stays is printed.
TEST(ConcurrencyTest, HostPacedTinyKernelsGetBetweenTheLimitAndWhatItLeavesThem) {
  for (int64_t host_work : {2200, 2600, 3500}) {  // the host 1.02, 1.08, 1.22 x the GPU's pace
    WorkloadSpec w;
    w.kernels_ns = {5 * kUs};
    w.batch = 2000;  // as bench/compute/spin.cu: ~10 ms per batch, two in flight
    w.max_queue = 2 * w.batch;
    w.skip_full = true;
    w.queue_counts_events = false;
    w.think_ns = host_work;
    SoloGpu gpu;
    gpu.event_gpu_ns = 2 * kUs;  // an H200's mark between two kernels
    double native = 0, native_busy = 0;
    for (int target : {0, 60, 90}) {
      SCOPED_TRACE(testing::Message() << "host work " << host_work << " ns, limit " << target);
      const SoloRun run = RunSolo(target, w, 2 * kMs, gpu);
      if (target == 0) {
        native = run.work;
        native_busy = run.busy;
        continue;
      }
      const double share = 100.0 * run.work / native;
      const double leaves = WhatTheLimitLeaves(target, native_busy);
      std::printf("[ matrix ] host-paced 5 us kernels, %.2f of the GPU's pace, at %d: %.1f of native (E %.1f), "
                  "charged %.3f x their busy time\n",
                  (4'300.0 + static_cast<double>(host_work)) / 6'400.0, target, share, leaves, run.measured_over_truth);
      EXPECT_GE(share, target - 3.0);
      EXPECT_LE(share, leaves + 3.0);
      EXPECT_GE(run.measured_over_truth, 0.97);
    }
  }
}

// Containers side by side, container k running workloads[k] (seeded 7, 8, ...) in one process
// under targets[k] (0: natively, without the library) with `controller` as its options, on a GPU
// whose hand-overs between contexts cost what an H200's do: each one's kernel time done.
std::vector<double> ColocatedWork(const std::vector<WorkloadSpec>& workloads, const std::vector<int>& targets,
                                  const ControllerOptions& controller = ControllerOptions()) {
  SimGpuParams gpu;
  gpu.context_switch_ns = 120 * kUs;  // the H200's hand-over cost
  Simulation sim(gpu);
  std::vector<int> containers;
  for (size_t k = 0; k < targets.size(); ++k) {
    ContainerSpec spec;
    spec.limits = ComputeLimits::FromPercent(targets[k], 0, 1);
    spec.use_limiter = targets[k] > 0;
    spec.controller = controller;
    spec.tick_ns = 2 * kMs;
    containers.push_back(sim.AddContainer(spec));
    WorkloadSpec mine = workloads[k];
    mine.seed = 7 + k;
    sim.AddThread(sim.AddProcess(containers.back()), mine);
  }
  sim.RunUntil(kEnd);
  std::vector<double> work;
  for (int c : containers) work.push_back(static_cast<double>(sim.ContainerWorkNs(c, kWarmup, kEnd)));
  return work;
}

// The same, every container running `w`.
std::vector<double> ColocatedWork(const WorkloadSpec& w, const std::vector<int>& targets) {
  return ColocatedWork(std::vector<WorkloadSpec>(targets.size(), w), targets);
}

// Two and three containers side by side, each against its own native throughput.
TEST(ConcurrencyTest, ColocatedContainersEachGetTheirShare) {
  const Row row{"4 streams, 200 us", 200 * kUs, 1.0 / 8, 4};
  const double native = static_cast<double>(Work(row, 0));
  WorkloadSpec w;
  w.kernels_ns = {row.kernel_ns};
  w.streams = row.streams;
  w.width = row.width;
  w.max_queue = 20;
  for (const std::vector<int>& targets : {std::vector<int>{30, 60}, std::vector<int>{30, 30, 30}}) {
    const std::vector<double> work = ColocatedWork(w, targets);
    for (size_t k = 0; k < targets.size(); ++k) {
      const double share = 100.0 * work[k] / native;
      std::printf("[ matrix ] co-located %zu containers: #%zu at %d -> %.1f\n", targets.size(), k, targets[k], share);
      EXPECT_NEAR(share, targets[k], 3.0) << "container " << k << " of " << targets.size();
    }
  }
}

// Co-located containers whose programs synchronise every launch or every 8 (a step's end, a copy
// to the host), full-width kernels of 20 or 50 us. Two failures, both with a hand-over between
// contexts costing 120 us as on an H200:
// - At each synchronisation the holder's claimed work drained for a few microseconds; a waiting
//   neighbour took the turn and the containers alternated at every synchronisation: 3 x 30 got
//   21.0 each with 20 us kernels synchronised every 8, 26.6 with 50 us. A run holds the turn past
//   its drained work (ControllerOptions::run_hold_ns).
// - Synchronising every launch, they run 64-81% busy alone, and a run charged only its busy time
//   took more than its share of the wall time while the others waited: 3 x 30 got 37.8 / 41.5 /
//   15.8 (20 us), 30 + 60 + 10 17.7 / 71.8 / 6.0. A run another container waits through is
//   charged the wall time it held (ControllerOptions::charge_held_runs).
// Each container gets at least its limit's share of its native throughput (-3), and at most the
// part of its native busy time its limit leaves, E (+3): beside neighbours that do not wait, it
// may use the GPU's idle time, as it would alone.
TEST(ConcurrencyTest, ColocatedSynchronisingContainersEachGetTheirShare) {
  for (int64_t kernel : {20 * kUs, 50 * kUs}) {
    for (int sync_every : {1, 8}) {
      WorkloadSpec w;
      w.kernels_ns = {kernel};
      w.width = 1.0;
      w.sync_every = sync_every;
      const SoloRun native = RunSolo(0, w, 2 * kMs);
      for (const std::vector<int>& targets :
           {std::vector<int>{30, 60}, std::vector<int>{30, 30, 30}, std::vector<int>{30, 60, 10}}) {
        const std::vector<double> work = ColocatedWork(w, targets);
        for (size_t k = 0; k < targets.size(); ++k) {
          const double share = 100.0 * work[k] / native.work;
          const double most = WhatTheLimitLeaves(targets[k], native.busy);
          std::printf("[ matrix ] co-located, %lld us kernels synchronised every %d (%.1f%% busy alone): #%zu of %zu "
                      "at %d -> %.1f (up to %.1f)\n",
                      static_cast<long long>(kernel / kUs), sync_every, 100 * native.busy, k, targets.size(),
                      targets[k], share, most);
          SCOPED_TRACE(testing::Message() << kernel / kUs << " us kernels synchronised every " << sync_every
                                          << ", container " << k << " of " << targets.size());
          EXPECT_GT(share, targets[k] - 3.0);
          EXPECT_LT(share, most + 3.0);
        }
      }
    }
  }
}

// A server below its limit beside a trainer that fills its share. Turns are exclusive, and the
// trainer's run held the turn until the work it queued (up to 20 ms) had drained: the server,
// steps of 8 full-width 60 us kernels synchronised with 1.5 ms of host work after each (25% busy
// alone, never throttled alone at 30), waited for the trainer's runs and got 41% of its native
// rate beside a trainer of 2 ms kernels at 60 (40.5 with a 120 us hand-over). A waiter below its
// limit says so on the turn, and a run that fills its share gives way to it and keeps at most
// 1 ms queued while one waits (ControllerOptions::light_waiter_queue_ns, on by default): 55.1,
// the trainer 57.9. One stream of narrow 50 us kernels loses nothing to it. A trainer of 16
// streams of such kernels lost most of its work to it (22.6-24.4% of its native rate, busy 59%:
// its queues drained at every step of the server) until a process whose launches overlap gave
// way no more (give_way_max_overlap): it is charged as it was without giving way.
TEST(ConcurrencyTest, AServerBelowItsLimitBesideATrainerIsNotHeldForTheTrainersRuns) {
  WorkloadSpec server;
  server.kernels_ns = {60 * kUs};
  server.width = 1.0;
  server.sync_every = 8;
  server.think_after_sync_ns = 1500 * kUs;
  WorkloadSpec long_kernels;
  long_kernels.kernels_ns = {2 * kMs};
  long_kernels.width = 1.0;
  WorkloadSpec narrow = long_kernels;  // one block per SM: 8 such kernels fit an H200's SMs
  narrow.kernels_ns = {50 * kUs};
  narrow.width = 1.0 / 8;
  WorkloadSpec streams = narrow;  // the matrix's 16 x 50 us
  streams.streams = 16;
  streams.batch = 40;
  streams.max_queue = 80;
  streams.skip_full = true;
  streams.queue_counts_events = false;
  const double server_native = ColocatedWork({server}, {0})[0];
  const ControllerOptions on;  // gives way by default
  ControllerOptions off;
  off.light_waiter_queue_ns = 0;
  const struct {
    const char* name;
    WorkloadSpec trainer;
    bool gives_way;
  } cases[] = {{"2 ms kernels", long_kernels, true}, {"50 us kernels", narrow, true}, {"16 x 50 us", streams, false}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::vector<WorkloadSpec> pair = {server, c.trainer};
    const double trainer_native = ColocatedWork({c.trainer}, {0})[0];
    const std::vector<double> before = ColocatedWork(pair, {30, 60}, off);
    const std::vector<double> now = ColocatedWork(pair, {30, 60}, on);
    const double server_before = 100.0 * before[0] / server_native, server_now = 100.0 * now[0] / server_native;
    const double trainer_before = 100.0 * before[1] / trainer_native, trainer_now = 100.0 * now[1] / trainer_native;
    std::printf("[ matrix ] server at 30 beside a trainer of %s at 60: %.1f of native (%.1f without giving way), "
                "trainer %.1f (%.1f)\n", c.name, server_now, server_before, trainer_now, trainer_before);
    EXPECT_LT(server_before, 45.0);  // the failure this guards against
    EXPECT_NEAR(trainer_now, 60.0, 3.0);
    if (c.gives_way) {
      EXPECT_GT(server_now, 50.0);
    } else {  // its launches overlap: it does not give way, and nothing changes
      EXPECT_NEAR(server_now, server_before, 3.0);
      EXPECT_NEAR(trainer_now, trainer_before, 3.0);
    }
  }
}

// bench/compute/host_mix.py's mixA: 3 us kernels and every fifth of 40 us, 10 us of host work per
// launch, a synchronisation every 50.
WorkloadSpec HostBoundMix() {
  WorkloadSpec w;
  w.kernels_ns = {3 * kUs, 3 * kUs, 3 * kUs, 3 * kUs, 40 * kUs};
  w.think_ns = 10 * kUs;
  w.sync_every = 50;
  return w;
}

// A launcher slower than its cheap kernels, with an expensive one among them: one thread, 3 us
// kernels and every fifth one of 40 us, 10 us of host work after each launch, a synchronisation
// every 50 launches (eager inference on a small batch looks so). Its deep intervals (the queue
// held them) are the cheap launches queued behind an expensive one, which itself always starts on
// a stream run dry: learned uniform from the cheap ones, the stream's intervals were capped at
// their cost and the expensive launches went unseen: 99.1 of native at a limit of 60 (where its
// native busy share leaves 76) and 80.0 at 30, and on an H200 81.8% GPU-Util at 60
// (docs/benchmarks.md, 2026-11-27). Launches measured alone, now and then at random, see them.
//
// A launch reaches the GPU a while after its call returned (the simulation's submit latency; on an
// H200 kernels started ~9 us after the call returned): the mark before a launch may be pending
// when the launch is made and complete before it arrives, and the launches between two marks
// need not be queued behind the first one although it was pending when the second was recorded.
// Counted as busy, those idle times gave this mix 59.8 / 57.3 of native at 60 with 3 / 9 us of
// latency (76.7 / 77.3 due), and an H200 66.8 (76.8 due). An interval starts no sooner than its
// first launch could, and is deep only if its launches' returns say so
// (BusyTrackerOptions::visible_slack_ns): 75.1 / 75.2.
TEST(ConcurrencyTest, HostBoundMixOfCheapAndExpensiveLaunchesIsCounted) {
  const WorkloadSpec w = HostBoundMix();
  for (int64_t latency : {3 * kUs, 9 * kUs}) {
    double native = 0, native_busy = 0;
    for (int target : {0, 60, 30}) {
      SCOPED_TRACE(testing::Message() << latency << " ns, " << target);
      const SoloRun run = RunSolo(target, w, 5 * kMs, {.submit_latency_ns = latency});
      if (target == 0) {
        native = run.work;
        native_busy = run.busy;
        ASSERT_LT(native_busy, 0.9);  // host-bound natively
        continue;
      }
      const double share = 100.0 * run.work / native;
      const double expected = WhatTheLimitLeaves(target, native_busy);
      std::printf("[ matrix ] host-bound mix of 3 and 40 us kernels, %d us to the GPU, at %d: %.1f of native "
                  "(its busy share leaves %.1f), %.3f marks per launch\n",
                  static_cast<int>(latency / kUs), target, share, expected, EventsPerLaunch(run.stats));
      EXPECT_NEAR(share, expected, 3.0);
    }
  }
}

// The same mix with light measurement held on (ContainerSpec::light_forced): its light tails are
// charged estimates, and those must be what its launches cost on average. Learned from every
// measured interval, the estimates came from the cheap launches that queued behind an expensive
// one and the light tails were charged 0.6 of what ran: 97.0% of native at 60 where 76.5 is due
// (and on an H200, once, 93.6% at 60 where 78.9 was due, the limiter measuring 32.9% of the GPU
// while GPU-Util read 73.6; docs/benchmarks.md, 2026-11-28). Learned from windows of launches
// measured exactly in their order (BusyTrackerOptions::light_window_every): what is due.
TEST(ConcurrencyTest, LightEstimatesChargeAHostBoundMixWhatItRan) {
  const WorkloadSpec w = HostBoundMix();
  for (int64_t latency : {1 * kUs, 9 * kUs}) {
    SCOPED_TRACE(testing::Message() << latency << " ns");
    const SoloGpu gpu{.event_gpu_ns = 2 * kUs, .submit_latency_ns = latency};
    SoloGpu forced = gpu;
    forced.light_forced = true;
    const SoloRun native = RunSolo(0, w, 5 * kMs, gpu);
    const SoloRun run = RunSolo(60, w, 5 * kMs, forced);
    const double share = 100.0 * run.work / native.work;
    const double expected = WhatTheLimitLeaves(60, native.busy);
    std::printf("[ light ] host-bound mix of 3 and 40 us kernels held light, %d us to the GPU, at 60: %.1f of native "
                "(its busy share leaves %.1f), %lld of %lld launches light, measured %.3f of the kernels' time\n",
                static_cast<int>(latency / kUs), share, expected, static_cast<long long>(run.stats.light_launches),
                static_cast<long long>(run.stats.launches), run.measured_over_truth);
    EXPECT_GT(run.stats.light_launches, run.stats.launches / 100);  // light tails (about 8 launches each) for much of the run
    EXPECT_NEAR(share, expected, 3.0);
  }
}

// The limiter's own events take GPU time: on an H200 a mark between two queued kernels widened
// the gap between them from 1.7 to 3.1 us. Charged as the container's busy time, they cost a
// launcher marked at nearly every launch that share of its throughput: the mix above with events
// of 2 us got 59.5 of native at a limit of 60 where its native busy share leaves 76. Each interval
// now counts its mark's GPU time less (BusyTrackerOptions::mark_gpu_ns): 65 here while the launch
// reached the GPU as its call started, the rest being idle time hidden in chain intervals, which
// the H200 showed too (docs/benchmarks.md, 2026-11-27, the kernels' own stamps). With launches
// reaching the GPU as their calls end and that idle time cut (the test above): 75.2, and 69.1
// with the marks charged.
TEST(ConcurrencyTest, TheLimitersOwnEventsAreNotChargedToTheContainer) {
  const WorkloadSpec w = HostBoundMix();
  const int64_t event_gpu = 2 * kUs;
  const SoloRun native = RunSolo(0, w, 5 * kMs, {.event_gpu_ns = event_gpu});
  ASSERT_LT(native.busy, 0.9);
  const double expected = WhatTheLimitLeaves(60, native.busy);
  double shares[2];
  const int64_t told[2] = {-1, 0};  // the tracker knows the events' cost (the harness's default), or not
  for (int i = 0; i < 2; ++i) {
    const SoloRun run = RunSolo(60, w, 5 * kMs, {.event_gpu_ns = event_gpu, .mark_gpu_ns = told[i]});
    shares[i] = 100.0 * run.work / native.work;
    std::printf("[ matrix ] host-bound mix, events of 2 us, %s: %.1f of native at 60 (its busy share leaves %.1f), "
                "%.3f marks per launch\n", i == 0 ? "their cost known" : "their cost charged", shares[i], expected,
                EventsPerLaunch(run.stats));
  }
  EXPECT_GT(shares[0], shares[1] + 4.0);
  EXPECT_LT(shares[0], expected + 3.0);  // never more than its share
}

// A launcher slower than its kernels (each launch finds its stream run dry) well below its limit:
// bracketing every launch with a begin and a mark costs its host ~2.5 us per launch (on an H200 a
// stream of 10 us kernels with 20 us of host work did 88.5% of its native rate at a limit of 99).
// With the whole GPU busy below the limit (the monitor's NVML sample) and no debt, the tracker
// measures such launches by samples (light measurement) and the launcher keeps its native rate;
// without it, it does not.
TEST(ConcurrencyTest, ALauncherWellBelowItsLimitKeepsItsNativeRate) {
  struct Case {
    const char* name;
    int sync_every;
  };
  for (const Case& k : {Case{"free-running", 0}, Case{"synchronised after every launch", 1}}) {
    WorkloadSpec w;
    w.kernels_ns = {10 * kUs};
    w.think_ns = 20 * kUs;
    w.sync_every = k.sync_every;
    const double native = RunSolo(0, w, 2 * kMs).work;
    const SoloRun light = RunSolo(90, w, 2 * kMs);
    const SoloRun exact = RunSolo(90, w, 2 * kMs, {.light = false});
    const double light_share = 100.0 * light.work / native;
    const double exact_share = 100.0 * exact.work / native;
    std::printf("[ light ] %s at 90: %.1f of native (events per launch %.2f), %.1f measured exactly (%.2f)\n",
                k.name, light_share, EventsPerLaunch(light.stats), exact_share, EventsPerLaunch(exact.stats));
    SCOPED_TRACE(k.name);
    EXPECT_GT(light_share, 97.0);
    EXPECT_LT(EventsPerLaunch(light.stats), 0.5);
    EXPECT_LT(exact_share, 94.0);  // what light measurement buys
  }
}

// A launcher whose native demand is at its limit, where the limit hardly binds: eager launches
// of a mix of 5-40 us kernels with 13-14 us of host work each (the queue drains to empty every
// few launches, so exact measurement marks about every launch), a synchronisation every 40.
// Measured exactly it loses 6-8% of its rate to the events; light measurement, on while the
// whole GPU is busy less than the limit, keeps it within 3 points of its target, and never over
// its limit.
TEST(ConcurrencyTest, ALauncherAtItsLimitKeepsItsRate) {
  for (int64_t think : {13 * kUs, 14 * kUs}) {
    WorkloadSpec w;
    w.kernels_ns = {5 * kUs, 20 * kUs, 8 * kUs, 40 * kUs, 6 * kUs};
    w.think_ns = think;
    w.sync_every = 40;
    w.think_after_sync_ns = 30 * kUs;
    const SoloRun native = RunSolo(0, w, 2 * kMs);
    const SoloRun light = RunSolo(90, w, 2 * kMs);
    const SoloRun exact = RunSolo(90, w, 2 * kMs, {.light = false});
    const double light_share = 100.0 * light.work / native.work;
    const double exact_share = 100.0 * exact.work / native.work;
    const double target = WhatTheLimitLeaves(90, native.busy);
    std::printf("[ light ] host work %lld us, %.1f%% busy natively, at 90 (target %.1f): %.1f of native "
                "(busy %.1f%%), %.1f measured exactly (busy %.1f%%)\n",
                static_cast<long long>(think / kUs), 100 * native.busy, target, light_share, 100 * light.busy,
                exact_share, 100 * exact.busy);
    SCOPED_TRACE(think);
    EXPECT_NEAR(light_share, target, 3.0);
    EXPECT_LT(light.busy, 0.905);
    EXPECT_LT(exact_share, target - 5.0);  // what light measurement buys
  }
}

// A server in waves: decode steps replayed from graphs of 5 ms, each waited for, for 700 ms (the
// GPU ~97% busy), then 200 ms of prefills on the same stream: eager launches of a mix of 5-40 us
// kernels with 25 us of host work each, a synchronisation every 40 (the host sets the pace). ~91%
// busy natively: about its limit of 90 on average, above it in every wave, which outlasts the
// credit a trough banks (at 90, 45 ms of busy time: a wave at 97% spends it in ~0.6 s), so the
// limit binds at the end of each wave. Each prefill's first kernels are charged the kernels'
// cost, not the graphs' (BusyTracker's estimates by kind): charged the stream's mix, they were
// throttled 138 ms here instead of 125 (96.6 of native instead of 97.0).
TEST(ConcurrencyTest, AServerInWavesAtItsLimit) {
  WorkloadSpec w;
  w.graph_kernels = 10;
  w.kernels_ns = {500 * kUs};
  w.sync_every = 1;
  w.think_ns = 100 * kUs;
  w.think_after_sync_ns = 30 * kUs;
  w.wave_ns = 700 * kMs;
  w.trough_ns = 200 * kMs;
  w.trough = LaunchPhase{{5 * kUs, 20 * kUs, 8 * kUs, 40 * kUs, 6 * kUs}, 0, 40, 25 * kUs};
  const SoloRun native = RunSolo(0, w, 2 * kMs);
  const SoloRun limited = RunSolo(90, w, 2 * kMs);
  const double target = WhatTheLimitLeaves(90, native.busy);
  const double share = 100.0 * limited.work / native.work;
  std::printf("[ waves ] %.1f%% busy natively, at 90 (target %.1f): %.1f of native, busy %.1f%%, throttled %.1f ms, "
              "measured %.3f of the kernels' time, %.2f events per launch\n",
              100 * native.busy, target, share, 100 * limited.busy, limited.throttled_ms, limited.measured_over_truth,
              EventsPerLaunch(limited.stats));
  EXPECT_NEAR(share, target, 3.0);
  EXPECT_LT(limited.busy, 0.905);
  EXPECT_NEAR(limited.measured_over_truth, 1.0, 0.01);
  EXPECT_LT(limited.throttled_ms, 132);
}

// Launches reach the GPU after a delay that jitters (here 3-8 us, uniformly; on an H200 the tenth
// percentile of a kernel's start came ~5 us before the median). An interval that follows a
// drained stream starts no sooner than the first launch's return plus D, the least delay seen,
// so on average it still holds part of the wait for the launch: eager launches of 5-40 us kernels
// with 20 us of host work each (68% busy natively) got 78.5 of their 88.7 at 60. With the begins'
// mean excess over D added to the bound (BusyTrackerOptions::start_delay_excess = 1), 87.4. Not
// the default: on an H200 the begins' excess is not the kernels' (docs/benchmarks.md, 2026-11-28).
TEST(ConcurrencyTest, AJitteringLaunchDelayIsNotCountedAsBusy) {
  WorkloadSpec w;
  w.kernels_ns = {5 * kUs, 20 * kUs, 8 * kUs, 40 * kUs, 6 * kUs};
  w.think_ns = 20 * kUs;
  w.sync_every = 40;
  w.think_after_sync_ns = 30 * kUs;
  const SoloGpu jitter{.submit_jitter_ns = 5 * kUs};
  const SoloRun native = RunSolo(0, w, 2 * kMs, jitter);
  const double target = WhatTheLimitLeaves(60, native.busy);
  SoloGpu excess = jitter;
  excess.start_delay_excess = 1;
  const double least = 100.0 * RunSolo(60, w, 2 * kMs, jitter).work / native.work;
  const SoloRun mean = RunSolo(60, w, 2 * kMs, excess);
  const double mean_share = 100.0 * mean.work / native.work;
  std::printf("[ matrix ] launch delay jittering over 5 us, at 60 (target %.1f): %.1f bounded by the least delay, "
              "%.1f by the mean (busy %.1f%%)\n",
              target, least, mean_share, 100 * mean.busy);
  EXPECT_LT(least, target - 5.0);
  EXPECT_NEAR(mean_share, target, 3.0);
  EXPECT_LT(mean.busy, 0.61);
}

// Light measurement is for one stream of one process: host threads each on their own stream,
// overlapping, in one or two processes, 33-67% busy natively (their launches find their streams
// idle). Estimates are not in the union, so light measurement there counted their shared time
// once per stream: at 80 two processes were throttled to 80% of their native rate, where exact
// measurement leaves them 96%.
TEST(ConcurrencyTest, ConcurrentLaunchersBelowTheLimitAreNotOvercharged) {
  for (int processes : {1, 2}) {
    auto run = [&](int target) {
      Simulation sim;
      ContainerSpec spec;
      spec.limits = ComputeLimits::FromPercent(target, 0, 1);
      spec.use_limiter = target > 0;
      spec.tick_ns = 2 * kMs;
      const int c = sim.AddContainer(spec);
      for (int p = 0; p < processes; ++p) {
        const int process = sim.AddProcess(c);
        for (int t = 0; t < 4; ++t) {
          WorkloadSpec w;
          w.kernels_ns = {20 * kUs};
          w.think_ns = 60 * kUs;
          w.width = 0.25;
          w.seed = 1 + t + 16 * p;
          sim.AddThread(process, w);
        }
      }
      sim.RunUntil(kEnd);
      return std::make_pair(static_cast<double>(sim.ContainerWorkNs(c, kWarmup, kEnd)),
                            sim.Snapshot(c).throttled_total_ns);
    };
    const double native = run(0).first;
    const auto [work, throttled] = run(80);
    std::printf("[ light ] %d process(es) x 4 threads of 20 us kernels at 80: %.1f of native, throttled %.1f ms\n",
                processes, 100.0 * work / native, static_cast<double>(throttled) / 1e6);
    SCOPED_TRACE(processes);
    EXPECT_GT(100.0 * work / native, 94.0);
    EXPECT_EQ(throttled, 0u);
  }
}

// Light measurement ends as the container's demand rises: a launcher run dry at every launch
// (light) is joined by a saturating one; the container is held to its limit from the next
// signal on, measured exactly again.
TEST(ConcurrencyTest, LightMeasurementEndsWhenTheDemandRises) {
  Simulation sim;
  ContainerSpec spec;
  spec.limits = ComputeLimits::FromPercent(60, 0, 1);
  spec.tick_ns = 2 * kMs;
  const int c = sim.AddContainer(spec);
  const int process = sim.AddProcess(c);
  WorkloadSpec dry;
  dry.kernels_ns = {10 * kUs};
  dry.think_ns = 20 * kUs;
  sim.AddThread(process, dry);
  WorkloadSpec busy;
  busy.kernels_ns = {50 * kUs};
  busy.streams = 2;
  busy.start_ns = 2 * kSec;
  sim.AddThread(process, busy);
  sim.RunUntil(2 * kSec);
  const int64_t light_before = sim.Stats(process).light_launches;
  EXPECT_GT(light_before, 0);  // measured lightly while alone below the limit
  sim.RunUntil(kEnd + 1 * kSec);
  const double share = 100.0 * sim.ContainerShare(c, 2 * kSec + 500 * kMs, kEnd + 1 * kSec);
  std::printf("[ light ] joined by a saturating launcher at 60: busy %.1f%%, light launches %lld then %lld\n",
              share, static_cast<long long>(light_before), static_cast<long long>(sim.Stats(process).light_launches));
  EXPECT_NEAR(share, 60.0, 2.0);
  // and it ended within a few signals (2 s of it had measured light_before launches lightly)
  EXPECT_LT(sim.Stats(process).light_launches - light_before, light_before / 4);
}

}  // namespace
}  // namespace vgpu::compute::sim
