// The simulated GPU must behave the way the limiter's reasoning assumes; these pin it down.
#include "compute/sim_model.h"

#include <gtest/gtest.h>

namespace vgpu::compute::sim {
namespace {

constexpr int64_t kUs = 1'000;
constexpr int64_t kMs = 1'000'000;

SimGpuParams ExactParams() {
  SimGpuParams p;
  p.kernel_overhead_ns = 0;
  p.submit_latency_ns = 0;
  p.event_resolution_ns = 1;
  p.timeslice_ns = 2 * kMs;
  return p;
}

// With event_gpu_ns an event holds its stream that long (time-stamped at its end), counted busy
// but not work: what an event between two queued kernels costs an H200.
TEST(SimGpuTest, AnEventTakesItsGpuTimeOnItsStream) {
  SimGpuParams params = ExactParams();
  params.event_gpu_ns = 2 * kUs;
  SimGpu gpu(params);
  int ctx = gpu.AddContext();
  int s = gpu.AddStream(ctx);
  EventId a = gpu.CreateEvent(ctx), b = gpu.CreateEvent(ctx), c = gpu.CreateEvent(ctx);
  ASSERT_TRUE(gpu.RecordEvent(a, s, 0));
  gpu.Launch(s, 0, 10 * kUs);
  ASSERT_TRUE(gpu.RecordEvent(b, s, 0));
  gpu.Launch(s, 0, 10 * kUs);
  ASSERT_TRUE(gpu.RecordEvent(c, s, 0));
  gpu.AdvanceTo(25 * kUs);
  EXPECT_EQ(gpu.QueryEvent(c), EventState::kNotReady);  // its own 2 us end at 26
  gpu.AdvanceTo(kMs);
  ASSERT_EQ(gpu.QueryEvent(c), EventState::kReady);
  EXPECT_EQ(gpu.EventTime(a), 2 * kUs);
  EXPECT_EQ(gpu.EventTime(b), 14 * kUs);  // a, the kernel, b
  EXPECT_EQ(gpu.EventTime(c), 26 * kUs);
  EXPECT_EQ(gpu.ContextBusyNs(ctx, 0, kMs), 26 * kUs);
  EXPECT_EQ(gpu.ContextWorkNs(ctx, 0, kMs), 20 * kUs);
}

TEST(SimGpuTest, KernelsOnOneStreamRunBackToBack) {
  SimGpu gpu(ExactParams());
  int ctx = gpu.AddContext();
  int s = gpu.AddStream(ctx);
  EventId a = gpu.CreateEvent(ctx), b = gpu.CreateEvent(ctx);
  ASSERT_TRUE(gpu.RecordEvent(a, s, 0));
  gpu.Launch(s, 0, 100 * kUs);
  gpu.Launch(s, 0, 200 * kUs);
  ASSERT_TRUE(gpu.RecordEvent(b, s, 0));
  gpu.AdvanceTo(250 * kUs);
  EXPECT_EQ(gpu.QueryEvent(b), EventState::kNotReady);
  gpu.AdvanceTo(400 * kUs);
  ASSERT_EQ(gpu.QueryEvent(b), EventState::kReady);
  float ms = 0;
  ASSERT_TRUE(gpu.ElapsedMs(a, b, &ms));
  EXPECT_NEAR(ms, 0.3, 1e-6);
  EXPECT_EQ(gpu.ContextBusyNs(ctx, 0, kMs), 300 * kUs);
  EXPECT_TRUE(gpu.StreamDrained(s));
}

TEST(SimGpuTest, StreamsOfOneContextRunConcurrently) {
  SimGpu gpu(ExactParams());
  int ctx = gpu.AddContext();
  int s0 = gpu.AddStream(ctx), s1 = gpu.AddStream(ctx);
  gpu.Launch(s0, 0, 1 * kMs);
  gpu.Launch(s1, 0, 1 * kMs);
  gpu.AdvanceTo(1 * kMs);
  EXPECT_TRUE(gpu.StreamDrained(s0) && gpu.StreamDrained(s1));
  EXPECT_EQ(gpu.DeviceBusyNs(0, 2 * kMs), 1 * kMs);  // union, not sum
}

TEST(SimGpuTest, ContextsTimeSliceAndPreemptLongKernels) {
  SimGpu gpu(ExactParams());
  int a = gpu.AddContext(), b = gpu.AddContext();
  int sa = gpu.AddStream(a), sb = gpu.AddStream(b);
  EventId done_a = gpu.CreateEvent(a);
  gpu.Launch(sa, 0, 5 * kMs);
  ASSERT_TRUE(gpu.RecordEvent(done_a, sa, 0));
  gpu.Launch(sb, 0, 5 * kMs);
  gpu.AdvanceTo(10 * kMs);
  ASSERT_EQ(gpu.QueryEvent(done_a), EventState::kReady);
  // a runs [0,2) [4,6) [8,9): its kernel finishes at 9 ms although it needs only 5 ms.
  EXPECT_EQ(gpu.EventTime(done_a), 9 * kMs);
  EXPECT_EQ(gpu.ContextBusyNs(a, 0, 10 * kMs), 5 * kMs);
  EXPECT_EQ(gpu.ContextBusyNs(b, 0, 10 * kMs), 5 * kMs);
  EXPECT_EQ(gpu.DeviceBusyNs(0, 10 * kMs), 10 * kMs);
}

TEST(SimGpuTest, EventOfSwitchedOutContextWaitsForItsTurn) {
  SimGpu gpu(ExactParams());
  int a = gpu.AddContext(), b = gpu.AddContext();
  int sa = gpu.AddStream(a), sb = gpu.AddStream(b);
  gpu.Launch(sa, 0, 10 * kMs);
  gpu.AdvanceTo(1 * kMs);
  EventId e = gpu.CreateEvent(b);
  ASSERT_TRUE(gpu.RecordEvent(e, sb, 1 * kMs));  // b's stream is empty, but a holds the GPU
  gpu.AdvanceTo(3 * kMs);
  ASSERT_EQ(gpu.QueryEvent(e), EventState::kReady);
  EXPECT_EQ(gpu.EventTime(e), 2 * kMs);  // a's slice ended at 2 ms
}

TEST(SimGpuTest, SubmitLatencyAndKernelOverhead) {
  SimGpuParams p = ExactParams();
  p.submit_latency_ns = 3 * kUs;
  p.kernel_overhead_ns = 1 * kUs;
  SimGpu gpu(p);
  int ctx = gpu.AddContext();
  int s = gpu.AddStream(ctx);
  EventId e = gpu.CreateEvent(ctx);
  gpu.Launch(s, 0, 10 * kUs);
  ASSERT_TRUE(gpu.RecordEvent(e, s, 0));
  gpu.AdvanceTo(1 * kMs);
  EXPECT_EQ(gpu.EventTime(e), 14 * kUs);  // visible at 3, runs 10 + 1
  EXPECT_EQ(gpu.ContextBusyNs(ctx, 0, kMs), 11 * kUs);
}

TEST(SimGpuTest, ReRecordingAnEventRearmsIt) {
  SimGpu gpu(ExactParams());
  int ctx = gpu.AddContext();
  int s = gpu.AddStream(ctx);
  EventId e = gpu.CreateEvent(ctx);
  EXPECT_EQ(gpu.QueryEvent(e), EventState::kReady);  // never recorded: ready, as in CUDA
  gpu.Launch(s, 0, 1 * kMs);
  ASSERT_TRUE(gpu.RecordEvent(e, s, 0));
  gpu.AdvanceTo(2 * kMs);
  ASSERT_EQ(gpu.QueryEvent(e), EventState::kReady);
  gpu.Launch(s, 2 * kMs, 1 * kMs);
  ASSERT_TRUE(gpu.RecordEvent(e, s, 2 * kMs));
  EXPECT_EQ(gpu.QueryEvent(e), EventState::kNotReady);
  gpu.AdvanceTo(4 * kMs);
  EXPECT_EQ(gpu.EventTime(e), 3 * kMs);
}

TEST(SimGpuTest, RecordOnAnotherContextsStreamFails) {
  SimGpu gpu(ExactParams());
  int a = gpu.AddContext(), b = gpu.AddContext();
  gpu.AddStream(a);
  int sb = gpu.AddStream(b);
  EventId e = gpu.CreateEvent(a);
  EXPECT_FALSE(gpu.RecordEvent(e, sb, 0));
  EXPECT_FALSE(gpu.RecordEvent(e + 100, sb, 0));
  EXPECT_EQ(gpu.QueryEvent(e + 100), EventState::kError);
}

}  // namespace
}  // namespace vgpu::compute::sim
