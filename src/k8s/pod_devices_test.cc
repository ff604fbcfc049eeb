#include "k8s/pod_devices.h"

#include <gtest/gtest.h>

namespace vgpu::k8s {
namespace {

TEST(PodDevicesTest, DecodesHamiTerminatedEntriesKeepingEmptyOnes) {
  std::vector<ContainerDevices> pod;
  // Init container without GPU, then two containers; HAMi terminates every entry with ';'.
  const std::string text =
      ";GPU-a,NVIDIA,1000,30:;GPU-b,NVIDIA,2000,50:GPU-c,NVIDIA,2000,0:;";
  ASSERT_TRUE(DecodePodDevices(text, EntrySeparator::kTerminated, &pod).ok);
  ASSERT_EQ(pod.size(), 3u);
  EXPECT_TRUE(pod[0].empty());
  ASSERT_EQ(pod[1].size(), 1u);
  EXPECT_EQ(pod[1][0], (ContainerDevice{"GPU-a", "NVIDIA", 1000, 30}));
  ASSERT_EQ(pod[2].size(), 2u);
  EXPECT_EQ(pod[2][1], (ContainerDevice{"GPU-c", "NVIDIA", 2000, 0}));
  EXPECT_EQ(EncodePodDevices(pod, EntrySeparator::kTerminated), text);
  EXPECT_EQ(NextEntryWithType(pod, "NVIDIA"), 1);
}

TEST(PodDevicesTest, DecodesVolcanoJoinedEntries) {
  std::vector<ContainerDevices> pod;
  const std::string text = "GPU-a,NVIDIA,1000,30:;GPU-b,NVIDIA,2000,50:";
  ASSERT_TRUE(DecodePodDevices(text, EntrySeparator::kJoined, &pod).ok);
  ASSERT_EQ(pod.size(), 2u);
  EXPECT_EQ(pod[1][0].uuid, "GPU-b");
  EXPECT_EQ(EncodePodDevices(pod, EntrySeparator::kJoined), text);
  pod[0].clear();  // popped
  EXPECT_EQ(EncodePodDevices(pod, EntrySeparator::kJoined), ";GPU-b,NVIDIA,2000,50:");
  pod[1].clear();
  EXPECT_FALSE(AnyDeviceOfType(pod, "NVIDIA"));
}

TEST(PodDevicesTest, EmptyTextIsNoEntries) {
  std::vector<ContainerDevices> pod = {{}};
  ASSERT_TRUE(DecodePodDevices("", EntrySeparator::kTerminated, &pod).ok);
  EXPECT_TRUE(pod.empty());
  EXPECT_EQ(NextEntryWithType(pod, "NVIDIA"), -1);
}

TEST(PodDevicesTest, AcceptsMissingFinalTerminators) {
  std::vector<ContainerDevices> pod;
  ASSERT_TRUE(DecodePodDevices("GPU-a,NVIDIA,1,2", EntrySeparator::kTerminated, &pod).ok);
  ASSERT_EQ(pod.size(), 1u);
  EXPECT_EQ(pod[0][0].cores, 2);
}

TEST(PodDevicesTest, RejectsMalformedDevicesNamingThem) {
  struct Case {
    const char* text;
    const char* expect;
  };
  const Case cases[] = {
      {"GPU-a,NVIDIA,1000:;", "3 fields"},
      {"GPU-a,NVIDIA,1000,30,7:;", "5 fields"},
      {",NVIDIA,1000,30:;", "UUID"},
      {"GPU a,NVIDIA,1000,30:;", "UUID"},
      {"GPU-a,,1000,30:;", "type"},
      {"GPU-a,NVIDIA,-1,30:;", "memory \"-1\""},
      {"GPU-a,NVIDIA,1e3,30:;", "memory \"1e3\""},
      {"GPU-a,NVIDIA,99999999999,30:;", "memory"},
      {"GPU-a,NVIDIA,1000,101:;", "cores \"101\""},
      {"GPU-a,NVIDIA,1000,x:;", "cores \"x\""},
      {"GPU-a,NVIDIA,1000,30::GPU-b,NVIDIA,1,1:;", "empty device"},
      {"garbage;", "1 fields"},
  };
  for (const Case& c : cases) {
    std::vector<ContainerDevices> pod;
    Status status = DecodePodDevices(c.text, EntrySeparator::kTerminated, &pod);
    EXPECT_FALSE(status.ok) << c.text;
    EXPECT_NE(status.message.find(c.expect), std::string::npos) << c.text << " -> " << status.message;
    EXPECT_NE(status.message.find("container entry 0"), std::string::npos) << status.message;
    EXPECT_TRUE(pod.empty());
  }
}

}  // namespace
}  // namespace vgpu::k8s
