// End-to-end accuracy of the compute limiter (BusyTracker + Controller + ComputeLimiter) on the
// simulated GPU: the achieved share, as ground truth from the model, for every kernel mix and
// target, several containers, the soft limit and priority. Deterministic, simulated time.
//
// The table is printed by the test itself (ctest -V, or run the binary); docs/compute.md
// quotes it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "compute/sim_harness.h"

namespace vgpu::compute::sim {
namespace {

constexpr int64_t kUs = 1'000;
constexpr int64_t kMs = 1'000'000;
constexpr int64_t kSec = 1'000'000'000;

struct Mix {
  std::string name;
  WorkloadSpec workload;
};

// The kernel mixes of the brief. Every one saturates the GPU when unlimited.
std::vector<Mix> Mixes() {
  std::vector<Mix> mixes;
  WorkloadSpec w;
  w.kernels_ns = {2 * kMs};
  mixes.push_back({"2 ms kernels", w});
  w.kernels_ns = {50 * kUs};
  mixes.push_back({"50 us kernels", w});
  w.kernels_ns = {5 * kUs};
  mixes.push_back({"5 us kernels", w});
  w.kernels_ns = {5 * kUs, 50 * kUs, 2 * kMs, 5 * kUs, 200 * kUs};
  w.shuffle = true;
  mixes.push_back({"mixed 5us-2ms", w});
  w = WorkloadSpec();
  w.kernels_ns = {20 * kUs, 80 * kUs, 50 * kUs};
  w.graph_kernels = 20;  // one launch = 20 kernels, ~1 ms
  mixes.push_back({"graphs of 20", w});
  w = WorkloadSpec();
  w.kernels_ns = {300 * kUs};  // matmul-like: a few hundred us, synchronised every 10
  w.sync_every = 10;
  mixes.push_back({"300us, sync/10", w});
  return mixes;
}

struct Outcome {
  double share = 0;         // whole measurement window
  double worst_second = 0;  // the 1 s window furthest from the target
  double marks_per_launch = 0;
};

Outcome RunAlone(const WorkloadSpec& workload, int target, int64_t warmup, int64_t end,
                 bool use_limiter = true, const ControllerOptions& options = ControllerOptions()) {
  Simulation sim;
  ContainerSpec spec;
  spec.limits = ComputeLimits::FromPercent(target, 0, 1);
  spec.use_limiter = use_limiter;
  spec.controller = options;
  int c = sim.AddContainer(spec);
  int p = sim.AddProcess(c);
  sim.AddThread(p, workload);
  sim.RunUntil(end);
  Outcome o;
  o.share = 100 * sim.ContainerShare(c, warmup, end);
  o.worst_second = o.share;
  for (int64_t t = warmup; t + kSec <= end; t += kSec) {
    double s = 100 * sim.ContainerShare(c, t, t + kSec);
    if (std::abs(s - target) > std::abs(o.worst_second - target)) o.worst_second = s;
  }
  TrackerStats stats = sim.Stats(p);
  o.marks_per_launch = stats.launches > 0 ? double(stats.marks) / double(stats.launches) : 0;
  return o;
}

TEST(AccuracyTest, UnlimitedMixesSaturateTheGpu) {
  for (const Mix& mix : Mixes()) {
    Outcome o = RunAlone(mix.workload, 0, 200 * kMs, 1 * kSec, /*use_limiter=*/false);
    EXPECT_GT(o.share, 90) << mix.name;  // so that a limited share is the limiter's doing
  }
}

// The table of the brief: every mix at 10/30/60/90 within +-3 points, over the run and in every
// 1 s window (nvidia-smi's averaging).
TEST(AccuracyTest, SingleContainerMeetsEveryTargetForEveryMix) {
  const int targets[] = {10, 30, 60, 90};
  std::printf("\n%-16s %22s %22s %22s %22s\n", "share % (worst 1 s)", "target 10", "target 30",
              "target 60", "target 90");
  for (const Mix& mix : Mixes()) {
    std::printf("%-16s", mix.name.c_str());
    for (int target : targets) {
      Outcome o = RunAlone(mix.workload, target, 1 * kSec, 4 * kSec);
      std::printf("   %5.1f (%5.1f) m/l %.2f", o.share, o.worst_second, o.marks_per_launch);
      EXPECT_NEAR(o.share, target, 3.0) << mix.name << " at " << target;
      EXPECT_NEAR(o.worst_second, target, 3.0) << mix.name << " at " << target;
    }
    std::printf("\n");
  }
}

// Slices of a 1 s period (VGPU_COMPUTE_PERIOD=1s): the same targets over ten periods, and the
// container really rests: some 100 ms window at every target but 90 is idle.
TEST(AccuracyTest, SlicesMeetEveryTargetForEveryMix) {
  ControllerOptions options;
  options.period_ns = 1 * kSec;
  for (const Mix& mix : Mixes()) {
    std::printf("%-16s slices of 1 s:", mix.name.c_str());
    for (int target : {10, 30, 60, 90}) {
      Outcome o = RunAlone(mix.workload, target, 1 * kSec, 41 * kSec, true, options);
      std::printf("  %5.1f (worst 1 s %5.1f)", o.share, o.worst_second);
      EXPECT_NEAR(o.share, target, 3.0) << mix.name << " at " << target;
    }
    std::printf("\n");
  }
}

// Each mark is one cuEventRecord (about 1.2 us on an H200, against 4.3 us for a launch). Every
// throttle sleep restarts the stream from empty, so the lower the share the more marks.
TEST(AccuracyTest, MarkingCostStaysSmallForSmallKernels) {
  WorkloadSpec w;
  w.kernels_ns = {5 * kUs};
  EXPECT_LT(RunAlone(w, 30, 1 * kSec, 2 * kSec).marks_per_launch, 0.2);
  EXPECT_LT(RunAlone(w, 90, 1 * kSec, 2 * kSec).marks_per_launch, 0.06);
}

// Host-bound: a 5 us kernel, then a synchronisation, every time. The stream is idle at every
// launch, so every interval starts at a begin event; the residual begin skew is the error.
TEST(AccuracyTest, HostBoundLaunchAndSyncLoop) {
  WorkloadSpec w;
  w.kernels_ns = {5 * kUs};
  w.sync_every = 1;
  Outcome natural = RunAlone(w, 0, 200 * kMs, 1 * kSec, false);
  for (int target : {10, 30}) {
    Outcome o = RunAlone(w, target, 1 * kSec, 3 * kSec);
    std::printf("launch+sync 5 us kernels at %d: %.1f (natural %.1f)\n", target, o.share,
                natural.share);
    EXPECT_NEAR(o.share, target, 3.0);
  }
}

TEST(AccuracyTest, WorkloadBelowItsLimitIsNotSlowedDown) {
  WorkloadSpec w;
  w.kernels_ns = {50 * kUs};
  w.sync_every = 1;
  w.think_after_sync_ns = 200 * kUs;  // wants ~20%
  Outcome natural = RunAlone(w, 0, 1 * kSec, 3 * kSec, false);
  Outcome limited = RunAlone(w, 30, 1 * kSec, 3 * kSec);
  ASSERT_LT(natural.share, 27);
  EXPECT_NEAR(limited.share, natural.share, 1.0);
}

TEST(AccuracyTest, BurstyWorkloadGetsItsShareWhileActive) {
  // On for 1 s, off for 1 s (three threads taking turns); measured during the on phases. The
  // first phase starts without credit; the later ones spend what the off phase banked first
  // (max_credit_busy_ns, 100 ms of busy time: gone ~143 ms into the phase at 30%), then hold
  // the share.
  Simulation sim;
  ContainerSpec spec;
  spec.limits = ComputeLimits::FromPercent(30, 0, 1);
  int c = sim.AddContainer(spec);
  int p = sim.AddProcess(c);
  for (int phase = 0; phase < 3; ++phase) {
    WorkloadSpec w;
    w.kernels_ns = {100 * kUs, 1 * kMs};
    w.start_ns = phase * 2 * kSec;
    w.stop_ns = w.start_ns + kSec;
    sim.AddThread(p, w);
  }
  sim.RunUntil(6 * kSec);
  const double credit = 100.0 * static_cast<double>(ControllerOptions().max_credit_busy_ns) / kSec;
  EXPECT_NEAR(100 * sim.ContainerShare(c, 0, kSec), 30, 3);
  for (int phase = 0; phase < 3; ++phase) {
    int64_t on = phase * 2 * kSec;
    EXPECT_NEAR(100 * sim.ContainerShare(c, on + 200 * kMs, on + kSec), 30, 3) << phase;
    // At most the share and the credit, give or take a run (15 ms at 30 of 50 ms periods)
    EXPECT_LE(100 * sim.ContainerShare(c, on, on + kSec), 30 + credit + 2) << phase;
    EXPECT_LT(100 * sim.ContainerShare(c, on + kSec + 50 * kMs, on + 2 * kSec), 1) << phase;
  }
  EXPECT_GT(100 * sim.ContainerShare(c, 2 * kSec, 3 * kSec), 30 + credit / 2);  // the bank was spent
}

// A server below its limit on average: bursts of 150 ms of work, each waited for, then 195 ms of
// host time (43% busy alone), at a limit of 60. The banked credit lets its bursts through (1.00 of
// its native work); with 20 ms of credit (the bound until 2026-11-26) it does 0.87.
TEST(AccuracyTest, BurstsOfAServerBelowItsLimitPassThrough) {
  WorkloadSpec w;
  w.kernels_ns = {1 * kMs};
  w.sync_every = 150;
  w.think_after_sync_ns = 195 * kMs;
  const Outcome natural = RunAlone(w, 0, 1 * kSec, 11 * kSec, /*use_limiter=*/false);
  ASSERT_NEAR(natural.share, 43.5, 2.0);
  const Outcome limited = RunAlone(w, 60, 1 * kSec, 11 * kSec);
  EXPECT_GE(limited.share / natural.share, 0.97) << limited.share << " of " << natural.share;
  ControllerOptions small;
  small.max_credit_busy_ns = 20 * kMs;
  const Outcome small_credit = RunAlone(w, 60, 1 * kSec, 11 * kSec, true, small);
  std::printf("server bursts at 60: native %.1f%%, limited %.1f%%, with 20 ms of credit %.1f%%\n", natural.share,
              limited.share, small_credit.share);
  EXPECT_LT(small_credit.share / natural.share, 0.95) << small_credit.share << " of " << natural.share;
}

// A training job's set-up (model, profiling pass, graph capture) barely uses the GPU, so the
// container banks credit; then it saturates. At a limit of 90 the bank used to last a second at
// full speed (100 ms of busy time spent at 10% a second): on the H200 the training step read 93.5
// in a 1.6 s window that began 0.5 s into its loop. Bounded by max_credit_burst_ns (at 90 the
// floor min_credit_ns, 50 ms of wall time, makes it 450 ms), it is gone before such a window.
TEST(AccuracyTest, CreditBankedDuringASetUpIsSpentWithinABurst) {
  for (int target : {60, 90}) {
    SCOPED_TRACE(target);
    Simulation sim;
    ContainerSpec spec;
    spec.limits = ComputeLimits::FromPercent(target, 0, 1);
    const int c = sim.AddContainer(spec);
    const int p = sim.AddProcess(c);
    WorkloadSpec setup;  // a few kernels, then 3 s of host work
    setup.kernels_ns = {1 * kMs};
    setup.stop_ns = 5 * kMs;
    sim.AddThread(p, setup);
    WorkloadSpec loop;
    loop.kernels_ns = {200 * kUs, 2 * kMs};
    loop.start_ns = 3 * kSec;
    sim.AddThread(p, loop);
    sim.RunUntil(6 * kSec);
    const int64_t from = 3 * kSec;
    const double window = 100 * sim.ContainerShare(c, from + 500 * kMs, from + 2100 * kMs);
    std::printf("set-up then saturating at %d: %.1f%% in [0.5, 2.1] s, %.1f%% in the first 0.5 s\n", target, window,
                100 * sim.ContainerShare(c, from, from + 500 * kMs));
    EXPECT_NEAR(window, target, 1.0);
    EXPECT_GT(100 * sim.ContainerShare(c, from, from + 250 * kMs), target + 2);  // the bank is spent first
  }
}

TEST(AccuracyTest, ConcurrentStreamsOfOneProcessShareItsLimit) {
  WorkloadSpec w;
  w.kernels_ns = {1 * kMs, 20 * kUs};
  w.streams = 3;
  for (int target : {30, 60}) {
    Outcome o = RunAlone(w, target, 1 * kSec, 3 * kSec);
    EXPECT_NEAR(o.share, target, 3.0) << target;
  }
}

// Random workloads (kernel sizes 2 us to 10 ms, graphs, 1-3 streams, synchronisation, host think
// time) at random limits. The limit is a cap: never more than target + 3. And a workload whose
// kernels are all >= 20 us gets min(target, what it achieves unlimited) - 3 at least. (Kernels
// of a few us launched as fast as the host can are the documented exception: the tracker's own
// event records slow such a launcher down, and launch gaps count as busy.)
WorkloadSpec RandomWorkload(std::mt19937_64& rng) {
  const int64_t sizes[] = {2 * kUs, 5 * kUs, 20 * kUs, 50 * kUs, 200 * kUs, 1 * kMs, 2 * kMs, 10 * kMs};
  WorkloadSpec w;
  w.kernels_ns.clear();
  for (int i = 0, n = 1 + static_cast<int>(rng() % 4); i < n; ++i) w.kernels_ns.push_back(sizes[rng() % 8]);
  w.shuffle = rng() % 2;
  w.seed = rng();
  if (rng() % 4 == 0) w.graph_kernels = 2 + static_cast<int>(rng() % 20);
  w.streams = 1 + static_cast<int>(rng() % 3);
  if (rng() % 3 == 0) w.sync_every = 1 + static_cast<int>(rng() % 50);
  if (rng() % 3 == 0) w.think_ns = static_cast<int64_t>(rng() % 200) * kUs / 10;
  if (rng() % 3 == 0) w.think_after_sync_ns = static_cast<int64_t>(rng() % 100) * kUs;
  return w;
}

TEST(AccuracyTest, RandomWorkloadsNeverExceedTheirLimit) {
  std::mt19937_64 rng(20251120);
  for (int i = 0; i < 24; ++i) {
    WorkloadSpec w = RandomWorkload(rng);
    int target = 5 + static_cast<int>(rng() % 90);
    double natural = RunAlone(w, 0, 500 * kMs, 1500 * kMs, /*use_limiter=*/false).share;
    double share = RunAlone(w, target, 2 * kSec, 4 * kSec).share;
    EXPECT_LE(share, target + 3) << "case " << i << " kernels " << w.kernels_ns[0] << "/" << w.kernels_ns.size()
                                 << " graph " << w.graph_kernels << " streams " << w.streams << " sync " << w.sync_every
                                 << " think " << w.think_ns << " shuffle " << w.shuffle;
    bool small_kernels = *std::min_element(w.kernels_ns.begin(), w.kernels_ns.end()) < 20 * kUs;
    if (!small_kernels) {
      EXPECT_GE(share, std::min<double>(target, natural) - 3) << "case " << i;
    }
  }
}

}  // namespace
}  // namespace vgpu::compute::sim
