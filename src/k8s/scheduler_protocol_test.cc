#include "k8s/scheduler_protocol.h"

#include <gtest/gtest.h>

namespace vgpu::k8s {
namespace {

std::vector<NodeGpuRecord> TwoH200() {
  NodeGpuRecord first;
  first.uuid = "GPU-5a4b2c1d-0000-1111-2222-333344445555";
  first.index = 0;
  first.count = 10;
  first.memory = 143771;
  first.cores = 100;
  first.type = "NVIDIA-NVIDIA H200";
  first.numa = 0;
  first.mode = kHamiCoreMode;
  first.healthy = true;
  NodeGpuRecord second = first;
  second.uuid = "GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff";
  second.index = 1;
  second.numa = 1;
  second.healthy = false;
  return {first, second};
}

// Golden strings: the exact node annotation values a HAMi 2.8 scheduler and a Volcano
// deviceshare plugin parse. Field order and omit-empty follow HAMi's Go DeviceInfo struct
// (index 0, numa 0 and health false are omitted).
TEST(SchedulerProtocolTest, HamiNodeRegisterGolden) {
  EXPECT_EQ(EncodeHamiNodeRegister(TwoH200()),
            "[{\"id\":\"GPU-5a4b2c1d-0000-1111-2222-333344445555\",\"count\":10,\"devmem\":143771,\"devcore\":100,"
            "\"type\":\"NVIDIA-NVIDIA H200\",\"mode\":\"hami-core\",\"health\":true},"
            "{\"id\":\"GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff\",\"index\":1,\"count\":10,\"devmem\":143771,"
            "\"devcore\":100,\"type\":\"NVIDIA-NVIDIA H200\",\"numa\":1,\"mode\":\"hami-core\"}]");
  EXPECT_EQ(EncodeHamiNodeRegister({}), "[]");
}

TEST(SchedulerProtocolTest, VolcanoNodeRegisterGolden) {
  std::vector<NodeGpuRecord> gpus = TwoH200();
  gpus[0].memory = gpus[1].memory = 143771 / 4;  // memory factor 4
  EXPECT_EQ(EncodeVolcanoNodeRegister(gpus),
            "GPU-5a4b2c1d-0000-1111-2222-333344445555,10,35942,NVIDIA-NVIDIA H200,true,hami-core:"
            "GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff,10,35942,NVIDIA-NVIDIA H200,false,hami-core:");
}

TEST(SchedulerProtocolTest, HandshakeLooksLikeGoTimeString) {
  struct timespec at {};
  at.tv_sec = 1795253405;  // 2026-11-21 09:30:05 UTC
  at.tv_nsec = 123456789;
  EXPECT_EQ(HandshakeReported(at), "Reported 2026-11-21 09:30:05.123456789 +0000 UTC");
  EXPECT_FALSE(HandshakeWantsReport(HandshakeReported(at)));
  EXPECT_TRUE(HandshakeWantsReport("Requesting_2026.11.21 09:30:05"));
  EXPECT_TRUE(HandshakeWantsReport("Deleted_2026.11.21 09:30:05"));
}

TEST(SchedulerProtocolTest, ParsesHamiLock) {
  NodeLockValue lock;
  ASSERT_TRUE(ParseNodeLock(kHamiProtocol, "2026-11-21T09:30:05Z,team-a,train-0", &lock).ok);
  EXPECT_EQ(lock.pod_namespace, "team-a");
  EXPECT_EQ(lock.pod_name, "train-0");
  ASSERT_TRUE(ParseNodeLock(kHamiProtocol, "2026-11-21T17:30:05+08:00,ns,p", &lock).ok);
  ASSERT_TRUE(ParseNodeLock(kVolcanoProtocol, "2026-11-21T09:30:05Z", &lock).ok);
  EXPECT_TRUE(lock.pod_name.empty());
}

TEST(SchedulerProtocolTest, RejectsMalformedLocks) {
  NodeLockValue lock;
  for (const char* bad : {"2026-11-21T09:30:05Z", "2026-11-21T09:30:05Z,ns", "2026-11-21T09:30:05Z,,pod",
                          "2026-11-21T09:30:05Z,ns,", "yesterday,ns,pod", "2026-11-21T09:30:05Z,ns,pod,extra",
                          "2026-11-21 09:30:05,ns,pod"}) {
    Status status = ParseNodeLock(kHamiProtocol, bad, &lock);
    EXPECT_FALSE(status.ok) << bad;
    EXPECT_NE(status.message.find("hami.io/mutex.lock"), std::string::npos) << status.message;
  }
  EXPECT_FALSE(ParseNodeLock(kVolcanoProtocol, "not a time", &lock).ok);
}

}  // namespace
}  // namespace vgpu::k8s
