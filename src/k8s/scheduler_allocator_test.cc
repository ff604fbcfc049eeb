#include "k8s/scheduler_allocator.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>

#include "k8s/api_access.h"
#include "k8s/fake_kube_api.h"

namespace vgpu::k8s {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;
const char kNode[] = "gpu-node-1";
const char kLockTime[] = "2026-11-21T09:30:05Z";

// Records what the allocator asks the daemon to write.
class RecordingStore : public ContainerStore {
 public:
  Status Prepare(const ContainerGrant& grant, const ledger::LimitSet& limits) override {
    const std::string& key = grant.key;
    if (fail) return Status::Error("disk full (injected)");
    prepared[key] = limits;
    grants[key] = grant;
    return Status::Ok();
  }
  std::map<std::string, ledger::LimitSet> prepared;
  std::map<std::string, ContainerGrant> grants;
  bool fail = false;
};

Json Pod(const std::string& ns, const std::string& name, const std::string& uid, std::vector<std::string> containers,
         std::vector<std::string> init = {}) {
  Json pod = {{"metadata", {{"namespace", ns}, {"name", name}, {"uid", uid}, {"annotations", Json::object()}}},
              {"spec", {{"nodeName", kNode}, {"containers", Json::array()}}},
              {"status", {{"phase", "Pending"}}}};
  for (const auto& c : containers) pod["spec"]["containers"].push_back({{"name", c}});
  if (!init.empty()) {
    pod["spec"]["initContainers"] = Json::array();
    for (const auto& c : init) pod["spec"]["initContainers"].push_back({{"name", c}});
  }
  return pod;
}

v1beta1::AllocateRequest Request(std::vector<int> devices_per_container) {
  v1beta1::AllocateRequest request;
  int n = 0;
  for (int count : devices_per_container) {
    auto* container = request.add_container_requests();
    for (int i = 0; i < count; ++i) container->add_devices_ids("GPU-aaaa-" + std::to_string(n++));
  }
  return request;
}

class SchedulerAllocatorTest : public ::testing::Test {
 protected:
  // Before each PATCH of pod team/train that `race` selects by its index (0 = the first),
  // someone else writes the pod, so a PATCH guarded by the version read before it conflicts.
  // pod_patches_ counts every PATCH of that pod.
  void WriteThePodBefore(std::function<bool(int index)> race) {
    api_.SetBeforePatch([this, race](const std::string& path) {
      if (path != PodPath("team", "train") || !race(pod_patches_++)) return;
      Json pod = *api_.Object(path);
      pod["metadata"]["annotations"]["example.com/other"] = std::to_string(pod_patches_);
      api_.Put(path, pod);
    });
  }

  void SetUpProtocol(const SchedulerProtocol& protocol, int memory_factor = 1) {
    protocol_ = &protocol;
    SchedulerAllocatorOptions options;
    options.protocol = &protocol;
    options.node_name = kNode;
    options.paths.state_dir = "/srv/vgpu";
    options.memory_factor = memory_factor;
    allocator_ = std::make_unique<SchedulerAllocator>(options, &api_, &store_);
    api_.Put(NodePath(kNode), {{"metadata", {{"name", kNode}, {"annotations", Json::object()}}}});
  }

  void AddPod(Json pod, const std::string& devices, const std::string& phase = "allocating") {
    const std::string path = PodPath(pod["metadata"]["namespace"], pod["metadata"]["name"]);
    pod["metadata"]["annotations"][protocol_->devices_to_allocate] = devices;
    pod["metadata"]["annotations"][protocol_->assigned_node] = kNode;
    pod["metadata"]["annotations"][protocol_->bind_phase] = phase;
    api_.Put(path, pod);
  }

  void Lock(const std::string& value) {
    Json node = *api_.Object(NodePath(kNode));
    node["metadata"]["annotations"][protocol_->lock_annotation] = value;
    api_.Put(NodePath(kNode), node);
  }
  std::string LockValue() { return api_.Annotation(NodePath(kNode), protocol_->lock_annotation); }
  std::string PodAnnotation(const std::string& pod, const std::string& key) {
    return api_.Annotation(PodPath("team", pod), key);
  }

  Status Allocate(const v1beta1::AllocateRequest& request, v1beta1::AllocateResponse* response) {
    return allocator_->Allocate(gpus_, request, response);
  }

  std::vector<GpuInfo> gpus_ = {{"GPU-a", 0, 80ull << 30, "NVIDIA H200", 0, true},
                                {"GPU-b", 1, 80ull << 30, "NVIDIA H200", 1, true}};
  const SchedulerProtocol* protocol_ = nullptr;
  FakeKubeApi api_;
  RecordingStore store_;
  std::unique_ptr<SchedulerAllocator> allocator_;
  int pod_patches_ = 0;
};

std::map<std::string, std::string> Envs(const v1beta1::ContainerAllocateResponse& response) {
  return {response.envs().begin(), response.envs().end()};
}

bool MountsPreload(const v1beta1::ContainerAllocateResponse& response) {
  for (const auto& mount : response.mounts()) {
    if (mount.container_path() == "/etc/ld.so.preload") return true;
  }
  return false;
}

TEST_F(SchedulerAllocatorTest, HamiServesThePodNamedByTheLockAndFinishesTheBind) {
  SetUpProtocol(kHamiProtocol);
  AddPod(Pod("team", "train", "uid-1", {"main"}), "GPU-b,NVIDIA,1000,30:;");
  Lock(std::string(kLockTime) + ",team,train");
  v1beta1::AllocateResponse response;
  Status status = Allocate(Request({1}), &response);
  ASSERT_TRUE(status.ok) << status.message;
  ASSERT_EQ(response.container_responses_size(), 1);
  auto env = Envs(response.container_responses(0));
  EXPECT_EQ(env["NVIDIA_VISIBLE_DEVICES"], "GPU-b");
  EXPECT_EQ(env["CUDA_DEVICE_MEMORY_LIMIT_0"], "1000m");
  EXPECT_EQ(env["CUDA_DEVICE_SM_LIMIT_0"], "30");
  EXPECT_EQ(env["VGPU_POD_UID"], "uid-1");
  EXPECT_EQ(env["VGPU_CONTAINER_NAME"], "main");
  EXPECT_TRUE(MountsPreload(response.container_responses(0)));
  // The entry was popped, the bind finished, the lock released.
  EXPECT_EQ(PodAnnotation("train", "hami.io/vgpu-devices-to-allocate"), ";");
  EXPECT_EQ(PodAnnotation("train", "hami.io/bind-phase"), "success");
  EXPECT_FALSE(api_.HasAnnotation(NodePath(kNode), "hami.io/mutex.lock"));
  ASSERT_EQ(store_.prepared.count("uid-1_main"), 1u);
  const ledger::LimitSet& limits = store_.prepared["uid-1_main"];
  EXPECT_EQ(limits.authority, ledger::Authority::kNodeDaemon);
  ASSERT_EQ(limits.devices.size(), 1u);
  EXPECT_EQ(limits.devices[0].memory_limit, 1000 * kMiB);
  EXPECT_EQ(limits.devices[0].sm_limit, 30);
  EXPECT_EQ(store_.grants["uid-1_main"].pod_namespace, "team");
  EXPECT_EQ(store_.grants["uid-1_main"].pod_name, "train");
}

TEST_F(SchedulerAllocatorTest, HamiEntriesFollowInitContainersThenContainers) {
  SetUpProtocol(kHamiProtocol);
  AddPod(Pod("team", "multi", "uid-2", {"a", "b"}, {"setup"}),
         ";GPU-a,NVIDIA,2000,0:;GPU-b,NVIDIA,3000,50:GPU-a,NVIDIA,3000,50:;");
  Lock(std::string(kLockTime) + ",team,multi");
  v1beta1::AllocateResponse first;
  ASSERT_TRUE(Allocate(Request({1}), &first).ok);
  EXPECT_EQ(Envs(first.container_responses(0))["VGPU_CONTAINER_NAME"], "a");
  EXPECT_EQ(Envs(first.container_responses(0)).count("CUDA_DEVICE_SM_LIMIT_0"), 0u);
  // Not finished yet: the lock stays and the phase is still allocating.
  EXPECT_EQ(PodAnnotation("multi", "hami.io/bind-phase"), "allocating");
  EXPECT_EQ(LockValue(), std::string(kLockTime) + ",team,multi");
  EXPECT_EQ(PodAnnotation("multi", "hami.io/vgpu-devices-to-allocate"), ";;GPU-b,NVIDIA,3000,50:GPU-a,NVIDIA,3000,50:;");

  v1beta1::AllocateResponse second;
  ASSERT_TRUE(Allocate(Request({2}), &second).ok);
  auto env = Envs(second.container_responses(0));
  EXPECT_EQ(env["VGPU_CONTAINER_NAME"], "b");
  EXPECT_EQ(env["NVIDIA_VISIBLE_DEVICES"], "GPU-b,GPU-a");
  EXPECT_EQ(env["CUDA_DEVICE_MEMORY_LIMIT_1"], "3000m");
  EXPECT_EQ(PodAnnotation("multi", "hami.io/bind-phase"), "success");
  EXPECT_FALSE(api_.HasAnnotation(NodePath(kNode), "hami.io/mutex.lock"));
}

TEST_F(SchedulerAllocatorTest, TwoPendingPodsNeverGetEachOthersDevices) {
  SetUpProtocol(kHamiProtocol);
  AddPod(Pod("team", "pod-a", "uid-a", {"main"}), "GPU-a,NVIDIA,1000,10:;");
  AddPod(Pod("team", "pod-b", "uid-b", {"main"}), "GPU-b,NVIDIA,2000,20:;");
  Lock(std::string(kLockTime) + ",team,pod-b");
  v1beta1::AllocateResponse for_b;
  ASSERT_TRUE(Allocate(Request({1}), &for_b).ok);
  EXPECT_EQ(Envs(for_b.container_responses(0))["NVIDIA_VISIBLE_DEVICES"], "GPU-b");
  EXPECT_EQ(Envs(for_b.container_responses(0))["VGPU_POD_UID"], "uid-b");
  EXPECT_EQ(PodAnnotation("pod-a", "hami.io/vgpu-devices-to-allocate"), "GPU-a,NVIDIA,1000,10:;");
  EXPECT_EQ(PodAnnotation("pod-a", "hami.io/bind-phase"), "allocating");
  // The scheduler has not locked the node for pod-a yet: the next Allocate is refused.
  v1beta1::AllocateResponse unlocked;
  Status refused = Allocate(Request({1}), &unlocked);
  EXPECT_FALSE(refused.ok);
  EXPECT_NE(refused.message.find("refusing to guess"), std::string::npos) << refused.message;
  EXPECT_EQ(unlocked.container_responses_size(), 0);
  Lock(std::string(kLockTime) + ",team,pod-a");
  v1beta1::AllocateResponse for_a;
  ASSERT_TRUE(Allocate(Request({1}), &for_a).ok);
  EXPECT_EQ(Envs(for_a.container_responses(0))["NVIDIA_VISIBLE_DEVICES"], "GPU-a");
  EXPECT_EQ(Envs(for_a.container_responses(0))["VGPU_POD_UID"], "uid-a");
}

TEST_F(SchedulerAllocatorTest, MalformedAnnotationFailsMarksTheBindAndReleasesTheLock) {
  SetUpProtocol(kHamiProtocol);
  AddPod(Pod("team", "bad", "uid-3", {"main"}), "GPU-a,NVIDIA,lots,30:;");
  Lock(std::string(kLockTime) + ",team,bad");
  v1beta1::AllocateResponse response;
  Status status = Allocate(Request({1}), &response);
  ASSERT_FALSE(status.ok);
  EXPECT_NE(status.message.find("team/bad"), std::string::npos) << status.message;
  EXPECT_NE(status.message.find("hami.io/vgpu-devices-to-allocate"), std::string::npos) << status.message;
  EXPECT_NE(status.message.find("memory \"lots\""), std::string::npos) << status.message;
  EXPECT_NE(status.message.find("set to failed"), std::string::npos) << status.message;
  EXPECT_NE(status.message.find("released"), std::string::npos) << status.message;
  EXPECT_EQ(response.container_responses_size(), 0);
  EXPECT_EQ(PodAnnotation("bad", "hami.io/bind-phase"), "failed");
  EXPECT_FALSE(api_.HasAnnotation(NodePath(kNode), "hami.io/mutex.lock"));
  EXPECT_TRUE(store_.prepared.empty());
}

TEST_F(SchedulerAllocatorTest, EveryBadEntryFailsTheSameWay) {
  struct Case {
    std::string devices;
    int kubelet_devices;
    std::string expect;
  };
  const Case cases[] = {
      {"GPU-a,NVIDIA,1000,30:;", 2, "the kubelet allocates 2"},
      {"GPU-z,NVIDIA,1000,30:;", 1, "not on node"},
      {"GPU-a,NVIDIA,0,30:;", 1, "0 memory"},
      {"GPU-a,NVIDIA,1000,30:GPU-a,NVIDIA,1000,30:;", 2, "twice"},
      {";", 1, "no NVIDIA device left"},
      {"GPU-a,NVIDIA,1:;", 1, "malformed"},
      {";;GPU-a,NVIDIA,1000,30:;", 1, "lists 3 containers but the pod has 1"},
  };
  SetUpProtocol(kHamiProtocol);
  int n = 0;
  for (const Case& c : cases) {
    const std::string name = "p" + std::to_string(n++);
    AddPod(Pod("team", name, "uid-" + name, {"main"}), c.devices);
    Lock(std::string(kLockTime) + ",team," + name);
    v1beta1::AllocateResponse response;
    Status status = Allocate(Request({c.kubelet_devices}), &response);
    EXPECT_FALSE(status.ok) << c.devices;
    EXPECT_NE(status.message.find(c.expect), std::string::npos) << status.message;
    EXPECT_EQ(PodAnnotation(name, "hami.io/bind-phase"), "failed") << c.devices;
    EXPECT_EQ(PodAnnotation(name, "hami.io/vgpu-devices-to-allocate"), c.devices) << "nothing popped";
    EXPECT_FALSE(api_.HasAnnotation(NodePath(kNode), "hami.io/mutex.lock")) << c.devices;
  }
}

TEST_F(SchedulerAllocatorTest, UnhealthyGpuIsRefused) {
  SetUpProtocol(kHamiProtocol);
  gpus_[0].healthy = false;
  AddPod(Pod("team", "sick", "uid-4", {"main"}), "GPU-a,NVIDIA,1000,30:;");
  Lock(std::string(kLockTime) + ",team,sick");
  v1beta1::AllocateResponse response;
  Status status = Allocate(Request({1}), &response);
  EXPECT_FALSE(status.ok);
  EXPECT_NE(status.message.find("unhealthy"), std::string::npos);
}

TEST_F(SchedulerAllocatorTest, WithoutALockNothingIsTouched) {
  SetUpProtocol(kHamiProtocol);
  AddPod(Pod("team", "train", "uid-1", {"main"}), "GPU-b,NVIDIA,1000,30:;");
  v1beta1::AllocateResponse response;
  Status status = Allocate(Request({1}), &response);
  EXPECT_FALSE(status.ok);
  EXPECT_EQ(api_.calls("PATCH"), 0);
  EXPECT_EQ(PodAnnotation("train", "hami.io/bind-phase"), "allocating");
}

TEST_F(SchedulerAllocatorTest, MalformedLockIsReportedAndLeftAlone) {
  SetUpProtocol(kHamiProtocol);
  Lock(kLockTime);  // an old HAMi lock without the pod
  v1beta1::AllocateResponse response;
  Status status = Allocate(Request({1}), &response);
  EXPECT_FALSE(status.ok);
  EXPECT_NE(status.message.find("hami.io/mutex.lock"), std::string::npos) << status.message;
  EXPECT_EQ(LockValue(), kLockTime);
  EXPECT_EQ(api_.calls("PATCH"), 0);
}

TEST_F(SchedulerAllocatorTest, PodNotFoundReleasesTheLock) {
  SetUpProtocol(kHamiProtocol);
  Lock(std::string(kLockTime) + ",team,gone");
  v1beta1::AllocateResponse response;
  Status status = Allocate(Request({1}), &response);
  ASSERT_FALSE(status.ok);
  EXPECT_NE(status.message.find("cannot read pod team/gone: HTTP 404"), std::string::npos) << status.message;
  EXPECT_FALSE(api_.HasAnnotation(NodePath(kNode), "hami.io/mutex.lock"));
}

TEST_F(SchedulerAllocatorTest, ApiDownFailsWithAReason) {
  SetUpProtocol(kHamiProtocol);
  AddPod(Pod("team", "train", "uid-1", {"main"}), "GPU-b,NVIDIA,1000,30:;");
  Lock(std::string(kLockTime) + ",team,train");
  api_.FailNext("", "/", 100, 0);
  v1beta1::AllocateResponse response;
  Status status = Allocate(Request({1}), &response);
  EXPECT_FALSE(status.ok);
  EXPECT_NE(status.message.find("no answer from the API server"), std::string::npos) << status.message;
  EXPECT_EQ(response.container_responses_size(), 0);
}

TEST_F(SchedulerAllocatorTest, PatchFailuresAreReportedTogether) {
  SetUpProtocol(kHamiProtocol);
  AddPod(Pod("team", "train", "uid-1", {"main"}), "GPU-b,NVIDIA,1000,30:;");
  Lock(std::string(kLockTime) + ",team,train");
  api_.FailNext("PATCH", PodPath("team", "train"), 100, 500);
  v1beta1::AllocateResponse response;
  Status status = Allocate(Request({1}), &response);
  ASSERT_FALSE(status.ok);
  EXPECT_NE(status.message.find("HTTP 500"), std::string::npos) << status.message;
  EXPECT_NE(status.message.find("could not set hami.io/bind-phase=failed"), std::string::npos) << status.message;
  EXPECT_FALSE(api_.HasAnnotation(NodePath(kNode), "hami.io/mutex.lock"));
}

TEST_F(SchedulerAllocatorTest, ConflictingWriteIsRetriedOnTheFreshPod) {
  SetUpProtocol(kHamiProtocol);
  AddPod(Pod("team", "train", "uid-1", {"main"}), "GPU-b,NVIDIA,1000,30:;");
  Lock(std::string(kLockTime) + ",team,train");
  WriteThePodBefore([](int index) { return index == 0; });  // between our GET and our first PATCH
  v1beta1::AllocateResponse response;
  Status status = Allocate(Request({1}), &response);
  ASSERT_TRUE(status.ok) << status.message;
  EXPECT_EQ(PodAnnotation("train", "hami.io/vgpu-devices-to-allocate"), ";");
  EXPECT_EQ(PodAnnotation("train", "example.com/other"), "1");
  EXPECT_EQ(PodAnnotation("train", "hami.io/bind-phase"), "success");
  // pop refused with 409, pop again on the fresh pod, bind-phase.
  EXPECT_EQ(pod_patches_, 3);
}

// Once the entry is popped, writes to the pod before every further PATCH do not keep
// bind-phase from "success" (it is not guarded by resourceVersion; the pop is).
TEST_F(SchedulerAllocatorTest, BindPhaseIsSetWhileThePodKeepsChanging) {
  SetUpProtocol(kHamiProtocol);
  AddPod(Pod("team", "train", "uid-1", {"main"}), "GPU-b,NVIDIA,1000,30:;");
  Lock(std::string(kLockTime) + ",team,train");
  WriteThePodBefore([](int index) { return index > 0; });  // the pop goes through, then every PATCH races
  v1beta1::AllocateResponse response;
  ASSERT_TRUE(Allocate(Request({1}), &response).ok);
  EXPECT_EQ(PodAnnotation("train", "hami.io/vgpu-devices-to-allocate"), ";");
  EXPECT_EQ(PodAnnotation("train", "hami.io/bind-phase"), "success");
  EXPECT_FALSE(api_.HasAnnotation(NodePath(kNode), "hami.io/mutex.lock"));
}

TEST_F(SchedulerAllocatorTest, ALockTakenForAnotherPodIsNotReleased) {
  SetUpProtocol(kHamiProtocol);
  AddPod(Pod("team", "bad", "uid-3", {"main"}), "junk;");
  Lock(std::string(kLockTime) + ",team,bad");
  api_.SetBeforePatch([&](const std::string& path) {
    if (path == PodPath("team", "bad")) Lock(std::string(kLockTime) + ",team,next");
  });
  v1beta1::AllocateResponse response;
  EXPECT_FALSE(Allocate(Request({1}), &response).ok);
  EXPECT_EQ(LockValue(), std::string(kLockTime) + ",team,next");
}

TEST_F(SchedulerAllocatorTest, LedgerFailureFailsTheBind) {
  SetUpProtocol(kHamiProtocol);
  store_.fail = true;
  AddPod(Pod("team", "train", "uid-1", {"main"}), "GPU-b,NVIDIA,1000,30:;");
  Lock(std::string(kLockTime) + ",team,train");
  v1beta1::AllocateResponse response;
  Status status = Allocate(Request({1}), &response);
  ASSERT_FALSE(status.ok);
  EXPECT_NE(status.message.find("disk full"), std::string::npos);
  EXPECT_EQ(PodAnnotation("train", "hami.io/bind-phase"), "failed");
}

TEST_F(SchedulerAllocatorTest, DisableControlInThePodSpecSkipsThePreload) {
  SetUpProtocol(kHamiProtocol);
  Json pod = Pod("team", "raw", "uid-5", {"main"});
  pod["spec"]["containers"][0]["env"] = {{{"name", "CUDA_DISABLE_CONTROL"}, {"value", "true"}}};
  AddPod(pod, "GPU-a,NVIDIA,1000,30:;");
  Lock(std::string(kLockTime) + ",team,raw");
  v1beta1::AllocateResponse response;
  ASSERT_TRUE(Allocate(Request({1}), &response).ok);
  EXPECT_FALSE(MountsPreload(response.container_responses(0)));
}

TEST_F(SchedulerAllocatorTest, VolcanoServesTheOneAllocatingPodWithItsMemoryFactor) {
  SetUpProtocol(kVolcanoProtocol, /*memory_factor=*/4);
  AddPod(Pod("team", "vc", "uid-v", {"main"}), "GPU-b,NVIDIA,1000,40:");
  AddPod(Pod("team", "done", "uid-d", {"main"}), "", "success");
  Lock(kLockTime);
  v1beta1::AllocateResponse response;
  Status status = Allocate(Request({1}), &response);
  ASSERT_TRUE(status.ok) << status.message;
  auto env = Envs(response.container_responses(0));
  EXPECT_EQ(env["NVIDIA_VISIBLE_DEVICES"], "GPU-b");
  EXPECT_EQ(env["CUDA_DEVICE_MEMORY_LIMIT_0"], "4000m");
  EXPECT_EQ(env["CUDA_DEVICE_SM_LIMIT_0"], "40");
  EXPECT_EQ(PodAnnotation("vc", "volcano.sh/devices-to-allocate"), "");
  EXPECT_EQ(PodAnnotation("vc", "volcano.sh/bind-phase"), "success");
  EXPECT_FALSE(api_.HasAnnotation(NodePath(kNode), "hamivgpu"));
}

TEST_F(SchedulerAllocatorTest, VolcanoRefusesToGuessBetweenTwoAllocatingPods) {
  SetUpProtocol(kVolcanoProtocol);
  AddPod(Pod("team", "one", "uid-1", {"main"}), "GPU-a,NVIDIA,1000,40:");
  AddPod(Pod("team", "two", "uid-2", {"main"}), "GPU-b,NVIDIA,1000,40:");
  Lock(kLockTime);
  v1beta1::AllocateResponse response;
  Status status = Allocate(Request({1}), &response);
  ASSERT_FALSE(status.ok);
  EXPECT_NE(status.message.find("refusing to guess"), std::string::npos) << status.message;
  EXPECT_EQ(PodAnnotation("one", "volcano.sh/devices-to-allocate"), "GPU-a,NVIDIA,1000,40:");
  EXPECT_EQ(PodAnnotation("two", "volcano.sh/devices-to-allocate"), "GPU-b,NVIDIA,1000,40:");
  EXPECT_FALSE(api_.HasAnnotation(NodePath(kNode), "hamivgpu"));
}

TEST_F(SchedulerAllocatorTest, VolcanoWithoutAPendingPodFails) {
  SetUpProtocol(kVolcanoProtocol);
  v1beta1::AllocateResponse response;
  Status status = Allocate(Request({1}), &response);
  ASSERT_FALSE(status.ok);
  EXPECT_NE(status.message.find("no pod on node"), std::string::npos) << status.message;
}

// The RBAC table (api_access.h) maps every path the client builds to the access deploy/ grants,
// and the fake refuses what the table does not grant.
TEST(ApiAccess, ClientPathsMapToTheTable) {
  auto access = [](const char* method, const std::string& path) {
    const RequestAccess a = AccessOf(method, path);
    return a.verb + " " + a.resource + (AccessAllowed(a) ? "" : " (denied)");
  };
  EXPECT_EQ(access("GET", NodePath("n1")), "get nodes");
  EXPECT_EQ(access("PATCH", NodePath("n1")), "patch nodes");
  EXPECT_EQ(access("WATCH", NodeWatchPath("n1", "7", 60)), "watch nodes");
  EXPECT_EQ(access("GET", NodeWatchPath("n1", "", 60)), "watch nodes");
  EXPECT_EQ(access("GET", PodPath("team", "p")), "get pods");
  EXPECT_EQ(access("PATCH", PodPath("team", "p")), "patch pods");
  EXPECT_EQ(access("GET", PodsOnNodePath("n1")), "list pods");
  EXPECT_EQ(access("GET", "/api/v1/nodes"), "list nodes (denied)");
  EXPECT_EQ(access("PATCH", "/api/v1/namespaces/team/pods/p/status"), "patch pods/status (denied)");
  EXPECT_EQ(access("GET", "/apis/apps/v1/daemonsets"), "GET  (denied)");

  FakeKubeApi api;
  api.Put("/api/v1/nodes/n1", Json{{"metadata", {{"name", "n1"}}}});
  EXPECT_TRUE(api.Get(NodePath("n1")).ok());
  const ApiResponse denied = api.Get("/api/v1/nodes");
  EXPECT_EQ(denied.http_status, 403);
  EXPECT_NE(denied.error.find("list on \"nodes\""), std::string::npos) << denied.error;
}

}  // namespace
}  // namespace vgpu::k8s
