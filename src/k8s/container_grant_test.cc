#include "k8s/container_grant.h"

#include <gtest/gtest.h>

#include <map>

#include "k8s/deviceplugin.pb.h"

namespace vgpu::k8s {
namespace {

constexpr uint64_t kGiB = 1024ull * 1024 * 1024;

ContainerGrant TwoGpuGrant() {
  ContainerGrant grant;
  grant.key = "0b1c2d3e-uid_trainer";
  grant.pod_uid = "0b1c2d3e-uid";
  grant.container_name = "trainer";
  grant.gpus = {{"GPU-a", 2 * kGiB, 50}, {"GPU-b", 3000ull * 1024 * 1024, 0}};
  return grant;
}

TEST(ContainerGrantTest, EnvironmentFollowsTheContract) {
  const auto env = GrantEnvironment(TwoGpuGrant());
  EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES"), "GPU-a,GPU-b");
  EXPECT_EQ(env.at("CUDA_DEVICE_MEMORY_LIMIT_0"), "2048m");
  EXPECT_EQ(env.at("CUDA_DEVICE_MEMORY_LIMIT_1"), "3000m");
  EXPECT_EQ(env.at("CUDA_DEVICE_SM_LIMIT_0"), "50");
  EXPECT_EQ(env.count("CUDA_DEVICE_SM_LIMIT_1"), 0u);  // 0 = no compute limit
  EXPECT_EQ(env.at("CUDA_DEVICE_MEMORY_SHARED_CACHE"), "/var/lib/vgpu/container/ledger");
  EXPECT_EQ(env.at("VGPU_SOCKET"), "/var/lib/vgpu/vgpu.sock");
  EXPECT_EQ(env.at("VGPU_BOARD"), "/var/lib/vgpu/board");
  EXPECT_EQ(env.at("VGPU_POD_UID"), "0b1c2d3e-uid");
  EXPECT_EQ(env.at("VGPU_CONTAINER_NAME"), "trainer");
  EXPECT_EQ(env.count("CUDA_TASK_PRIORITY"), 0u);
}

TEST(ContainerGrantTest, LimitsMatchWhatTheLibraryReadsFromThatEnvironment) {
  ledger::LimitSet limits;
  ASSERT_TRUE(GrantLimits(TwoGpuGrant(), &limits).ok);
  EXPECT_EQ(limits.authority, ledger::Authority::kNodeDaemon);
  ASSERT_EQ(limits.devices.size(), 2u);
  EXPECT_EQ(limits.devices[0].ordinal, 0);
  EXPECT_EQ(limits.devices[0].memory_limit, 2 * kGiB);
  EXPECT_EQ(limits.devices[0].sm_limit, 50);
  EXPECT_EQ(limits.devices[1].memory_limit, 3000ull * 1024 * 1024);
  EXPECT_EQ(limits.devices[1].sm_limit, 0);
}

TEST(ContainerGrantTest, ResponseMountsEverythingAndSkipsThePreloadOnRequest) {
  NodePaths paths;
  paths.state_dir = "/srv/vgpu";
  v1beta1::ContainerAllocateResponse response;
  BuildContainerResponse(TwoGpuGrant(), paths, &response);
  std::map<std::string, std::pair<std::string, bool>> mounts;
  for (const auto& mount : response.mounts()) mounts[mount.container_path()] = {mount.host_path(), mount.read_only()};
  EXPECT_EQ(mounts.at("/usr/local/vgpu/libvgpu.so"), std::make_pair(std::string("/usr/local/vgpu/libvgpu.so"), true));
  EXPECT_EQ(mounts.at("/etc/ld.so.preload"), std::make_pair(std::string("/usr/local/vgpu/ld.so.preload"), true));
  EXPECT_EQ(mounts.at("/var/lib/vgpu/container"), std::make_pair(std::string("/srv/vgpu/containers/0b1c2d3e-uid_trainer"), false));
  EXPECT_EQ(mounts.at("/var/lib/vgpu/vgpu.sock").first, "/srv/vgpu/vgpu.sock");
  EXPECT_EQ(mounts.at("/var/lib/vgpu/board").first, "/srv/vgpu/board");
  EXPECT_EQ(response.envs().at("CUDA_DEVICE_MEMORY_LIMIT_0"), "2048m");

  ContainerGrant disabled = TwoGpuGrant();
  disabled.skip_preload = true;
  v1beta1::ContainerAllocateResponse without;
  BuildContainerResponse(disabled, paths, &without);
  for (const auto& mount : without.mounts()) EXPECT_NE(mount.container_path(), "/etc/ld.so.preload");
  EXPECT_EQ(without.mounts_size(), response.mounts_size() - 1);

  ContainerGrant unregistered = TwoGpuGrant();
  unregistered.register_with_daemon = false;
  v1beta1::ContainerAllocateResponse quiet;
  BuildContainerResponse(unregistered, paths, &quiet);
  for (const auto& mount : quiet.mounts()) EXPECT_NE(mount.container_path(), "/var/lib/vgpu/vgpu.sock");
  EXPECT_EQ(quiet.envs().count("VGPU_SOCKET"), 0u);
  EXPECT_EQ(quiet.envs().count("CUDA_DEVICE_MEMORY_SHARED_CACHE"), 1u);
}

TEST(ContainerGrantTest, KeysAreOnePathComponent) {
  EXPECT_TRUE(ValidateContainerKey("8a3f-uid_main").ok);
  EXPECT_TRUE(ValidateContainerKey("standalone-00ff").ok);
  for (const char* bad : {"", ".", "..", "a/b", "a b", "../x"}) EXPECT_FALSE(ValidateContainerKey(bad).ok) << bad;
}

TEST(ContainerGrantTest, TooManyGpusIsAnError) {
  ContainerGrant grant;
  grant.key = "k";
  for (int i = 0; i < 17; ++i) grant.gpus.push_back({"GPU-" + std::to_string(i), kGiB, 0});
  ledger::LimitSet limits;
  Status status = GrantLimits(grant, &limits);
  EXPECT_FALSE(status.ok);
  EXPECT_NE(status.message.find("17 GPUs"), std::string::npos);
}

}  // namespace
}  // namespace vgpu::k8s
