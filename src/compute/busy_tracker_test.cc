// BusyTracker against the simulated GPU with exact timing (no latencies, no costs), so that the
// measured busy time can be compared with the model's ground truth to the nanosecond.
#include "compute/busy_tracker.h"

#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "compute/sim_model.h"

namespace vgpu::compute {
namespace {

using sim::SimEventOps;
using sim::SimGpu;
using sim::SimGpuParams;

constexpr int64_t kUs = 1'000;
constexpr int64_t kMs = 1'000'000;

SimGpuParams ExactGpu() {
  SimGpuParams p;
  p.kernel_overhead_ns = 0;
  p.submit_latency_ns = 0;
  p.event_resolution_ns = 1;
  return p;
}

BusyTrackerOptions ExactOptions() {
  BusyTrackerOptions o;
  o.begin_skew_ns = 0;
  o.mark_gpu_ns = 0;  // ExactGpu's events take no GPU time
  return o;
}

// Failure injection around the simulated ops.
class FaultyOps final : public GpuEventOps {
 public:
  explicit FaultyOps(GpuEventOps* inner) : inner_(inner) {}
  bool Create(EventId* e) override { return !fail_create && inner_->Create(e); }
  void Destroy(EventId e) override {
    ++destroyed;
    inner_->Destroy(e);
  }
  bool Record(EventId e, StreamKey s) override {
    if (fail_record) return false;
    last_recorded = e;
    return inner_->Record(e, s);
  }
  EventState Query(EventId e) override {
    ++queries;
    return broken.count(e) ? EventState::kError : inner_->Query(e);
  }
  EventState QueryAgainst(EventId reference, EventId e, float* elapsed_ms) override {
    ++queries_against;
    if (!broken.count(e)) return inner_->QueryAgainst(reference, e, elapsed_ms);
    *elapsed_ms = std::numeric_limits<float>::quiet_NaN();
    return EventState::kError;
  }
  bool ElapsedMs(EventId a, EventId b, float* ms) override {
    ++elapsed;
    return inner_->ElapsedMs(a, b, ms);
  }

  bool fail_create = false;
  bool fail_record = false;
  std::set<EventId> broken;
  EventId last_recorded = 0;
  int destroyed = 0;
  int queries = 0;          // Query calls
  int queries_against = 0;  // QueryAgainst calls
  int elapsed = 0;          // ElapsedMs calls

 private:
  GpuEventOps* inner_;
};

// One context, two streams, a tracker, and a clock the test moves.
class Rig {
 public:
  explicit Rig(const BusyTrackerOptions& options = ExactOptions(), const SimGpuParams& gpu = ExactGpu(),
               BusyRing* ring = nullptr)
      : gpu_(gpu),
        ctx_(gpu_.AddContext()),
        s0(gpu_.AddStream(ctx_)),
        s1(gpu_.AddStream(ctx_)),
        sim_ops_(&gpu_, ctx_, sim::SimOpCosts{0, 0, 0, 0}),
        ops(&sim_ops_),
        tracker(&ops, options, ring) {}

  // Returns false when the tracker asked to wait instead.
  bool TryLaunch(int stream, int64_t duration, bool graph = false) {
    LaunchTicket ticket;
    if (tracker.BeforeLaunch(stream, now, &ticket) != 0) return false;
    ticket.starts_after_return = !graph;
    if (call_ns > 0) Advance(call_ns);  // the launch reaches the GPU's queue as its call returns
    if (graph) {
      gpu_.LaunchGraph(stream, now, std::vector<int64_t>(10, duration / 10));
    } else {
      gpu_.Launch(stream, now, duration);
    }
    last_estimate = tracker.AfterLaunch(ticket, true, now, &result);
    return true;
  }
  // Launches, first waiting (and polling) as long as the tracker asks; counts the waits.
  bool Launch(int stream, int64_t duration, bool graph = false) {
    for (int i = 0; i < 1000; ++i) {
      if (TryLaunch(stream, duration, graph)) return true;
      ++waits;
      Advance(options_probe_wait);
      Measured();
    }
    return false;
  }
  void Advance(int64_t dt) {
    now += dt;
    gpu_.AdvanceTo(now);
  }
  // `n` launches of `duration`, one every `every` (the stream runs dry in between), each followed
  // by a poll.
  void LaunchEvery(int stream, int64_t duration, int64_t every, int n) {
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(Launch(stream, duration));
      Advance(every);
      Measured();
    }
  }
  int64_t Measured() {
    result.Add(tracker.Poll(now));
    return result.busy_ns;
  }
  int64_t Truth() const { return gpu_.ContextBusyNs(ctx_, 0, now + kMs); }
  SimGpu& gpu() { return gpu_; }

 private:
  SimGpu gpu_;
  int ctx_;

 public:
  int s0;
  int s1;

 private:
  SimEventOps sim_ops_;

 public:
  FaultyOps ops;
  BusyTracker tracker;
  int64_t now = 0;
  int64_t last_estimate = 0;
  int waits = 0;
  int64_t options_probe_wait = BusyTrackerOptions().probe_wait_ns;
  int64_t call_ns = 0;  // how long a launch call takes (0: none)
  PollResult result;
};

TEST(BusyTrackerTest, OneKernelOnAnIdleStreamIsItsDuration) {
  Rig rig;
  ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));
  rig.Advance(5 * kMs);
  EXPECT_EQ(rig.Measured(), 1 * kMs);
  EXPECT_EQ(rig.tracker.stats().begins, 1);
}

// A stream that runs dry before every launch has its last mark asked about at every launch, and
// finds it complete: on the driver a query's first look at a completed event costs 13 times its
// look at a pending one, so once an event has been processed (the anchor, complete) the tracker
// asks against it (cuEventElapsedTime_v2) and measures the same. That answer carries the event's
// time against the anchor: here every poll asks about each begin and mark in turn, so none is
// asked for its time again (39 were before: every event but the first, the anchor).
TEST(BusyTrackerTest, CompletionIsAskedAgainstTheAnchorOnceThereIsOne) {
  Rig rig;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));
    rig.Advance(4 * kMs);
    rig.Measured();
  }
  EXPECT_EQ(rig.Measured(), 20 * kMs);
  EXPECT_EQ(rig.tracker.stats().begins, 20);
  EXPECT_EQ(rig.tracker.stats().marks, 40);
  EXPECT_LE(rig.ops.queries, 1);  // the first idle check, before any event was processed
  EXPECT_GE(rig.ops.queries_against, 19 * 2);  // the other idle checks and the polls
  EXPECT_EQ(rig.ops.elapsed, 0);
}

// 200 launches of 10 us onto a stream that runs dry between them (one every 50 us), a poll every
// 250 us, then 1 ms for the last to complete.
void LaunchDryAndPoll(Rig& rig) {
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(rig.Launch(rig.s0, 10 * kUs));
    rig.Advance(50 * kUs);
    if (i % 5 == 4) rig.Measured();
  }
  rig.Advance(1 * kMs);
}

// Marks known complete through a later one are not asked about, so they are asked for their
// time; and a time read by a query against an anchor that has been replaced since (here every
// 100 us) is not used: the launch's idle check reads the last mark's time, and the poll after it
// processes earlier marks first, which move the anchor on.
TEST(BusyTrackerTest, ATimeReadAgainstAReplacedAnchorIsAskedAgain) {
  BusyTrackerOptions options = ExactOptions();
  options.rebase_after_ns = 100 * kUs;
  Rig rig(options);
  LaunchDryAndPoll(rig);
  EXPECT_EQ(rig.Measured(), 200 * 10 * kUs);
  EXPECT_EQ(rig.Measured(), rig.Truth());
  EXPECT_GT(rig.ops.elapsed, 0);
  EXPECT_LT(rig.ops.elapsed, 2 * 200);
}

TEST(BusyTrackerTest, IdleGapsBetweenLaunchesAreNotCounted) {
  Rig rig;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));
    rig.Advance(4 * kMs);  // the stream runs dry for 3 ms
  }
  EXPECT_EQ(rig.Measured(), 5 * kMs);
  EXPECT_EQ(rig.Truth(), 5 * kMs);
  EXPECT_EQ(rig.tracker.stats().begins, 5);
}

// Light measurement: a stream that runs dry before every launch gets begins and marks at every
// launch only in the windows measured exactly (one launch in light_window_every starts one of
// light_window_launches launches); the others are charged the windows' estimate, which for
// launches of one cost is their cost. Off again, every idle start is bracketed.
TEST(BusyTrackerTest, LightMeasurementMeasuresWindowsOfAStreamThatRunsDry) {
  Rig rig;
  rig.LaunchEvery(rig.s0, 100 * kUs, 300 * kUs, 20);  // learn the cost, open the queue's window
  const TrackerStats before = rig.tracker.stats();
  const int64_t measured_before = rig.Measured();
  rig.tracker.SetLight(true, rig.now);
  constexpr int kLaunches = 800;
  rig.LaunchEvery(rig.s0, 100 * kUs, 300 * kUs, kLaunches);
  rig.tracker.Flush(rig.now);
  rig.Advance(1 * kMs);
  const TrackerStats light = rig.tracker.stats();
  const int64_t begins = light.begins - before.begins;
  const int64_t marks = light.marks - before.marks;
  // Idle starts are seen about every light_mark_interval launches (the tail is open in between);
  // begins come only in the exact windows (800 / 256 x 8 launches, about 25).
  EXPECT_GE(begins, 2);
  EXPECT_LT(begins, kLaunches / 16);
  EXPECT_LT(marks, kLaunches / 4);
  EXPECT_GT(light.light_launches - before.light_launches, kLaunches / 16);
  // The estimate is the launches' cost: what is charged is what ran, within a few launches.
  EXPECT_NEAR(static_cast<double>(rig.Measured() - measured_before), kLaunches * 100.0 * kUs, 400.0 * kUs);

  rig.tracker.SetLight(false, rig.now);
  const TrackerStats exact = rig.tracker.stats();
  rig.LaunchEvery(rig.s0, 100 * kUs, 300 * kUs, 10);
  // The first launches may still join the open light tail (until a query finds its stream run
  // dry and the marks turn dense again); the others start idle with a begin.
  EXPECT_GE(rig.tracker.stats().begins - exact.begins, 7);
}

// Under light measurement a tail begins without a look for idle starts inside it, and is charged
// its launches' estimates where it may hold gaps. Here launches every 30 us alternate a 40 us
// kernel (still running at the next launch) with a 5 us one (done long before it): the samples
// come in that order (the 40 us one bracketed on its idle stream, the 5 us one behind it), and
// what the tails are charged must not depend on where they fall between the samples.
TEST(BusyTrackerTest, LightTailsOnAStreamThatRunsDryAreChargedWhatRan) {
  Rig rig;
  auto launch_pairs = [&](int pairs) {
    for (int i = 0; i < pairs; ++i) {
      for (int64_t duration : {40 * kUs, 5 * kUs}) {
        ASSERT_TRUE(rig.Launch(rig.s0, duration));
        rig.Advance(30 * kUs);
        rig.Measured();
      }
    }
  };
  launch_pairs(200);  // exactly measured: learn the cost, open the queue's window
  const int64_t measured_before = rig.Measured();
  const int64_t truth_before = rig.Truth();
  rig.tracker.SetLight(true, rig.now);
  launch_pairs(2000);
  rig.tracker.SetLight(false, rig.now);
  rig.tracker.Flush(rig.now);
  rig.Advance(1 * kMs);
  const double measured = static_cast<double>(rig.Measured() - measured_before);
  const double truth = static_cast<double>(rig.Truth() - truth_before);
  EXPECT_GT(rig.tracker.stats().light_launches, 100);
  EXPECT_NEAR(measured / truth, 1.0, 0.03) << measured << " ns charged for " << truth << " ns of kernels";
}

// A window measured exactly under light measurement marks densely; it ends when light
// measurement does, or a deep queue measured exactly afterwards would keep a mark per launch.
TEST(BusyTrackerTest, AnExactWindowEndsWithLightMeasurement) {
  BusyTrackerOptions options = ExactOptions();
  options.light_window_every = 1;  // the first light launch starts a window ...
  options.light_window_launches = 1000;  // ... longer than the light spell
  Rig rig(options);
  rig.LaunchEvery(rig.s0, 100 * kUs, 300 * kUs, 20);  // learn the cost, open the queue's window
  rig.tracker.SetLight(true, rig.now);
  rig.LaunchEvery(rig.s0, 100 * kUs, 300 * kUs, 5);
  rig.tracker.SetLight(false, rig.now);
  const int64_t marks = rig.tracker.stats().marks;
  constexpr int kLaunches = 400;
  for (int i = 0; i < kLaunches; ++i) {  // launched faster than they run: the queue is deep
    ASSERT_TRUE(rig.Launch(rig.s0, 100 * kUs));
    rig.Advance(10 * kUs);
    rig.Measured();
  }
  EXPECT_LT(rig.tracker.stats().marks - marks, kLaunches / 4);
}

// A window measured exactly on a stream whose queue is deep keeps its marks sparse: its intervals
// hold no gap whatever their length, and a mark per launch only costs the kernels GPU time (~2 us
// each on an H200). With a window in every 16 launches, dense windows (K = 1 for 8 launches, then
// the ramp back) took 1,268 marks here.
TEST(BusyTrackerTest, AnExactWindowOnADeepQueueKeepsItsMarksSparse) {
  BusyTrackerOptions options = ExactOptions();
  options.light_window_every = 16;
  Rig rig(options);
  rig.tracker.SetLight(true, rig.now);
  constexpr int kLaunches = 4000;
  for (int i = 0; i < kLaunches; ++i) {  // launched faster than they run: the queue is deep
    ASSERT_TRUE(rig.Launch(rig.s0, 5 * kUs));
    rig.Advance(2 * kUs);
    rig.Measured();
  }
  rig.Advance(100 * kMs);
  rig.tracker.Flush(rig.now);
  rig.Advance(1 * kMs);
  EXPECT_LT(rig.tracker.stats().marks, kLaunches / 8);
  EXPECT_NEAR(static_cast<double>(rig.Measured()), static_cast<double>(rig.Truth()), 0.01 * rig.Truth());
}

// Under light measurement a tail charged its estimates is not marked before a wait: that mark
// would only make the wait longer (its trip to the GPU). Exactly measured tails still are.
TEST(BusyTrackerTest, LightTailsAreNotMarkedBeforeAWait) {
  BusyTrackerOptions options = ExactOptions();
  options.light_window_every = 0;  // no exact windows
  Rig rig(options);
  rig.LaunchEvery(rig.s0, 100 * kUs, 300 * kUs, 20);  // learn the cost, open the queue's window
  rig.tracker.SetLight(true, rig.now);
  ASSERT_TRUE(rig.Launch(rig.s0, 100 * kUs));  // onto an idle stream: no begin, the tail stays open
  const int64_t marks = rig.tracker.stats().marks;
  const StreamKey s0 = static_cast<StreamKey>(rig.s0);
  rig.tracker.FlushBeforeWait(rig.now, &s0);
  rig.tracker.Flush(rig.now);
  EXPECT_EQ(rig.tracker.stats().marks, marks);
  rig.tracker.SetLight(false, rig.now);
  rig.tracker.FlushBeforeWait(rig.now, &s0);
  EXPECT_EQ(rig.tracker.stats().marks, marks + 1);
}

// Light measurement only while the process launches on one stream alone (concurrent streams'
// estimates would each count the time they share), and not for light_hold_ns after EndLight.
TEST(BusyTrackerTest, LightMeasurementNeedsOneStreamAloneAndNoRecentWait) {
  Rig rig;
  rig.LaunchEvery(rig.s0, 100 * kUs, 300 * kUs, 20);  // learn the cost, open the queue's window
  rig.tracker.SetLight(true, rig.now);
  ASSERT_TRUE(rig.tracker.light());
  for (int i = 0; i < 100; ++i) {  // two streams, each idle at its launches
    ASSERT_TRUE(rig.Launch(i % 2 == 0 ? rig.s0 : rig.s1, 100 * kUs));
    rig.Advance(300 * kUs);
    rig.Measured();
  }
  // a second stream is seen once it launched: the first launch on each went lightly, and the
  // others onto dry streams count as measured exactly for want of a stream alone
  EXPECT_LE(rig.tracker.stats().light_launches, 2);
  EXPECT_GE(rig.tracker.stats().light_not_alone, 90);
  EXPECT_EQ(rig.tracker.stats().light_held, 0);
  const int64_t before_alone = rig.tracker.stats().light_launches;
  rig.Advance(BusyTrackerOptions().light_alone_ns);
  rig.LaunchEvery(rig.s0, 100 * kUs, 300 * kUs, 100);  // one stream alone again
  EXPECT_GT(rig.tracker.stats().light_launches, before_alone);

  rig.tracker.EndLight(rig.now);
  EXPECT_FALSE(rig.tracker.light());
  rig.tracker.SetLight(true, rig.now + BusyTrackerOptions().light_hold_ns / 2);
  EXPECT_FALSE(rig.tracker.light());
  const int64_t not_alone = rig.tracker.stats().light_not_alone;
  rig.LaunchEvery(rig.s0, 100 * kUs, 300 * kUs, 10);  // held after the wait: measured exactly
  EXPECT_EQ(rig.tracker.stats().light_held, 10);
  EXPECT_EQ(rig.tracker.stats().light_not_alone, not_alone);
  rig.tracker.SetLight(false, rig.now);  // not asked for: not counted as held
  rig.LaunchEvery(rig.s0, 100 * kUs, 300 * kUs, 10);
  EXPECT_EQ(rig.tracker.stats().light_held, 10);
  rig.tracker.SetLight(true, rig.now + BusyTrackerOptions().light_hold_ns);
  EXPECT_TRUE(rig.tracker.light());
}

TEST(BusyTrackerTest, DeepQueueIsMeasuredWithFewMarks) {
  Rig rig;
  for (int i = 0; i < 400; ++i) {
    ASSERT_TRUE(rig.Launch(rig.s0, 50 * kUs));
    rig.Advance(5 * kUs);  // launches every 5 us, kernels take 50: the queue grows
  }
  rig.tracker.Flush(rig.now);
  rig.Advance(30 * kMs);
  EXPECT_EQ(rig.Truth(), 20 * kMs);
  EXPECT_NEAR(rig.Measured(), rig.Truth(), 1 * kUs);
  TrackerStats stats = rig.tracker.stats();
  EXPECT_LT(stats.marks * 5, stats.launches);  // K grew well above 1
  EXPECT_LE(stats.begins, 4);  // the first launch, and a few while the window opened
}

TEST(BusyTrackerTest, ConcurrentStreamsCountTheUnionNotTheSum) {
  Rig rig;
  ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));
  ASSERT_TRUE(rig.Launch(rig.s1, 1 * kMs));
  rig.Advance(3 * kMs);
  EXPECT_EQ(rig.Measured(), 1 * kMs);
  // Staggered: [0.5, 1.5) on s0 and [1, 2) on s1 (relative to now) -> 1.5 ms.
  rig.Advance(500 * kUs);
  ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));
  rig.Advance(500 * kUs);
  ASSERT_TRUE(rig.Launch(rig.s1, 1 * kMs));
  rig.Advance(5 * kMs);
  EXPECT_EQ(rig.Measured(), 2500 * kUs);
  EXPECT_EQ(rig.Measured(), rig.Truth());
}

// How many launches overlap: the intervals' lengths over what they added to the union.
TEST(BusyTrackerTest, OverlapIsTheIntervalsLengthOverTheirUnion) {
  Rig rig;
  EXPECT_EQ(rig.tracker.Overlap(), 1.0);  // nothing measured yet
  for (int i = 0; i < 20; ++i) {  // one stream: nothing overlaps
    ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));
    rig.Advance(2 * kMs);
    rig.Measured();
  }
  EXPECT_DOUBLE_EQ(rig.tracker.Overlap(), 1.0);
  for (int i = 0; i < 200; ++i) {  // two streams side by side: 2 ms of intervals per ms of union
    ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));
    ASSERT_TRUE(rig.Launch(rig.s1, 1 * kMs));
    rig.Advance(2 * kMs);
    rig.Measured();
  }
  EXPECT_NEAR(rig.tracker.Overlap(), 2.0, 0.05);
}

TEST(BusyTrackerTest, LaunchSpanIsTheLongestLaunchOfConcurrentStreams) {
  Rig rig;
  const int64_t window = BusyTrackerOptions().span_window_ns;
  rig.Advance(10 * window);  // a real clock is far from 0
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(rig.Launch(rig.s0, 5 * kMs));
    rig.Advance(6 * kMs);
    rig.Measured();
  }
  EXPECT_EQ(rig.tracker.LaunchSpanNs(rig.now), 0);  // one stream: runs lose nothing at their ends
  ASSERT_TRUE(rig.Launch(rig.s0, 5 * kMs));
  ASSERT_TRUE(rig.Launch(rig.s1, 2 * kMs));
  rig.Advance(6 * kMs);
  rig.Measured();
  EXPECT_EQ(rig.tracker.LaunchSpanNs(rig.now), 5 * kMs);
  // Remembered for one to two windows, then forgotten.
  EXPECT_EQ(rig.tracker.LaunchSpanNs(rig.now + window + kMs), 5 * kMs);
  EXPECT_EQ(rig.tracker.LaunchSpanNs(rig.now + 2 * window + kMs), 0);
}

// A stream with 10 ms of kernels queued: polls every 100 us do not ask about its marks before
// they may be complete (half the queue's drain time ahead of them), then at most every eighth of
// their age; every mark is still measured, and within 2 ms of its completion.
// Polls every 100 us of a queue of 10 ms of kernels, with and without due times: the queries
// they make, and when the last mark is measured. Returns {queries, delay after completion}.
std::pair<int64_t, int64_t> PollAQueue(const BusyTrackerOptions& options) {
  Rig rig(options);
  for (int i = 0; i < 30; ++i) {  // learn the stream's drain rate (and grow its window)
    EXPECT_TRUE(rig.Launch(rig.s0, 1 * kMs));
    rig.Advance(1 * kMs);
    rig.Measured();
  }
  rig.Advance(10 * kMs);
  const int64_t busy_before = rig.Measured();
  const int64_t polls_before = rig.tracker.stats().poll_queries;
  const int64_t start = rig.now;
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(rig.Launch(rig.s0, 1 * kMs));
  rig.tracker.Flush(rig.now);
  int64_t measured_at = 0;
  for (int i = 0; i < 200 && measured_at == 0; ++i) {  // 20 ms of polls
    rig.Advance(100 * kUs);
    if (rig.Measured() - busy_before == 10 * kMs) measured_at = rig.now;
  }
  EXPECT_GT(measured_at, 0);
  EXPECT_EQ(rig.Measured(), rig.Truth());
  return {rig.tracker.stats().poll_queries - polls_before, measured_at - (start + 10 * kMs)};
}

// A mark is asked about once it may be complete (half the drain time of the launches ahead of
// it), then at most every eighth of its age: every mark is still measured, within 2 ms of its
// completion, for a fraction of the queries.
TEST(BusyTrackerTest, PollsAskAboutAMarkOnlyOnceItMayBeComplete) {
  BusyTrackerOptions every_poll = ExactOptions();
  every_poll.poll_delay_fraction = 0;
  every_poll.max_poll_delay_ns = 0;
  const auto [queries_every_poll, delay_every_poll] = PollAQueue(every_poll);
  const auto [queries, delay] = PollAQueue(ExactOptions());
  EXPECT_LE(delay_every_poll, 100 * kUs);
  EXPECT_LE(delay, 2 * kMs);
  EXPECT_GE(queries_every_poll, 80);
  EXPECT_LE(queries, queries_every_poll / 3);
}

TEST(BusyTrackerTest, LongIntervalOnOneStreamFillsGapsOfAnother) {
  Rig rig;
  ASSERT_TRUE(rig.Launch(rig.s0, 10 * kMs));  // one long kernel
  for (int i = 0; i < 5; ++i) {                // short bursts on s1, polled while s0 still runs
    ASSERT_TRUE(rig.Launch(rig.s1, 100 * kUs));
    rig.Advance(1 * kMs);
    rig.Measured();
  }
  rig.Advance(20 * kMs);
  EXPECT_EQ(rig.Measured(), 10 * kMs);
}

TEST(BusyTrackerTest, GraphLaunchCountsItsWholeSpan) {
  Rig rig;
  ASSERT_TRUE(rig.Launch(rig.s0, 2 * kMs, /*graph=*/true));
  rig.Advance(10 * kMs);
  EXPECT_EQ(rig.Measured(), 2 * kMs);
  EXPECT_EQ(rig.tracker.stats().launches, 1);
}

// K > 1: a gap inside an unmarked tail is invisible unless the tail is flushed before the
// stream runs dry. Demonstrates both sides, so that Flush() is known to matter.
TEST(BusyTrackerTest, FlushBeforeGoingIdleKeepsTheGapOut) {
  for (bool flush : {false, true}) {
    Rig rig;
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < 70; ++i) ASSERT_TRUE(rig.Launch(rig.s0, 100 * kUs));  // deep burst
      if (flush) rig.tracker.Flush(rig.now);
      rig.Advance(50 * kMs);  // 7 ms of work, then idle
      rig.Measured();
    }
    ASSERT_TRUE(rig.Launch(rig.s0, 100 * kUs));
    rig.tracker.Flush(rig.now);
    rig.Advance(50 * kMs);
    if (flush) {
      EXPECT_NEAR(rig.Measured(), rig.Truth(), 1 * kUs);  // float ms from cuEventElapsedTime
    } else {
      EXPECT_GT(rig.Measured(), rig.Truth() + 10 * kMs);
    }
  }
}

// Tick closes a tail tick_flush_age_ns after its last launch when nothing was launched after
// it; a tail that another stream launched behind (its mark would land behind that launch) only
// once its queue may be about to run dry: its drain time less tick_flush_margin_ns. The mark
// still comes before the stream runs dry, so the busy time stays exact.
TEST(BusyTrackerTest, TickClosesATailBehindOtherLaunchesOnlyWhenItMayRunDry) {
  for (bool other_launch : {false, true}) {
    SCOPED_TRACE(other_launch ? "another stream launched after the tail" : "the tail launched last");
    Rig rig;
    for (int round = 0; round < 4; ++round) {  // the stream's drain rate: 100 us per launch
      for (int i = 0; i < 37; ++i) ASSERT_TRUE(rig.Launch(rig.s0, 100 * kUs));
      rig.tracker.Flush(rig.now);
      rig.Advance(10 * kMs);
      rig.Measured();
    }
    for (int i = 0; i < 37; ++i) ASSERT_TRUE(rig.Launch(rig.s0, 100 * kUs));  // 3.7 ms queued
    const int64_t last_launch = rig.now;
    if (other_launch) {
      ASSERT_TRUE(rig.Launch(rig.s1, 100 * kUs));  // marked at once (idle stream)
    }
    const int64_t marks = rig.tracker.stats().marks;
    rig.Advance(BusyTrackerOptions().tick_flush_age_ns + 100 * kUs);
    rig.result.Add(rig.tracker.Tick(rig.now));
    if (other_launch) {
      EXPECT_EQ(rig.tracker.stats().marks, marks);  // left open
      rig.Advance(last_launch + 3 * kMs - rig.now);  // 0.7 ms of work left, less than the margin
      rig.result.Add(rig.tracker.Tick(rig.now));
    }
    EXPECT_EQ(rig.tracker.stats().marks, marks + 1);
    rig.Advance(20 * kMs);
    EXPECT_NEAR(rig.Measured(), rig.Truth(), 1 * kUs);
    EXPECT_EQ(rig.Truth(), 5 * 37 * 100 * kUs);
  }
}

// Before the host waits for one stream (or an event of an unknown stream), only the tails that
// may run dry and whose marks land right behind their own launches are closed: the stream waited
// for and the stream launched last. A tail that another stream launched behind stays open until
// Tick() finds that its queue may be about to run dry; the busy time stays exact.
TEST(BusyTrackerTest, FlushBeforeWaitMarksTheWaitedForAndTheLastLaunchedTailsOnly) {
  for (bool name_s0 : {false, true}) {
    SCOPED_TRACE(name_s0 ? "waiting for s0 (launched first)" : "waiting for an event");
    Rig rig;
    for (int round = 0; round < 5; ++round) {  // deep queues, marked sparsely; drain rates learned
      for (int s : {rig.s0, rig.s1}) {
        for (int i = 0; i < 37; ++i) ASSERT_TRUE(rig.Launch(s, 100 * kUs));
      }
      if (round == 4) break;
      rig.tracker.Flush(rig.now);
      rig.Advance(10 * kMs);
      rig.Measured();
    }
    const int64_t marks = rig.tracker.stats().marks;
    const StreamKey s0 = rig.s0;
    ASSERT_LT(100 * kUs * 2, BusyTrackerOptions().cheap_mark_launch_ns);  // s0's launches are short
    rig.tracker.FlushBeforeWait(rig.now, name_s0 ? &s0 : nullptr);
    EXPECT_EQ(rig.tracker.stats().marks, marks + (name_s0 ? 2 : 1));
    for (int i = 0; i < 20; ++i) {  // the wait: a monitor thread ticks
      rig.Advance(1 * kMs);
      rig.result.Add(rig.tracker.Tick(rig.now));
    }
    EXPECT_EQ(rig.tracker.stats().marks, marks + 2);
    EXPECT_NEAR(rig.Measured(), rig.Truth(), 1 * kUs);
  }
}

// A stream of long launches has its tail closed before any wait, launched last or not: a mark
// costs nothing beside its launches. (With the rule off, the same tail stays open.)
TEST(BusyTrackerTest, FlushBeforeWaitClosesTheTailsOfLongLaunches) {
  for (bool rule : {false, true}) {
    SCOPED_TRACE(rule ? "default" : "rule off");
    BusyTrackerOptions options = ExactOptions();
    if (!rule) options.cheap_mark_launch_ns = std::numeric_limits<int64_t>::max();
    Rig rig(options);
    for (int round = 0; round < 6; ++round) {  // s0: 2 ms launches, two at a time, kept queued
      for (int i = 0; i < 2; ++i) ASSERT_TRUE(rig.Launch(rig.s0, 2 * kMs));
      ASSERT_TRUE(rig.Launch(rig.s1, 100 * kUs));  // launched last
      rig.tracker.FlushBeforeWait(rig.now, nullptr);
      rig.Advance(3 * kMs);
      rig.Measured();
    }
    const int64_t marks = rig.tracker.stats().marks;
    rig.tracker.Flush(rig.now);  // what FlushBeforeWait left open
    EXPECT_EQ(rig.tracker.stats().marks - marks, rule ? 0 : 1);
    rig.Advance(30 * kMs);
    EXPECT_NEAR(rig.Measured(), rig.Truth(), 1 * kUs);
  }
}

TEST(BusyTrackerTest, EstimatesFollowTheMeasuredCostPerLaunch) {
  Rig rig;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(rig.Launch(rig.s0, 200 * kUs));
    rig.Advance(1 * kMs);
    rig.Measured();
  }
  EXPECT_NEAR(rig.last_estimate, 200 * kUs, 1 * kUs);
  // Everything estimated at submission was reported back against measured busy time.
  EXPECT_NEAR(rig.result.busy_ns, 20 * 200 * kUs, 1 * kUs);
  EXPECT_GT(rig.result.estimated_ns, 18 * 200 * kUs);
  EXPECT_EQ(rig.result.unmeasured_ns, 0);
}

// A server's stream: decode steps replayed from graphs of milliseconds between bursts of eager
// kernels of microseconds. Each kind is charged its own cost at submission, not the stream's mix.
TEST(BusyTrackerTest, GraphsAndKernelsOnOneStreamAreEstimatedApart) {
  Rig rig;
  rig.LaunchEvery(rig.s0, 20 * kUs, 100 * kUs, 10);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(rig.Launch(rig.s0, 5 * kMs, /*graph=*/true));
    rig.Advance(6 * kMs);
    rig.Measured();
  }
  EXPECT_NEAR(rig.last_estimate, 5 * kMs, 10 * kUs);
  ASSERT_TRUE(rig.Launch(rig.s0, 20 * kUs));
  EXPECT_NEAR(rig.last_estimate, 20 * kUs, 1 * kUs) << "the kernels' cost, not the graphs'";
  rig.Advance(100 * kUs);
  ASSERT_TRUE(rig.Launch(rig.s0, 5 * kMs, /*graph=*/true));
  EXPECT_NEAR(rig.last_estimate, 5 * kMs, 10 * kUs);
  rig.Advance(6 * kMs);
  EXPECT_EQ(rig.Measured(), rig.Truth());
}

TEST(BusyTrackerTest, NewStreamWithUnknownCostIsProbedBeforeFillingTheQueue) {
  BusyTrackerOptions options = ExactOptions();
  options.probe_launches = 3;
  Rig rig(options);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(rig.TryLaunch(rig.s0, 1 * kMs));
  EXPECT_FALSE(rig.TryLaunch(rig.s0, 1 * kMs));  // cost unknown, 3 launches unmeasured: wait
  EXPECT_EQ(rig.tracker.stats().queue_waits_window, 1);
  rig.Advance(4 * kMs);
  rig.Measured();
  EXPECT_TRUE(rig.TryLaunch(rig.s0, 1 * kMs));  // measured now
}

TEST(BusyTrackerTest, TooOldUnfinishedWorkMakesLaunchesWait) {
  BusyTrackerOptions options = ExactOptions();
  options.max_inflight_age_ns = 10 * kMs;
  Rig rig(options);
  ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));
  rig.Advance(2 * kMs);
  rig.Measured();
  ASSERT_TRUE(rig.Launch(rig.s0, 100 * kMs));  // a very long kernel
  rig.Advance(20 * kMs);
  EXPECT_FALSE(rig.TryLaunch(rig.s0, 1 * kMs));
  EXPECT_EQ(rig.tracker.stats().queue_waits_age, 1);
  rig.Advance(100 * kMs);
  rig.Measured();
  EXPECT_TRUE(rig.TryLaunch(rig.s0, 1 * kMs));
}

TEST(BusyTrackerTest, QueuedWorkIsBoundedByItsEstimate) {
  BusyTrackerOptions options = ExactOptions();
  options.max_inflight_work_ns = 10 * kMs;
  Rig rig(options);
  for (int i = 0; i < 20; ++i) {  // learn the cost (1 ms per launch); the window opens to 24
    ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));
    rig.Advance(2 * kMs);
    rig.Measured();
  }
  int admitted = 0;
  while (rig.TryLaunch(rig.s0, 1 * kMs) && admitted < 100) ++admitted;  // no time passes
  EXPECT_EQ(admitted, 11);  // 10 ms queued, then the stream must wait
  const TrackerStats stats = rig.tracker.stats();
  EXPECT_EQ(stats.queue_waits_work, 1);
  EXPECT_EQ(stats.queue_waits, stats.queue_waits_window + stats.queue_waits_work + stats.queue_waits_age);
  rig.Advance(5 * kMs);
  rig.Measured();
  EXPECT_TRUE(rig.TryLaunch(rig.s0, 1 * kMs));
}

// Given somewhere to put what it polls, a launch that finds its queue full polls first: launches
// that completed no longer count, and it waits only if the queue is still full.
TEST(BusyTrackerTest, AFullQueueIsPolledBeforeTheLaunchWaits) {
  for (bool poll : {false, true}) {
    SCOPED_TRACE(poll ? "polled" : "not polled");
    BusyTrackerOptions options = ExactOptions();
    options.max_inflight_work_ns = 10 * kMs;
    Rig rig(options);
    for (int i = 0; i < 20; ++i) {  // learn the cost: 1 ms per launch
      ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));
      rig.Advance(2 * kMs);
      rig.Measured();
    }
    for (int i = 0; i < 11; ++i) ASSERT_TRUE(rig.TryLaunch(rig.s0, 1 * kMs));  // 11 ms queued: full
    rig.Advance(12 * kMs);  // all done, nothing polled yet
    LaunchTicket ticket;
    PollResult polled;
    const int64_t wait = rig.tracker.BeforeLaunch(rig.s0, rig.now, &ticket, poll ? &polled : nullptr);
    if (poll) {
      EXPECT_EQ(wait, 0);
      EXPECT_GT(polled.intervals, 0);  // the queued launches, measured now
      EXPECT_EQ(rig.tracker.stats().queue_waits, 0);
    } else {
      EXPECT_GT(wait, 0);
      EXPECT_EQ(rig.tracker.stats().queue_waits_work, 1);
    }
  }
}

// A first burst of launches whose cost is unknown, or much larger than estimated, must not fill
// the GPU queue: the window of unfinished launches opens only as launches complete.
TEST(BusyTrackerTest, SlowStartBoundsABurstOfMisestimatedWork) {
  Rig rig;
  for (int i = 0; i < 8; ++i) {  // cheap launches: the estimate says 10 us
    ASSERT_TRUE(rig.Launch(rig.s0, 10 * kUs));
    rig.Advance(20 * kUs);
    rig.Measured();
  }
  int admitted = 0;  // now 20 ms kernels, submitted as fast as possible
  while (rig.TryLaunch(rig.s0, 20 * kMs) && admitted < 1000) ++admitted;
  EXPECT_LE(admitted, 10);  // the window: 2 + 8 completed launches
  rig.Advance(100 * kMs);
  rig.Measured();
  admitted = 0;
  while (rig.TryLaunch(rig.s0, 20 * kMs) && admitted < 1000) ++admitted;
  EXPECT_LE(admitted, 2);  // the drain rate (20 ms per launch now) bounds the queue to ~20 ms
}

// The queued-work bound counts how fast the stream's queue drains, as a ratio of sums: one
// launch that waited 10 ms behind another stream's work in their shared hardware queue does not
// make the queue's every launch cost 10 ms (a maximum of single intervals did: one host thread
// feeding 16 streams then waited for its queues 16% of its time on an H200).
TEST(BusyTrackerTest, OneLongIntervalDoesNotCloseTheQueue) {
  SimGpuParams gpu = ExactGpu();
  gpu.hardware_queues = 1;  // s0 and s1 share one: false dependencies
  Rig rig(ExactOptions(), gpu);
  for (int i = 0; i < 40; ++i) {  // s1's launches cost 100 us
    ASSERT_TRUE(rig.Launch(rig.s1, 100 * kUs));
    rig.Advance(200 * kUs);
    rig.Measured();
  }
  // s1 starts idle (its begin runs at once), but its launch queues behind s0's second kernel,
  // which waits for s0's first one: 10.1 ms for one launch of 100 us.
  LaunchTicket ticket;
  ASSERT_EQ(rig.tracker.BeforeLaunch(rig.s1, rig.now, &ticket), 0);
  rig.gpu().Launch(rig.s0, rig.now, 10 * kMs);
  rig.gpu().Launch(rig.s0, rig.now, 100 * kUs);
  rig.gpu().Launch(rig.s1, rig.now, 100 * kUs);
  rig.tracker.AfterLaunch(ticket, true, rig.now, &rig.result);
  rig.Advance(12 * kMs);
  rig.Measured();
  int admitted = 0;
  while (rig.TryLaunch(rig.s1, 100 * kUs) && admitted < 1000) ++admitted;  // no time passes
  EXPECT_GE(admitted, 20);  // 20 ms at ~0.6 ms per launch, not at 10.1 ms
  EXPECT_LE(admitted, 200);  // still bounded (20 ms at 100 us)
}

TEST(BusyTrackerTest, FailedLaunchLeavesNoIdleTimeBehind) {
  Rig rig;
  LaunchTicket ticket;
  ASSERT_EQ(rig.tracker.BeforeLaunch(rig.s0, rig.now, &ticket), 0);  // records a begin
  EXPECT_EQ(rig.tracker.AfterLaunch(ticket, false, rig.now, nullptr), 0);
  rig.Advance(10 * kMs);
  ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));
  rig.Advance(10 * kMs);
  EXPECT_EQ(rig.Measured(), 1 * kMs);
}

TEST(BusyTrackerTest, BrokenEventKeepsTheEstimateAsTheCharge) {
  Rig rig;
  for (int i = 0; i < 5; ++i) {  // learn the cost
    ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));
    rig.Advance(2 * kMs);
    rig.Measured();
  }
  ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));
  rig.ops.broken.insert(rig.ops.last_recorded);
  rig.Advance(2 * kMs);
  PollResult r = rig.tracker.Poll(rig.now);
  EXPECT_EQ(r.busy_ns, r.estimated_ns);
  EXPECT_NEAR(r.unmeasured_ns, 1 * kMs, 1);
  EXPECT_GE(rig.tracker.stats().event_errors, 1);
  rig.ops.broken.clear();
  ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));  // measurement resumes with a fresh chain
  rig.Advance(2 * kMs);
  EXPECT_EQ(rig.tracker.Poll(rig.now).busy_ns, 1 * kMs);
}

TEST(BusyTrackerTest, WithoutEventsLaunchesStillProceed) {
  Rig rig;
  rig.ops.fail_create = true;
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(rig.Launch(rig.s0, 1 * kMs));
  rig.Advance(20 * kMs);
  EXPECT_EQ(rig.Measured(), 0);
  EXPECT_EQ(rig.tracker.stats().marks, 0);
}

TEST(BusyTrackerTest, RecordFailuresDoNotCountIdleGaps) {
  Rig rig;
  ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));
  rig.Advance(5 * kMs);
  rig.ops.fail_record = true;  // the begin for the next launch cannot be recorded
  ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));
  rig.ops.fail_record = false;
  ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));
  rig.Advance(10 * kMs);
  EXPECT_LE(rig.Measured(), 3 * kMs);  // never the 4 ms idle gap
}

TEST(BusyTrackerTest, DestroyedStreamIsDrainedAndItsKeyStartsAfresh) {
  Rig rig;
  ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));
  rig.tracker.OnStreamDestroyed(rig.s0, rig.now);
  rig.Advance(5 * kMs);
  EXPECT_EQ(rig.Measured(), 1 * kMs);
  EXPECT_FALSE(rig.tracker.HasPendingWork());
  ASSERT_TRUE(rig.Launch(rig.s0, 2 * kMs));  // same key: a new stream
  rig.Advance(5 * kMs);
  EXPECT_EQ(rig.Measured(), 3 * kMs);
  EXPECT_EQ(rig.tracker.stats().streams, 2);
}

TEST(BusyTrackerTest, StaysExactOverManyRebasesOfTheTimeBase) {
  BusyTrackerOptions options = ExactOptions();
  options.rebase_after_ns = 50 * kMs;
  Rig rig(options);
  for (int i = 0; i < 300; ++i) {  // 3 s: 60 rebases
    ASSERT_TRUE(rig.Launch(rig.s0, 3 * kMs));
    ASSERT_TRUE(rig.Launch(rig.s1, 1 * kMs));
    rig.Advance(10 * kMs);
    rig.Measured();
  }
  EXPECT_NEAR(rig.Measured(), rig.Truth(), 300 * kUs / 1000);  // < 1 ns per interval
  EXPECT_EQ(rig.Truth(), 900 * kMs);
}

TEST(BusyTrackerTest, BeginSkewIsSubtractedFromIntervalsStartingIdle) {
  BusyTrackerOptions options = ExactOptions();
  options.begin_skew_ns = 2 * kUs;
  Rig rig(options);
  ASSERT_TRUE(rig.Launch(rig.s0, 100 * kUs));
  rig.Advance(1 * kMs);
  EXPECT_EQ(rig.Measured(), 98 * kUs);
}

// Bursts of cheap launches queued deep, each flushed and drained: the stream is learned uniform at
// 20 us. False when a launch could not be submitted.
bool LearnUniformAt20Us(Rig& rig) {
  for (int burst = 0; burst < 8; ++burst) {
    for (int i = 0; i < 12; ++i) {
      if (!rig.Launch(rig.s0, 20 * kUs)) return false;
      rig.Advance(2 * kUs);
    }
    rig.tracker.Flush(rig.now);
    rig.Advance(2 * kMs);
    rig.Measured();
  }
  return true;
}

// A stream learned uniform from cheap launches caps an interval that may hide a gap at its
// launches x the cheap cost; a step submitted at once and flushed before the host waits (a
// server's) has no gap but what precedes its submission, so an expensive launch in it counts in
// full (the cap alone counted 100 us of each 2.06 ms step).
TEST(BusyTrackerTest, AUniformStreamsCapYieldsToTimeThatWasSurelyBusy) {
  BusyTrackerOptions options = ExactOptions();
  options.submit_slack_ns = 0;
  Rig rig(options);
  ASSERT_TRUE(LearnUniformAt20Us(rig));
  ASSERT_EQ(rig.Measured(), rig.Truth());
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(step);
    const int64_t before = rig.Measured();
    const int64_t truth_before = rig.Truth();
    for (int64_t cost : {20 * kUs, 20 * kUs, 2 * kMs, 20 * kUs}) {
      ASSERT_TRUE(rig.Launch(rig.s0, cost));
      rig.Advance(1 * kUs);
    }
    const StreamKey waited = rig.s0;
    rig.tracker.FlushBeforeWait(rig.now, &waited);
    rig.Advance(5 * kMs);
    EXPECT_EQ(rig.Truth() - truth_before, 2060 * kUs);
    EXPECT_NEAR(rig.Measured() - before, 2060 * kUs, 4 * kUs);
  }
}

// A stream learned uniform from cheap launches queued deep, then launched slower than it runs
// (every launch finds it idle) with an expensive launch among the cheap ones: no deep interval
// sees the expensive ones, and intervals capped at the cheap cost would count them as cheap. A
// launch measured alone now and then (drawn at random) shows one, which ends the uniform standing.
// Returns measured / true busy time over the last 200 of 600 such launches.
double SlowMixAfterUniform(int sample_every) {
  BusyTrackerOptions options = ExactOptions();
  options.uniform_sample_every = sample_every;
  Rig rig(options);
  EXPECT_TRUE(LearnUniformAt20Us(rig));
  int64_t measured_from = 0, truth_from = 0;
  for (int i = 0; i < 600; ++i) {
    if (i == 400) {
      rig.Advance(1 * kMs);
      measured_from = rig.Measured();
      truth_from = rig.Truth();
    }
    EXPECT_TRUE(rig.Launch(rig.s0, i % 5 == 4 ? 60 * kUs : 20 * kUs));
    rig.Advance(100 * kUs);
    rig.Measured();
  }
  rig.tracker.Flush(rig.now);
  rig.Advance(1 * kMs);
  return static_cast<double>(rig.Measured() - measured_from) / static_cast<double>(rig.Truth() - truth_from);
}

TEST(BusyTrackerTest, ALaunchMeasuredAloneShowsExpensiveLaunchesAUniformStreamHid) {
  EXPECT_NEAR(SlowMixAfterUniform(BusyTrackerOptions().uniform_sample_every), 1.0, 0.01);
  // Never sampled: every five launches (140 us) capped at 5 x 25 us, 0.89 of the truth.
  EXPECT_LT(SlowMixAfterUniform(0), 0.95);
}

TEST(BusyTrackerTest, ResetDestroysEventsAndForgetsStreams) {
  Rig rig;
  ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));
  EXPECT_TRUE(rig.tracker.HasPendingWork());
  rig.tracker.Reset(/*destroy_events=*/true);
  EXPECT_FALSE(rig.tracker.HasPendingWork());
  EXPECT_GE(rig.ops.destroyed, 2);  // begin + mark
}

// Two processes of one container: two contexts that time-slice (each one's intervals cover the
// other's slices), with a tracker each. Sharing a BusyRing, together they charge what the GPU
// was busy; without it, each charges the other's slices too.
struct TwoProcesses {
  explicit TwoProcesses(bool share) : ring{} {
    SimGpuParams params = ExactGpu();
    params.timeslice_ns = 1 * kMs;
    gpu = std::make_unique<SimGpu>(params);
    for (int p = 0; p < 2; ++p) {
      const int ctx = gpu->AddContext();
      contexts[p] = ctx;
      streams[p] = gpu->AddStream(ctx);
      ops[p] = std::make_unique<SimEventOps>(gpu.get(), ctx, sim::SimOpCosts{0, 0, 0, 0});
      trackers[p] = std::make_unique<BusyTracker>(ops[p].get(), ExactOptions(), share ? &ring : nullptr);
    }
  }
  // Both keep their stream busy with `launches` kernels of `kernel_ns` (as many queued as their
  // tracker admits), polling every 20 us; returns the busy time both charged.
  int64_t Run(int launches, int64_t kernel_ns) {
    int left[2] = {launches, launches};
    int64_t charged = 0;
    for (int step = 0; step < 100000 && (left[0] > 0 || left[1] > 0 || trackers[0]->HasPendingWork() ||
                                         trackers[1]->HasPendingWork());
         ++step) {
      for (int p = 0; p < 2; ++p) {
        LaunchTicket ticket;
        while (left[p] > 0 && trackers[p]->BeforeLaunch(streams[p], now, &ticket) == 0) {
          gpu->Launch(streams[p], now, kernel_ns);
          PollResult polled;
          trackers[p]->AfterLaunch(ticket, true, now, &polled);
          charged += polled.busy_ns;
          --left[p];
        }
        if (left[p] == 0) trackers[p]->Flush(now);
        charged += trackers[p]->Poll(now).busy_ns;
      }
      now += 20 * kUs;
      gpu->AdvanceTo(now);
    }
    return charged;
  }
  BusyRing ring;
  std::unique_ptr<SimGpu> gpu;
  int contexts[2] = {0, 0};
  int streams[2] = {0, 0};
  std::unique_ptr<SimEventOps> ops[2];
  std::unique_ptr<BusyTracker> trackers[2];
  int64_t now = 0;
};

TEST(BusyTrackerTest, ProcessesSharingABusyRingChargeTheirTimeSlicesOnce) {
  for (int64_t kernel : {200 * kUs, 2 * kMs}) {
    TwoProcesses shared(true);
    const int64_t charged = shared.Run(100, kernel);
    const int64_t truth = shared.gpu->DeviceBusyNs(0, shared.now + kMs);
    EXPECT_NEAR(static_cast<double>(charged), static_cast<double>(truth), 0.02 * truth) << kernel;
    EXPECT_GT(shared.trackers[0]->stats().shared_read, 0);
    EXPECT_GT(shared.trackers[1]->stats().shared_read, 0);
    TwoProcesses alone(false);
    const int64_t doubled = alone.Run(100, kernel);
    EXPECT_GT(doubled, 1.5 * alone.gpu->DeviceBusyNs(0, alone.now + kMs)) << kernel;
  }
}

// Another process's interval, written into the ring as that process would (CLOCK_MONOTONIC;
// in the simulation the host clock and the GPU's are the same).
uint64_t Publish(BusyRing& ring, int64_t begin, int64_t end, bool complete = true) {
  const uint64_t i = ring.head.fetch_add(1);
  BusyRingSlot& slot = ring.slots[i % kBusyRingSlots];
  slot.seq.store(2 * i + 1);
  slot.begin_ns.store(begin);
  slot.end_ns.store(end);
  slot.writer.store(0x5eed);
  if (complete) slot.seq.store(2 * i + 2);
  return i;
}

TEST(BusyTrackerTest, TimeAnotherProcessAlreadyChargedIsNotChargedAgain) {
  BusyRing ring{};
  Rig rig(ExactOptions(), ExactGpu(), &ring);
  rig.Advance(1 * kMs);
  ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));  // [1, 2] ms, seen complete at once: the clocks' offset
  rig.Advance(1 * kMs);
  EXPECT_EQ(rig.Measured(), 1 * kMs);
  EXPECT_EQ(ring.head.load(), 1u);  // published for the others
  EXPECT_EQ(ring.slots[0].begin_ns.load(), 1 * kMs);
  EXPECT_EQ(ring.slots[0].end_ns.load(), 2 * kMs);
  // Another process charged [3.5, 4.5] ms; this one's kernel runs [4, 5] ms: 0.5 ms is new.
  Publish(ring, 3'500 * kUs, 4'500 * kUs);
  rig.Advance(2 * kMs);  // now 4 ms
  ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));
  rig.Advance(2 * kMs);
  EXPECT_EQ(rig.Measured(), 1'500 * kUs);
  EXPECT_EQ(rig.tracker.stats().shared_read, 1);
}

// The observer (ComputeTrace's B records) sees each interval this process adds, on the host's
// clock, whole (not only the part new to the union).
TEST(BusyTrackerTest, TheObserverSeesEachOwnIntervalOnTheHostClock) {
  BusyRing ring{};
  Rig rig(ExactOptions(), ExactGpu(), &ring);
  std::vector<std::pair<int64_t, int64_t>> seen;
  rig.tracker.ObserveIntervals(
      [](void* context, int64_t begin, int64_t end) {
        static_cast<std::vector<std::pair<int64_t, int64_t>>*>(context)->emplace_back(begin, end);
      },
      &seen);
  rig.Advance(1 * kMs);
  ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));  // [1, 2] ms
  rig.Advance(1 * kMs);
  rig.Measured();
  Publish(ring, 3'500 * kUs, 4'500 * kUs);  // another process's: not observed
  rig.Advance(2 * kMs);
  ASSERT_TRUE(rig.Launch(rig.s0, 1 * kMs));  // [4, 5] ms
  rig.Advance(2 * kMs);
  rig.Measured();
  // On the host clock through the clocks' offset, which is known to a few tens of ns here.
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_NEAR(seen[0].first, 1 * kMs, 1 * kUs);
  EXPECT_NEAR(seen[0].second, 2 * kMs, 1 * kUs);
  EXPECT_NEAR(seen[1].first, 4 * kMs, 1 * kUs);
  EXPECT_NEAR(seen[1].second, 5 * kMs, 1 * kUs);
  EXPECT_EQ(seen[1].second - seen[1].first, 1 * kMs);
}

// A launch reaches the GPU some time after its call returned (on an H200 kernels started ~9 us
// after it). A launch made while the mark before it was still pending, which then completed
// before the launch arrived: the stream ran dry inside the interval. The interval starts no
// sooner than the launch could (its call's return + the least delay any event showed, from the
// clocks' offset; a BusyRing keeps it); a graph launch, which may start within its call, keeps it.
TEST(BusyTrackerTest, ALaunchStillOnItsWayToTheGpuIsNotCountedBeforeItArrives) {
  SimGpuParams gpu = ExactGpu();
  gpu.submit_latency_ns = 8 * kUs;
  for (bool graph : {false, true}) {
    SCOPED_TRACE(graph);
    BusyRing ring{};
    Rig rig(ExactOptions(), gpu, &ring);
    rig.call_ns = 4 * kUs;
    ASSERT_TRUE(rig.Launch(rig.s0, 10 * kUs));  // a begin at 0 (done at 8), the kernel [12, 22] us
    rig.Advance(16 * kUs);                        // now 20 us: its mark (22 us) still pending
    ASSERT_TRUE(rig.Launch(rig.s0, 10 * kUs, graph));  // returns at 24, on the GPU [32, 42] us
    rig.Advance(100 * kUs);
    EXPECT_EQ(rig.tracker.stats().begins, 1);  // the second launch found the stream busy
    EXPECT_EQ(rig.Truth(), 20 * kUs);
    const int64_t slack = BusyTrackerOptions().visible_slack_ns;
    if (!graph) {
      // [12 - slack, 22] and [32 - slack, 42]; without the bound [8, 22] and [22, 42]: 34 us.
      EXPECT_EQ(rig.Measured(), 20 * kUs + 2 * slack);
    } else {
      EXPECT_EQ(rig.Measured(), 10 * kUs + slack + 20 * kUs);  // the graph's interval whole
    }
  }
}

// D, the least delay to the GPU, comes from the begins of the last one to two delay windows: a
// stretch without begins (a stream that never runs dry) leaves no bound rather than a looser one.
// The clocks' offset's lower bound, which D once was, loosens by the clocks' possible drift while
// no event completes at once; here the drift is exaggerated (20 us per ms instead of per second)
// so that 5 ms stand for 5 s: that D grew by more than 100 us and cut real work.
TEST(BusyTrackerTest, TheLeastDelayToTheGpuComesFromRecentBeginsAndDoesNotGrow) {
  SimGpuParams gpu = ExactGpu();
  gpu.submit_latency_ns = 8 * kUs;
  BusyTrackerOptions options = ExactOptions();
  options.max_clock_drift_ppm = 20'000;
  options.delay_window_ns = 1 * kMs;
  BusyRing ring{};
  Rig rig(options, gpu, &ring);
  rig.call_ns = 4 * kUs;
  ASSERT_TRUE(rig.Launch(rig.s0, 5 * kMs));  // a begin at 0 (done at 8: D = 8 us), the kernel [12, 5012] us
  for (int i = 0; i < 49; ++i) {
    rig.Advance(100 * kUs);
    rig.Measured();  // polls: the begin's bound loosens by the drift
  }
  rig.Advance(4992 * kUs - rig.now);
  // Returns at 4.996 ms, reaches the GPU at 5.004, runs [5012, 5022] us behind the long kernel.
  ASSERT_TRUE(rig.Launch(rig.s0, 10 * kUs));
  rig.Advance(1 * kMs);
  EXPECT_EQ(rig.tracker.stats().begins, 1);
  // Both kernels whole, and the first launch's call: measured 5 ms later, its begin is too old to
  // bound its interval. The drifting bound (D = 124 us by then) measured 4.901 ms: it cut 111 us
  // off the first launch's interval and all of the second one's.
  EXPECT_EQ(rig.Measured(), rig.Truth() + rig.call_ns);
}

TEST(BusyTrackerTest, RingSlotsBeingWrittenOrOverwrittenAreHandled) {
  BusyRing ring{};
  Rig rig(ExactOptions(), ExactGpu(), &ring);
  ASSERT_TRUE(rig.Launch(rig.s0, 100 * kUs));
  rig.Advance(1 * kMs);
  rig.Measured();
  // More intervals than the ring holds since the last read: the overwritten ones are skipped.
  for (int i = 0; i < kBusyRingSlots + 44; ++i) Publish(ring, 2 * kMs + i, 2 * kMs + i + 1);
  rig.Measured();
  EXPECT_EQ(rig.tracker.stats().shared_read, kBusyRingSlots);
  EXPECT_EQ(rig.tracker.stats().shared_skipped, 45);  // 44 overwritten + this tracker's own slot 0
  // A slot still being written stops the read; it is read once complete.
  const uint64_t i = Publish(ring, 3 * kMs, 3 * kMs + 1, /*complete=*/false);
  Publish(ring, 3 * kMs + 2, 3 * kMs + 3);
  rig.Measured();
  EXPECT_EQ(rig.tracker.stats().shared_read, kBusyRingSlots);
  ring.slots[i % kBusyRingSlots].seq.store(2 * i + 2);
  rig.Measured();
  EXPECT_EQ(rig.tracker.stats().shared_read, kBusyRingSlots + 2);
}

// A stream that runs dry before every launch gets a begin and a mark per launch; the idle check
// before the next launch finds the last of them complete, so the poll does not ask about either
// again (a stream completes its events in order): about one query per launch, not three.
TEST(BusyTrackerTest, EventsSeenDoneThroughALaterOneAreNotQueriedAgain) {
  Rig rig;
  LaunchDryAndPoll(rig);
  EXPECT_EQ(rig.Measured(), 200 * 10 * kUs);
  EXPECT_EQ(rig.Measured(), rig.Truth());
  const TrackerStats s = rig.tracker.stats();
  EXPECT_EQ(s.begins, 200);
  // The idle checks (199) and, at each poll, the last launch's begin or mark; without it every
  // event was queried once more by the poll: 599.
  EXPECT_LE(s.queries, 250);
}

}  // namespace
}  // namespace vgpu::compute
