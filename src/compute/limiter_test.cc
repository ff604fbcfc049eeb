// ComputeLimiter: the blocking admission loop and the glue between tracker and controller.
#include "compute/limiter.h"

#include <gtest/gtest.h>

#include <vector>

#include "compute/sim_model.h"

namespace vgpu::compute {
namespace {

constexpr int64_t kUs = 1'000;
constexpr int64_t kMs = 1'000'000;
constexpr int64_t kStart = 1'000'000'000'000;

// A clock that only sleeping moves (and the simulated GPU with it), and a sleeper that records
// every sleep.
class FakeTime final : public Clock, public Sleeper {
 public:
  explicit FakeTime(sim::SimGpu* gpu) : gpu_(gpu) {}
  int64_t NowNs() override { return now; }
  void SleepNs(int64_t ns) override {
    sleeps.push_back(ns);
    ASSERT_LT(sleeps.size(), 10'000u) << "endless admission loop";
    now += ns;
    gpu_->AdvanceTo(now - kStart);
  }
  int64_t now = kStart;
  std::vector<int64_t> sleeps;

 private:
  sim::SimGpu* gpu_;
};

struct Rig {
  Rig() : ops(&gpu, gpu.AddContext(), sim::SimOpCosts{0, 0, 0, 0}) {}
  sim::SimGpu gpu;
  sim::SimEventOps ops;
  ComputeShareState state{};
  // Launch by launch (period 0): these tests follow single launches through the loop.
  static ControllerOptions Bursts() {
    ControllerOptions options;
    options.period_ns = 0;
    return options;
  }
  Controller controller{&state, nullptr, nullptr, Bursts(), ComputeLimits::FromPercent(25, 0, 1)};
  BusyTracker tracker{&ops, BusyTrackerOptions()};
  ComputeLimiter limiter{&controller, &tracker};
  FakeTime time{&gpu};
  // The GPU's clock starts at 0; the host clock at kStart.
  void Advance(int64_t ns) {
    time.now += ns;
    gpu.AdvanceTo(time.now - kStart);
  }
  void Launch(int stream, int64_t duration) {
    LaunchTicket ticket = limiter.WaitForAdmission(stream, &time, &time);
    gpu.Launch(stream, time.now - kStart, duration);
    limiter.AfterLaunch(ticket, true, time.now);
  }
};

TEST(ComputeLimiterTest, NoDebtMeansNoSleep) {
  Rig rig;
  int stream = rig.gpu.AddStream(0);
  LaunchTicket ticket = rig.limiter.WaitForAdmission(stream, &rig.time, &rig.time);
  EXPECT_TRUE(rig.time.sleeps.empty());
  EXPECT_EQ(ticket.slot, 0);
}

TEST(ComputeLimiterTest, SleepsOffTheDebtInFewLongSleeps) {
  Rig rig;
  int stream = rig.gpu.AddStream(0);
  rig.controller.AdmitDelayNs(rig.time.now);
  rig.state.vclock_ns.store(rig.time.now + 50 * kMs);  // 50 ms of debt
  rig.limiter.WaitForAdmission(stream, &rig.time, &rig.time);
  ASSERT_FALSE(rig.time.sleeps.empty());
  int64_t total = 0;
  for (int64_t s : rig.time.sleeps) {
    EXPECT_GE(s, 1 * kMs);   // never a spin
    EXPECT_LE(s, 20 * kMs);  // sliced, so that changes (priority) are seen
    total += s;
  }
  EXPECT_LE(rig.time.sleeps.size(), 4u);
  EXPECT_GE(total, 48 * kMs);  // admitted once the debt is within the 2 ms tolerance
  EXPECT_LE(total, 50 * kMs);
  EXPECT_EQ(rig.state.throttled_total_ns.load(), static_cast<uint64_t>(total));
}

TEST(ComputeLimiterTest, LaunchesAreChargedAndCorrectedByWhatRan) {
  Rig rig;
  int stream = rig.gpu.AddStream(0);
  for (int i = 0; i < 10; ++i) {
    rig.Launch(stream, 1 * kMs);
    rig.Advance(100 * kUs);
  }
  rig.limiter.BeforeSynchronize(rig.time.now);  // then the application waits for the GPU
  rig.Advance(10 * kMs);
  rig.limiter.Tick(rig.time.now);
  // 10 ms of work was measured (the first launches spent banked credit, the rest slept).
  EXPECT_NEAR(static_cast<double>(rig.state.busy_total_ns.load()), 10.0 * kMs, 20.0 * kUs);
  EXPECT_FALSE(rig.time.sleeps.empty());
  EXPECT_FALSE(rig.tracker.HasPendingWork());
}

TEST(ComputeLimiterTest, SleepingClosesTheStreamsTails) {
  Rig rig;
  int stream = rig.gpu.AddStream(0);
  for (int i = 0; i < 4; ++i) {  // learn the cost, open the window
    rig.Launch(stream, 100 * kUs);
    rig.Advance(1 * kMs);
  }
  for (int i = 0; i < 3; ++i) {  // back to back: after the third launch K = 2 and a tail is open
    LaunchTicket ticket;
    ASSERT_EQ(rig.limiter.BeforeLaunch(stream, rig.time.now, &ticket), 0);
    rig.gpu.Launch(stream, rig.time.now - kStart, 100 * kUs);
    rig.limiter.AfterLaunch(ticket, true, rig.time.now);
  }
  int64_t marks = rig.tracker.stats().marks;
  rig.state.vclock_ns.store(rig.time.now + 10 * kMs);  // in debt: the next launch must sleep
  LaunchTicket ticket;
  EXPECT_GT(rig.limiter.BeforeLaunch(stream, rig.time.now, &ticket), 0);
  EXPECT_EQ(rig.tracker.stats().marks, marks + 1);  // the tail was marked before the sleep
  EXPECT_GT(rig.limiter.BeforeLaunch(stream, rig.time.now, &ticket), 0);
  EXPECT_EQ(rig.tracker.stats().marks, marks + 1);  // nothing left to close
}

// A holder whose work finished before its claim (the sum of its launches' estimates) ran out
// hands the turn back as soon as it is told to wait: a neighbour waiting for the turn need not
// wait out the estimate, nor the next Tick.
TEST(ComputeLimiterTest, AWaitWithNothingInFlightHandsTheTurnBack) {
  sim::SimGpu gpu;
  sim::SimEventOps ops(&gpu, gpu.AddContext(), sim::SimOpCosts{0, 0, 0, 0});
  ComputeShareState state{};
  GpuTurn turn{};
  Controller controller{&state, nullptr, nullptr, Rig::Bursts(), ComputeLimits::FromPercent(25, 0, 1), &turn};
  BusyTracker tracker{&ops, BusyTrackerOptions()};
  ComputeLimiter limiter{&controller, &tracker};
  FakeTime time{&gpu};
  const int stream = gpu.AddStream(0);
  auto launch = [&](int64_t duration) {
    LaunchTicket ticket = limiter.WaitForAdmission(stream, &time, &time);
    gpu.Launch(stream, time.now - kStart, duration);
    limiter.AfterLaunch(ticket, true, time.now);
  };
  for (int i = 0; i < 6; ++i) {  // learn an estimate of 1 ms per launch
    launch(1 * kMs);
    time.SleepNs(5 * kMs);
    limiter.Tick(time.now);
  }
  launch(100 * kUs);  // claims ~1 ms of the GPU, runs 100 us
  const int64_t claimed = turn.until_ns.load();
  ASSERT_GT(claimed, time.now + 500 * kUs);
  time.SleepNs(600 * kUs);  // the kernel and its mark are done; the claim runs on
  state.vclock_ns.store(time.now + 10 * kMs);  // in debt: the next launch must wait
  LaunchTicket ticket;
  ASSERT_GT(limiter.BeforeLaunch(stream, time.now, &ticket), 0);
  EXPECT_LE(turn.until_ns.load(), time.now);
  EXPECT_LT(turn.until_ns.load(), claimed);
}

}  // namespace
}  // namespace vgpu::compute
