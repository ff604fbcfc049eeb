// Several containers (and processes) on one simulated GPU: shares, the soft limit, priority.
// Ground truth comes from the model; the model time-slices between contexts (2 ms slices), so a
// container's timing events also see time during which ANOTHER container ran (see
// docs/compute.md, "Contention"): where that matters the tests say so and feed the reference
// signal (NVML per-process utilisation in production).
#include <gtest/gtest.h>

#include <cstdio>

#include "compute/sim_harness.h"

namespace vgpu::compute::sim {
namespace {

constexpr int64_t kUs = 1'000;
constexpr int64_t kMs = 1'000'000;
constexpr int64_t kSec = 1'000'000'000;

WorkloadSpec Saturating(int64_t kernel_ns, int64_t start = 0, int64_t stop = kNever) {
  WorkloadSpec w;
  w.kernels_ns = {kernel_ns};
  w.start_ns = start;
  w.stop_ns = stop;
  return w;
}

ContainerSpec Container(int hard, int soft = 0, int priority = 1, bool reference = false) {
  ContainerSpec c;
  c.limits = ComputeLimits::FromPercent(hard, soft, priority);
  c.reference_signal = reference;
  return c;
}

struct Pair {
  double a = 0;
  double b = 0;
};

struct PairSetup {
  int64_t kernel_ns = 50 * kUs;
  bool reference = false;     // NVML per-process utilisation as the feedback's sensor
  bool turns = true;          // the containers take turns (GpuTurn)
  int64_t switch_ns = 0;      // GPU time lost per context switch
  int64_t period_ns = 0;      // slices (VGPU_COMPUTE_PERIOD)
};

Pair TwoContainers(const PairSetup& setup) {
  SimGpuParams gpu;
  gpu.context_switch_ns = setup.switch_ns;
  Simulation sim(gpu);
  ContainerSpec at30 = Container(30, 0, 1, setup.reference);
  ContainerSpec at60 = Container(60, 0, 1, setup.reference);
  at30.controller.take_turns = at60.controller.take_turns = setup.turns;
  at30.controller.period_ns = at60.controller.period_ns = setup.period_ns;
  int a = sim.AddContainer(at30);
  int b = sim.AddContainer(at60);
  sim.AddThread(sim.AddProcess(a), Saturating(setup.kernel_ns));
  sim.AddThread(sim.AddProcess(b), Saturating(setup.kernel_ns));
  // Slices: whole periods weigh the same in the average only over many of them.
  const int64_t end = setup.period_ns > 0 ? 42 * kSec : 6 * kSec;
  sim.RunUntil(end);
  Pair p{100 * sim.ContainerShare(a, 2 * kSec, end), 100 * sim.ContainerShare(b, 2 * kSec, end)};
  std::printf("containers at 30 and 60, %ld us kernels, reference %d, turns %d, switch %ld us, period %ld ms: "
              "%.1f and %.1f (GPU busy %.1f)\n",
              static_cast<long>(setup.kernel_ns / kUs), setup.reference, setup.turns,
              static_cast<long>(setup.switch_ns / kUs), static_cast<long>(setup.period_ns / kMs), p.a, p.b,
              100 * sim.DeviceShare(2 * kSec, end));
  return p;
}

// 120 us per switch reproduces the H200's 93% for two unlimited contexts of 50 us kernels
// (2 ms slices: 7% of a slice) and its ~125 us per hand-over (bench/compute/turn_probe.sh).
constexpr int64_t kH200SwitchNs = 120 * kUs;

TEST(SharingTest, TwoContainersAt30And60EachGetTheirShare) {
  for (int64_t kernel : {50 * kUs, 2 * kMs}) {
    for (int64_t switch_ns : {int64_t{0}, kH200SwitchNs}) {
      Pair p = TwoContainers({.kernel_ns = kernel, .switch_ns = switch_ns});
      EXPECT_NEAR(p.a, 30, 3) << kernel << " " << switch_ns;
      EXPECT_NEAR(p.b, 60, 3) << kernel << " " << switch_ns;
    }
  }
}

// Limits that add up to the whole GPU (a power-capped workload's neighbours must fill it, or its
// clocks rise: docs/compute.md, "Power"): every container still gets its share. The GPU idles
// only at hand-overs, so a waiter must see the turn free soon after the holder's work is done
// (which a claim, made of estimates, may place well after it): waiters that slept until the
// claimed end got 23.1 / 23.7 / 24.3 / 6.1 at 30 + 30 + 30 + 10 with 1.67 ms kernels. And a
// waiter must not barge into a turn: with the wait for the turn bounded in all rather than per
// holder, those containers' kernels ran 27.0 / 27.1 / 28.2 / 8.1 (90% busy) while each was
// charged its limit, the contexts time-slicing in ~10% of the time (BusyTrackerOptions::
// visible_slack_ns: a least launch delay that grew had hidden part of it).
std::vector<double> FillingContainers(const std::vector<int>& limits, int64_t kernel_ns, int max_queue) {
  SimGpuParams gpu;
  gpu.context_switch_ns = kH200SwitchNs;
  Simulation sim(gpu);
  std::vector<int> ids;
  for (int limit : limits) {
    ContainerSpec c = Container(limit);
    c.tick_ns = 5 * kMs;  // libvgpu's monitor thread: a holder whose work is done releases its turn
    ids.push_back(sim.AddContainer(c));
    WorkloadSpec w = Saturating(kernel_ns);
    w.max_queue = max_queue;
    sim.AddThread(sim.AddProcess(ids.back()), w);
  }
  const int64_t end = 6 * kSec;
  sim.RunUntil(2 * kSec);
  std::vector<uint64_t> charged_before;
  for (int id : ids) charged_before.push_back(sim.Snapshot(id).busy_total_ns);
  sim.RunUntil(end);
  std::vector<double> shares;
  std::printf("filling the GPU, %ld us kernels, queue %d:", static_cast<long>(kernel_ns / kUs), max_queue);
  for (size_t i = 0; i < ids.size(); ++i) {
    shares.push_back(100 * sim.ContainerShare(ids[i], 2 * kSec, end));
    const double charged = 100.0 * (sim.Snapshot(ids[i]).busy_total_ns - charged_before[i]) / (end - 2 * kSec);
    std::printf(" %.1f (charged %.1f)", shares.back(), charged);
  }
  std::printf(" (GPU busy %.1f)\n", 100 * sim.DeviceShare(2 * kSec, end));
  return shares;
}

TEST(SharingTest, ContainersFillingTheGpuEachGetTheirShare) {
  for (int64_t kernel : {50 * kUs, 1670 * kUs}) {
    for (const std::vector<int>& limits : {std::vector<int>{30, 60, 10}, std::vector<int>{30, 30, 30, 10}}) {
      std::vector<double> got = FillingContainers(limits, kernel, 16);
      for (size_t i = 0; i < limits.size(); ++i) EXPECT_NEAR(got[i], limits[i], 3) << kernel << " #" << i;
    }
  }
}

TEST(SharingTest, TwoContainersInSlicesEachGetTheirShare) {
  for (int64_t kernel : {50 * kUs, 2 * kMs}) {
    Pair p = TwoContainers({.kernel_ns = kernel, .switch_ns = kH200SwitchNs, .period_ns = 1 * kSec});
    EXPECT_NEAR(p.a, 30, 3) << kernel;
    EXPECT_NEAR(p.b, 60, 3) << kernel;
  }
}

TEST(SharingTest, WithoutTurnsTimeSlicingMakesEventsOverCount) {
  // Overlapping contexts: each container's events include the other's slices (and, with a switch
  // cost, the switches), so events alone under-deliver (never over-deliver). The reference signal
  // corrects it where there is one; turns avoid it.
  Pair long_kernels = TwoContainers({.kernel_ns = 2 * kMs, .turns = false});
  EXPECT_LT(long_kernels.a, 27);
  EXPECT_GT(long_kernels.a, 10);  // neither starves
  EXPECT_GT(long_kernels.b, 40);
  Pair switching = TwoContainers({.kernel_ns = 50 * kUs, .turns = false, .switch_ns = kH200SwitchNs});
  EXPECT_LT(switching.b, 59);  // the H200 showed the same: 29.2 and 56.2 without turns
  Pair with_reference = TwoContainers({.kernel_ns = 2 * kMs, .reference = true, .turns = false});
  EXPECT_NEAR(with_reference.a, 30, 3);
  EXPECT_NEAR(with_reference.b, 60, 3);
}

TEST(SharingTest, ProcessesOfOneContainerShareOneBudget) {
  for (int64_t kernel : {50 * kUs, 2 * kMs}) {
    Simulation sim;
    int c = sim.AddContainer(Container(30, 0, 1, /*reference=*/true));
    sim.AddThread(sim.AddProcess(c), Saturating(kernel));
    sim.AddThread(sim.AddProcess(c), Saturating(kernel));
    sim.AddThread(sim.AddProcess(c), Saturating(kernel));
    sim.RunUntil(6 * kSec);
    EXPECT_NEAR(100 * sim.ContainerShare(c, 2 * kSec, 6 * kSec), 30, 3) << kernel;
  }
}

TEST(SharingTest, ProcessesOfOneContainerWithoutReferenceStayBelowTheLimit) {
  Simulation sim;
  int c = sim.AddContainer(Container(30));
  sim.AddThread(sim.AddProcess(c), Saturating(50 * kUs));
  sim.AddThread(sim.AddProcess(c), Saturating(50 * kUs));
  sim.RunUntil(4 * kSec);
  double share = 100 * sim.ContainerShare(c, 1 * kSec, 4 * kSec);
  std::printf("two processes of one container at 30, events only: %.1f\n", share);
  EXPECT_LT(share, 31);
  EXPECT_GT(share, 15);
}

// Two processes of one container, each with two streams of 500 us kernels, time-slice natively
// (2 ms slices, 120 us per switch: they do less work together than their streams would in one
// context). Under a limit they run together as natively (one run for the container), and their
// BusyRing keeps each one's events from charging the other's slices: the container does P% of
// its native work. Without the ring each charges the other's slices too (about half the share).
// Taking turns within the container, as libvgpu did before, gave up the native switches and did
// more than P% (the H200: 32.5 / 64.6 / 97.4 at 30 / 60 / 90 with kernels of fixed work), and
// runs of their own per process let them alternate (64 at 60 here).
double TwoProcessesWork(int limit, bool shared_busy) {
  SimGpuParams gpu;
  gpu.context_switch_ns = kH200SwitchNs;
  Simulation sim(gpu);
  ContainerSpec spec = Container(limit);
  spec.use_limiter = limit > 0;
  spec.shared_busy = shared_busy;
  int c = sim.AddContainer(spec);
  WorkloadSpec w = Saturating(500 * kUs);
  w.streams = 2;
  w.max_queue = 8;
  sim.AddThread(sim.AddProcess(c), w);
  sim.AddThread(sim.AddProcess(c), w);
  sim.RunUntil(5 * kSec);
  return static_cast<double>(sim.ContainerWorkNs(c, 1 * kSec, 5 * kSec));
}

TEST(SharingTest, ProcessesOfOneContainerRunTogetherAndGetTheirShareOfTheirWork) {
  const double native = TwoProcessesWork(0, true);
  for (int limit : {30, 60, 90}) {
    const double share = 100 * TwoProcessesWork(limit, true) / native;
    const double alone = 100 * TwoProcessesWork(limit, false) / native;
    std::printf("two processes x 2 streams of 500 us at %d: %.1f of native work (without the ring %.1f)\n", limit,
                share, alone);
    EXPECT_NEAR(share, limit, 3);
    EXPECT_LT(alone, limit * 0.6);
  }
}

TEST(SharingTest, SoftLimitBurstsOnlyWhileTheGpuIsOtherwiseIdle) {
  Simulation sim;
  int c = sim.AddContainer(Container(30, 80));
  ContainerSpec neighbour;
  neighbour.use_limiter = false;  // an unlimited job without vgpu
  int n = sim.AddContainer(neighbour);
  sim.AddThread(sim.AddProcess(c), Saturating(50 * kUs));
  sim.AddThread(sim.AddProcess(n), Saturating(50 * kUs, 3 * kSec, 6 * kSec));
  sim.RunUntil(9 * kSec);
  double alone = 100 * sim.ContainerShare(c, 1 * kSec, 3 * kSec);
  double shared = 100 * sim.ContainerShare(c, 3200 * kMs, 6 * kSec);
  double alone_again = 100 * sim.ContainerShare(c, 7 * kSec, 9 * kSec);
  std::printf("soft 30/80: alone %.1f, busy neighbour %.1f, alone again %.1f\n", alone, shared,
              alone_again);
  EXPECT_NEAR(alone, 80, 3);
  EXPECT_NEAR(shared, 30, 3);
  EXPECT_NEAR(alone_again, 80, 3);
  // The fall-back is quick: within 200 ms of the neighbour starting.
  EXPECT_LT(100 * sim.ContainerShare(c, 3200 * kMs, 3400 * kMs), 35);
}

// A low-priority container (30%) runs; a high-priority one runs from 2 s to 4 s.
void CheckPriority(int low_limit, int64_t kernel_ns, double expect_low) {
  Simulation sim;
  int low = sim.AddContainer(Container(low_limit, 0, 1));
  int high = sim.AddContainer(Container(50, 0, 0));
  sim.AddThread(sim.AddProcess(low), Saturating(kernel_ns));
  sim.AddThread(sim.AddProcess(high), Saturating(kernel_ns, 2 * kSec, 4 * kSec));
  sim.RunUntil(6 * kSec);
  EXPECT_NEAR(100 * sim.ContainerShare(low, 1 * kSec, 2 * kSec), expect_low, 3);
  // Within 100 ms the low-priority container is down to at most 5%, in every 50 ms window.
  for (int64_t t = 2100 * kMs; t < 4 * kSec; t += 50 * kMs) {
    ASSERT_LE(100 * sim.ContainerShare(low, t, t + 50 * kMs), 5.0) << t / kMs << " ms";
  }
  EXPECT_NEAR(100 * sim.ContainerShare(high, 2100 * kMs, 4 * kSec), 50, 3);
  // It recovers once the heartbeat has expired (200 ms) ...
  EXPECT_NEAR(100 * sim.ContainerShare(low, 4300 * kMs, 4500 * kMs), expect_low, 5);
  EXPECT_NEAR(100 * sim.ContainerShare(low, 4500 * kMs, 6 * kSec), expect_low, 3);
}

TEST(SharingTest, LowPriorityYieldsWithin100MsAndRecovers) {
  CheckPriority(30, 50 * kUs, 30);
  CheckPriority(30, 2 * kMs, 30);
}

// In slices of 1 s, the high-priority container starts in the middle of a run (1.9-2.2 s): the
// run ends at once. (Over the 2 s before and after, slices leave their phase in the average:
// +-5 points.)
TEST(SharingTest, LowPriorityInSlicesYieldsWithin100Ms) {
  Simulation sim;
  ContainerSpec low_spec = Container(30, 0, 1);
  low_spec.controller.period_ns = 1 * kSec;
  int low = sim.AddContainer(low_spec);
  int high = sim.AddContainer(Container(50, 0, 0));
  sim.AddThread(sim.AddProcess(low), Saturating(50 * kUs, 1900 * kMs));
  sim.AddThread(sim.AddProcess(high), Saturating(50 * kUs, 2 * kSec, 4 * kSec));
  sim.RunUntil(6 * kSec);
  EXPECT_GT(100 * sim.ContainerShare(low, 1900 * kMs, 2 * kSec), 90);  // it was running
  for (int64_t t = 2100 * kMs; t < 4 * kSec; t += 50 * kMs) {
    ASSERT_LE(100 * sim.ContainerShare(low, t, t + 50 * kMs), 5.0) << t / kMs << " ms";
  }
  EXPECT_GT(100 * sim.ContainerShare(low, 4300 * kMs, 6 * kSec), 20);  // and recovers
}

TEST(SharingTest, UnlimitedLowPriorityContainerYieldsToo) { CheckPriority(0, 100 * kUs, 100); }

TEST(SharingTest, BackgroundTickKeepsMeasurementExactWithoutSynchronisation) {
  // Asynchronous launches with host work between them and no synchronisation at all.
  for (int64_t tick : {int64_t{0}, 2 * kMs}) {
    Simulation sim;
    ContainerSpec spec = Container(30);
    spec.tick_ns = tick;
    int c = sim.AddContainer(spec);
    WorkloadSpec w;
    w.kernels_ns = {50 * kUs, 50 * kUs, 50 * kUs, 50 * kUs, 2 * kMs};
    w.think_ns = 100 * kUs;
    sim.AddThread(sim.AddProcess(c), w);
    sim.RunUntil(4 * kSec);
    EXPECT_NEAR(100 * sim.ContainerShare(c, 1 * kSec, 4 * kSec), 30, 3) << tick;
  }
}

}  // namespace
}  // namespace vgpu::compute::sim
