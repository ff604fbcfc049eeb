#include "node/registrar.h"

#include <gtest/gtest.h>

#include "node/node_test_util.h"

namespace vgpu::node {
namespace {

constexpr char kPod[] = "0e5e6ac4-2a2f-4f22-9d0e-5d5d1c1a9c1e";
const std::string kPodCgroup = std::string("/kubepods/burstable/pod") + kPod;

class RegistrarTest : public ::testing::Test {
 protected:
  RegistrarTest()
      : host_(dir_.path()),
        store_(dir_.path() + "/containers"),
        procfs_(host_.proc_root(), host_.cgroup_root()),
        registrar_(store_, registry_, procfs_, "/var/lib/vgpu/container/ledger", log_) {
    log_.Configure(Level::kError, LogFormat::kLogfmt);
    store_.Init();
  }

  void AddContainer(const std::string& pod, const std::string& name, const std::string& cgroup = "") {
    ContainerSpec s;
    s.pod_uid = pod;
    s.container_name = name;
    s.cgroup = cgroup;
    s.limits.default_memory_limit = 1ull << 30;
    ASSERT_TRUE(store_.Ensure(s, nullptr).ok);
  }

  wire::RegisterReply Register(int32_t pid, const std::string& pod, const std::string& name) {
    wire::RegisterRequest r;
    r.pod_uid = pod;
    r.container_name = name;
    r.pid = 1;
    return registrar_.Handle(PeerCred{pid, 0, 0}, r);
  }

  testing::TempDir dir_;
  testing::FakeHost host_;
  ContainerStore store_;
  Registry registry_;
  ProcFs procfs_;
  Logger log_;
  Registrar registrar_;
};

TEST_F(RegistrarTest, AProcessInThePodIsRegistered) {
  AddContainer(kPod, "main");
  host_.AddProcess(500, "0::" + kPodCgroup + "/ctr1", 1000);
  const wire::RegisterReply r = Register(500, kPod, "main");
  ASSERT_EQ(r.status, wire::Status::kOk) << r.message;
  EXPECT_EQ(r.host_pid, 500u);
  EXPECT_EQ(r.container_key, std::string(kPod) + "_main");
  EXPECT_EQ(r.limits.default_memory_limit, 1ull << 30);
  // Neither the daemon's nor the caller's mount namespace can be read in the fake tree: treated
  // as the same, so the host path is answered.
  EXPECT_EQ(r.ledger_path, dir_.path() + "/containers/" + kPod + "_main/ledger");
  EXPECT_TRUE(registry_.Has(500, 1000));
  EXPECT_FALSE(registry_.Has(500, 999));
  EXPECT_EQ(store_.Get(std::string(kPod) + "_main")->pinned_cgroup, kPodCgroup + "/ctr1");
}

TEST_F(RegistrarTest, ACallerInAnotherMountNamespaceGetsTheContainerPath) {
  AddContainer(kPod, "main");
  host_.AddProcess(500, "0::" + kPodCgroup + "/ctr1", 1000);
  host_.SetNamespace("self", "mnt", "mnt:[1]");
  host_.SetNamespace("500", "mnt", "mnt:[2]");
  Registrar registrar(store_, registry_, procfs_, "/var/lib/vgpu/container/ledger", log_);
  wire::RegisterRequest req;
  req.pod_uid = kPod;
  req.container_name = "main";
  req.pid = 1;
  EXPECT_EQ(registrar.Handle(PeerCred{500, 0, 0}, req).ledger_path, "/var/lib/vgpu/container/ledger");
}

TEST_F(RegistrarTest, AProcessOutsideTheClaimedCgroupIsRefused) {
  AddContainer(kPod, "main");
  host_.AddProcess(501, "0::/kubepods/burstable/podffffffff-2a2f-4f22-9d0e-5d5d1c1a9c1e/x", 1000);
  const wire::RegisterReply r = Register(501, kPod, "main");
  EXPECT_EQ(r.status, wire::Status::kRefused);
  EXPECT_NE(r.message.find("not pod"), std::string::npos) << r.message;
  EXPECT_EQ(registry_.size(), 0u);
}

TEST_F(RegistrarTest, ExplicitCgroupGroupsAreCheckedByContainment) {
  AddContainer("job1", "main", "/vgpu/job1");
  host_.AddProcess(600, "0::/vgpu/job1/worker", 1);
  host_.AddProcess(601, "0::/vgpu/job10", 1);
  EXPECT_EQ(Register(600, "job1", "main").status, wire::Status::kOk);
  const wire::RegisterReply r = Register(601, "job1", "main");
  EXPECT_EQ(r.status, wire::Status::kRefused);
  EXPECT_NE(r.message.find("outside job1_main's cgroup /vgpu/job1"), std::string::npos) << r.message;
}

TEST_F(RegistrarTest, CgroupV1MembershipIsChecked) {
  AddContainer(kPod, "main");
  host_.AddProcess(700, "5:memory:" + kPodCgroup + "/c\n4:pids:" + kPodCgroup + "/c\n", 1);
  host_.AddProcess(701, "5:memory:/system.slice/x\n4:pids:" + kPodCgroup + "/c\n", 1);
  EXPECT_EQ(Register(700, kPod, "main").status, wire::Status::kOk);
  EXPECT_EQ(Register(701, kPod, "main").status, wire::Status::kRefused);
}

TEST_F(RegistrarTest, SiblingContainerCannotTakeAPinnedContainer) {
  AddContainer(kPod, "main");
  host_.MakeCgroup(kPodCgroup + "/ctr1");
  host_.AddProcess(500, "0::" + kPodCgroup + "/ctr1", 1);
  host_.AddProcess(510, "0::" + kPodCgroup + "/ctr2", 1);
  ASSERT_EQ(Register(500, kPod, "main").status, wire::Status::kOk);
  const wire::RegisterReply r = Register(510, kPod, "main");
  EXPECT_EQ(r.status, wire::Status::kRefused);
  EXPECT_NE(r.message.find("runs in cgroup"), std::string::npos) << r.message;
  // The first container is gone (restart): the next caller re-pins.
  host_.RemoveCgroup(kPodCgroup + "/ctr1");
  EXPECT_EQ(Register(510, kPod, "main").status, wire::Status::kOk);
  EXPECT_EQ(store_.Get(std::string(kPod) + "_main")->pinned_cgroup, kPodCgroup + "/ctr2");
}

TEST_F(RegistrarTest, UnknownAmbiguousAndReleasedContainers) {
  host_.AddProcess(500, "0::" + kPodCgroup + "/ctr1", 1);
  EXPECT_NE(Register(500, kPod, "main").message.find("no limited container"), std::string::npos);
  AddContainer(kPod, "a");
  // Without a container name, a pod with one container is enough.
  EXPECT_EQ(Register(500, kPod, "").status, wire::Status::kOk);
  AddContainer(kPod, "b");
  EXPECT_NE(Register(500, kPod, "").message.find("set VGPU_CONTAINER_NAME"), std::string::npos);
  ASSERT_TRUE(store_.Release(std::string(kPod) + "_b").ok);
  EXPECT_NE(Register(500, kPod, "b").message.find("released"), std::string::npos);
  EXPECT_NE(Register(500, "", "b").message.find("no pod uid"), std::string::npos);
  EXPECT_NE(Register(500, kPod, "bad/name").message.find("container name"), std::string::npos);
}

TEST_F(RegistrarTest, AContainerCreatedAfterStartIsFound) {
  host_.AddProcess(500, "0::/vgpu/late", 1);
  ContainerStore other(dir_.path() + "/containers");
  ContainerSpec s;
  s.pod_uid = "late";
  s.container_name = "c";
  s.cgroup = "/vgpu/late";
  ASSERT_TRUE(other.Ensure(s, nullptr).ok);
  EXPECT_EQ(Register(500, "late", "c").status, wire::Status::kOk);
}

TEST_F(RegistrarTest, AVanishedCallerIsRefused) {
  AddContainer(kPod, "main");
  EXPECT_NE(Register(999, kPod, "main").message.find("not found"), std::string::npos);
}

TEST_F(RegistrarTest, RegistryPrunesDeadProcesses) {
  AddContainer(kPod, "main");
  host_.AddProcess(500, "0::" + kPodCgroup + "/c", 1);
  host_.AddProcess(501, "0::" + kPodCgroup + "/c", 1);
  ASSERT_EQ(Register(500, kPod, "main").status, wire::Status::kOk);
  ASSERT_EQ(Register(501, kPod, "main").status, wire::Status::kOk);
  EXPECT_EQ(registry_.CountFor(std::string(kPod) + "_main"), 2u);
  host_.RemoveProcess(500);
  EXPECT_EQ(registry_.Prune(procfs_), 1u);
  EXPECT_EQ(registry_.CountFor(std::string(kPod) + "_main"), 1u);
}

}  // namespace
}  // namespace vgpu::node
