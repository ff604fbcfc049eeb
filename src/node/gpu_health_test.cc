#include "node/gpu_health.h"

#include <gtest/gtest.h>

namespace vgpu::node {
namespace {

GpuEvent Xid(uint32_t index, uint64_t xid) { return {index, GpuEvent::Kind::kXid, xid}; }

TEST(GpuHealthTest, CriticalXidMakesUnhealthyApplicationXidDoesNot) {
  HealthTracker t({13, 31, 43, 45, 68, 109}, 60'000);
  t.SetDevices({{0, "GPU-a"}, {1, "GPU-b"}});
  EXPECT_FALSE(t.OnEvent(Xid(0, 13), 1));   // application error
  EXPECT_TRUE(t.OnEvent(Xid(1, 79), 1));    // fell off the bus
  EXPECT_FALSE(t.OnEvent(Xid(1, 79), 2));   // already unhealthy
  const auto s = t.Snapshot();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_TRUE(s[0].healthy);
  EXPECT_EQ(s[0].xids.at(13), 1u);
  EXPECT_FALSE(s[1].healthy);
  EXPECT_EQ(s[1].reason, "XID 79");
  EXPECT_EQ(s[1].xids.at(79), 2u);
  EXPECT_EQ(s[1].uuid, "GPU-b");
}

TEST(GpuHealthTest, EccDoubleBitIsCriticalSingleBitIsCounted) {
  HealthTracker t({}, 1000);
  EXPECT_FALSE(t.OnEvent({0, GpuEvent::Kind::kEccSingleBit, 0}, 1));
  EXPECT_TRUE(t.OnEvent({0, GpuEvent::Kind::kEccDoubleBit, 0}, 1));
  EXPECT_EQ(t.Snapshot()[0].ecc_single, 1u);
  EXPECT_EQ(t.Snapshot()[0].ecc_double, 1u);
}

TEST(GpuHealthTest, RecoveryNeedsTheHoldTimeAndAWorkingProbe) {
  HealthTracker t({}, 1000);
  t.OnEvent(Xid(0, 48), 100);
  bool probe_ok = true;
  auto probe = [&](uint32_t) { return probe_ok; };
  EXPECT_TRUE(t.Tick(1099, probe).empty());  // hold time not over
  probe_ok = false;
  EXPECT_TRUE(t.Tick(1100, probe).empty());  // GPU does not answer
  probe_ok = true;
  EXPECT_EQ(t.Tick(1101, probe), std::vector<uint32_t>{0});
  EXPECT_TRUE(t.Snapshot()[0].healthy);
  EXPECT_EQ(t.Snapshot()[0].transitions, 2u);
  // A new event restarts the hold.
  t.OnEvent(Xid(0, 48), 2000);
  EXPECT_TRUE(t.Tick(2500, probe).empty());
  EXPECT_EQ(t.Tick(3000, probe).size(), 1u);
}

TEST(GpuHealthTest, ALostGpuRecoversAsSoonAsItAnswers) {
  HealthTracker t({}, 60'000);
  EXPECT_TRUE(t.OnEvent({0, GpuEvent::Kind::kLost, 0}, 10));
  EXPECT_TRUE(t.Tick(11, [](uint32_t) { return false; }).empty());
  EXPECT_EQ(t.Tick(12, [](uint32_t) { return true; }).size(), 1u);
}

}  // namespace
}  // namespace vgpu::node
