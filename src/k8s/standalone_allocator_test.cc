#include "k8s/standalone_allocator.h"

#include <gtest/gtest.h>

#include <map>

#include "k8s/standalone_lifetime.h"
#include "k8s/virtual_devices.h"

namespace vgpu::k8s {
namespace {

constexpr uint64_t kGiB = 1024ull * 1024 * 1024;

class RecordingStore : public ContainerStore {
 public:
  Status Prepare(const ContainerGrant& grant, const ledger::LimitSet& limits) override {
    const std::string& key = grant.key;
    prepared[key] = limits;
    ++calls;
    return Status::Ok();
  }
  std::map<std::string, ledger::LimitSet> prepared;
  int calls = 0;
};

class StandaloneAllocatorTest : public ::testing::Test {
 protected:
  StandaloneAllocatorTest() {
    StandaloneOptions options;
    options.pairing_window = std::chrono::milliseconds(1000);
    options.now = [this] { return now_; };
    options.new_key = [this](StandaloneKind, const std::vector<std::string>&) { return "standalone-" + std::to_string(++keys_); };
    allocator_ = std::make_unique<StandaloneAllocator>(options, &store_);
  }

  v1beta1::AllocateRequest Units(const GpuInfo& gpu, int from, int count) {
    v1beta1::AllocateRequest request;
    auto* container = request.add_container_requests();
    for (int n = from; n < from + count; ++n) container->add_devices_ids(UnitId(UnitIdStyle::kUuidUnderscore, gpu, n));
    return request;
  }

  std::map<std::string, std::string> Allocate(StandaloneKind kind, const v1beta1::AllocateRequest& request,
                                               Status* status = nullptr) {
    v1beta1::AllocateResponse response;
    Status result = allocator_->Allocate(kind, gpus_, request, &response);
    if (status != nullptr) *status = result;
    if (!result.ok || response.container_responses_size() != 1) return {};
    return {response.container_responses(0).envs().begin(), response.container_responses(0).envs().end()};
  }

  std::vector<GpuInfo> gpus_ = {{"GPU-aaaa", 0, 80 * kGiB + 512 * 1024 * 1024, "NVIDIA A100", 0, true},
                                {"GPU-bbbb", 1, 80 * kGiB, "NVIDIA A100", 0, true}};
  std::chrono::steady_clock::time_point now_ = std::chrono::steady_clock::now();
  int keys_ = 0;
  RecordingStore store_;
  std::unique_ptr<StandaloneAllocator> allocator_;
};

// Without a key source the pod uid is StandaloneKey of the first half's resource and device IDs,
// so the kubelet's pod resources list names the container that holds it.
TEST(StandaloneAllocatorKeyTest, DefaultKeyIsDerivedFromTheFirstHalf) {
  RecordingStore store;
  StandaloneOptions options;
  options.memory_resource = "alnair/vgpu-memory";
  options.compute_resource = "alnair/vgpu-compute";
  StandaloneAllocator allocator(options, &store);
  const std::vector<GpuInfo> gpus = {{"GPU-aaaa", 0, 16 * kGiB, "NVIDIA A100", 0, true}};
  v1beta1::AllocateRequest request;
  auto* container = request.add_container_requests();
  for (int n : {3, 1, 2}) container->add_devices_ids(UnitId(UnitIdStyle::kUuidUnderscore, gpus[0], n));
  v1beta1::AllocateResponse response;
  ASSERT_TRUE(allocator.Allocate(StandaloneKind::kCompute, gpus, request, &response).ok);
  const std::string uid = StandaloneKey("alnair/vgpu-compute", {UnitId(UnitIdStyle::kUuidUnderscore, gpus[0], 1),
                                                                UnitId(UnitIdStyle::kUuidUnderscore, gpus[0], 2),
                                                                UnitId(UnitIdStyle::kUuidUnderscore, gpus[0], 3)});
  EXPECT_EQ(store.prepared.count(uid + "_vgpu"), 1u);
  EXPECT_EQ(response.container_responses(0).envs().at("VGPU_POD_UID"), uid);
}

TEST_F(StandaloneAllocatorTest, UnitsPerGpu) {
  EXPECT_EQ(StandaloneUnits(StandaloneKind::kMemory, gpus_[0]), 80);  // whole GiB only
  EXPECT_EQ(StandaloneUnits(StandaloneKind::kCompute, gpus_[0]), 100);
}

// The Alnair seed's pod spec: alnair/vgpu-memory: 2, alnair/vgpu-compute: 50 -> a 2 GiB / 50% vGPU.
TEST_F(StandaloneAllocatorTest, AlnairPodGetsTwoGiBAndFiftyPercentInEitherOrder) {
  for (bool memory_first : {true, false}) {
    SCOPED_TRACE(memory_first ? "memory first" : "compute first");
    const auto first_kind = memory_first ? StandaloneKind::kMemory : StandaloneKind::kCompute;
    const auto second_kind = memory_first ? StandaloneKind::kCompute : StandaloneKind::kMemory;
    const int first_units = memory_first ? 2 : 50;
    const int second_units = memory_first ? 50 : 2;
    auto first = Allocate(first_kind, Units(gpus_[1], 0, first_units));
    EXPECT_EQ(first["NVIDIA_VISIBLE_DEVICES"], "GPU-bbbb");
    EXPECT_EQ(allocator_->PreferredGpu(second_kind), "GPU-bbbb");
    EXPECT_EQ(allocator_->PreferredGpu(first_kind), "");
    now_ += std::chrono::milliseconds(5);
    auto second = Allocate(second_kind, Units(gpus_[1], 10, second_units));
    EXPECT_EQ(second["NVIDIA_VISIBLE_DEVICES"], "GPU-bbbb");
    // The container's environment is the union of both answers (the kubelet merges them).
    std::map<std::string, std::string> env = first;
    env.insert(second.begin(), second.end());
    EXPECT_EQ(env["CUDA_DEVICE_MEMORY_LIMIT_0"], "2048m");
    EXPECT_EQ(env["CUDA_DEVICE_SM_LIMIT_0"], "50");
    EXPECT_EQ(first["CUDA_DEVICE_MEMORY_SHARED_CACHE"], second["CUDA_DEVICE_MEMORY_SHARED_CACHE"]);
    EXPECT_EQ(env.count("VGPU_SOCKET"), 0u) << "standalone processes do not register";
    // One ledger, rewritten with both halves.
    const std::string key = "standalone-" + std::to_string(keys_) + "_vgpu";
    ASSERT_EQ(store_.prepared.count(key), 1u);
    const ledger::LimitSet& limits = store_.prepared[key];
    ASSERT_EQ(limits.devices.size(), 1u);
    EXPECT_EQ(limits.devices[0].memory_limit, 2 * kGiB);
    EXPECT_EQ(limits.devices[0].sm_limit, 50);
    EXPECT_EQ(allocator_->PreferredGpu(first_kind), "");
    EXPECT_EQ(allocator_->PreferredGpu(second_kind), "");
    now_ += std::chrono::seconds(10);
  }
  EXPECT_EQ(keys_, 2);
}

TEST_F(StandaloneAllocatorTest, OnlyOneResourceGivesOnlyThatLimit) {
  auto memory = Allocate(StandaloneKind::kMemory, Units(gpus_[0], 0, 3));
  EXPECT_EQ(memory["CUDA_DEVICE_MEMORY_LIMIT_0"], "3072m");
  EXPECT_EQ(memory.count("CUDA_DEVICE_SM_LIMIT_0"), 0u);
  now_ += std::chrono::seconds(2);  // past the pairing window
  auto compute = Allocate(StandaloneKind::kCompute, Units(gpus_[0], 0, 30));
  EXPECT_EQ(compute["CUDA_DEVICE_SM_LIMIT_0"], "30");
  EXPECT_EQ(compute.count("CUDA_DEVICE_MEMORY_LIMIT_0"), 0u);
  EXPECT_EQ(keys_, 2);  // two containers, two ledgers
}

TEST_F(StandaloneAllocatorTest, TwoMemoryAllocationsAreTwoContainers) {
  Allocate(StandaloneKind::kMemory, Units(gpus_[0], 0, 1));
  Allocate(StandaloneKind::kMemory, Units(gpus_[0], 1, 1));
  EXPECT_EQ(keys_, 2);
}

TEST_F(StandaloneAllocatorTest, HalvesOnDifferentGpusFail) {
  Allocate(StandaloneKind::kMemory, Units(gpus_[0], 0, 2));
  Status status;
  auto env = Allocate(StandaloneKind::kCompute, Units(gpus_[1], 0, 50), &status);
  EXPECT_FALSE(status.ok);
  EXPECT_NE(status.message.find("must be on one GPU"), std::string::npos) << status.message;
  EXPECT_TRUE(env.empty());
}

TEST_F(StandaloneAllocatorTest, AFailedCallEndsTheOpenAllocation) {
  Allocate(StandaloneKind::kMemory, Units(gpus_[0], 0, 2));
  gpus_[1].healthy = false;
  Status status;
  Allocate(StandaloneKind::kCompute, Units(gpus_[1], 0, 50), &status);  // this container fails
  EXPECT_FALSE(status.ok);
  gpus_[1].healthy = true;
  auto next = Allocate(StandaloneKind::kCompute, Units(gpus_[0], 0, 30), &status);  // the next container
  ASSERT_TRUE(status.ok) << status.message;
  EXPECT_EQ(next.count("CUDA_DEVICE_MEMORY_LIMIT_0"), 0u) << "must not join the first container's memory";
  EXPECT_EQ(keys_, 2);
}

TEST_F(StandaloneAllocatorTest, UnitsSpanningGpusFail) {
  v1beta1::AllocateRequest request = Units(gpus_[0], 0, 1);
  request.mutable_container_requests(0)->add_devices_ids(UnitId(UnitIdStyle::kUuidUnderscore, gpus_[1], 0));
  Status status;
  Allocate(StandaloneKind::kMemory, request, &status);
  EXPECT_FALSE(status.ok);
  EXPECT_NE(status.message.find("span GPUs"), std::string::npos) << status.message;
  EXPECT_EQ(store_.calls, 0);
}

TEST_F(StandaloneAllocatorTest, UnknownUnitsAndUnhealthyGpusFail) {
  v1beta1::AllocateRequest request;
  request.add_container_requests()->add_devices_ids("GPU-zzzz_0");
  Status status;
  Allocate(StandaloneKind::kMemory, request, &status);
  EXPECT_FALSE(status.ok);
  EXPECT_NE(status.message.find("GPU-zzzz_0"), std::string::npos);
  gpus_[1].healthy = false;
  Allocate(StandaloneKind::kMemory, Units(gpus_[1], 0, 1), &status);
  EXPECT_FALSE(status.ok);
  EXPECT_NE(status.message.find("unhealthy"), std::string::npos);
  EXPECT_EQ(store_.calls, 0);
}

}  // namespace
}  // namespace vgpu::k8s
