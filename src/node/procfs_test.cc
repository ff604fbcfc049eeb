#include "node/procfs.h"

#include <gtest/gtest.h>

#include "node/node_test_util.h"

namespace vgpu::node {
namespace {

constexpr char kUid[] = "0e5e6ac4-2a2f-4f22-9d0e-5d5d1c1a9c1e";

TEST(ProcCgroupTest, PureV2UsesTheUnifiedPath) {
  const ProcCgroup c = ParseProcCgroup("0::/kubepods.slice/kubepods-pod0e5e6ac4_2a2f.slice/cri-containerd-abc.scope\n");
  EXPECT_TRUE(c.has_unified_line);
  EXPECT_TRUE(c.v1.empty());
  EXPECT_EQ(ContainerCgroupPath(c), "/kubepods.slice/kubepods-pod0e5e6ac4_2a2f.slice/cri-containerd-abc.scope");
}

TEST(ProcCgroupTest, V1PrefersTheMemoryController) {
  const ProcCgroup c = ParseProcCgroup(
      "12:pids:/kubepods/besteffort/podX/c1\n"
      "11:cpu,cpuacct:/kubepods/besteffort/podX/c1\n"
      "5:memory:/kubepods/besteffort/podX/c1m\n"
      "1:name=systemd:/kubepods/besteffort/podX/c1s\n"
      "0::/system.slice/containerd.service\n");
  EXPECT_EQ(c.v1.at("cpu"), "/kubepods/besteffort/podX/c1");
  EXPECT_EQ(c.v1.at("cpuacct"), "/kubepods/besteffort/podX/c1");
  EXPECT_EQ(ContainerCgroupPath(c), "/kubepods/besteffort/podX/c1m");  // hybrid: v1 memory wins
}

TEST(ProcCgroupTest, V1WithoutMemoryFallsBack) {
  EXPECT_EQ(ContainerCgroupPath(ParseProcCgroup("3:pids:/a\n2:cpu:/b\n")), "/a");
  EXPECT_EQ(ContainerCgroupPath(ParseProcCgroup("3:freezer:/f\n")), "/f");
  EXPECT_EQ(ContainerCgroupPath(ParseProcCgroup("garbage\n:\n1:x:relative\n")), "");
}

TEST(ProcCgroupTest, Containment) {
  EXPECT_TRUE(CgroupContains("/a/b", "/a/b"));
  EXPECT_TRUE(CgroupContains("/a/b", "/a/b/c"));
  EXPECT_TRUE(CgroupContains("/a/b/", "/a/b/c"));
  EXPECT_FALSE(CgroupContains("/a/b", "/a/bc"));
  EXPECT_FALSE(CgroupContains("/a/b", "/a"));
  EXPECT_TRUE(CgroupContains("/", "/anything"));
  EXPECT_FALSE(CgroupContains("", "/a"));
}

TEST(ProcCgroupTest, PodNamesInBothDriverStyles) {
  EXPECT_TRUE(CgroupNamesPod(std::string("/kubepods/burstable/pod") + kUid + "/abc", kUid));
  EXPECT_TRUE(CgroupNamesPod("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0e5e6ac4_2a2f_4f22_9d0e_5d5d1c1a9c1e.slice/cri-containerd-1.scope", kUid));
  EXPECT_FALSE(CgroupNamesPod(std::string("/kubepods/pod") + kUid + "0/abc", kUid));  // a longer id
  EXPECT_FALSE(CgroupNamesPod("/kubepods/podother/abc", kUid));
  EXPECT_FALSE(CgroupNamesPod("/kubepods", ""));
}

TEST(ProcFsTest, FactsFromAFakeTree) {
  testing::TempDir dir;
  testing::FakeHost host(dir.path());
  host.AddProcess(100, "0::/groups/a", 555, 7, "python");
  host.AddProcess(101, "0::/groups/b", 556, 0, "zombie", 'Z');
  const ProcFs fs(host.proc_root(), host.cgroup_root());
  const ProcessFacts f = fs.Facts(100, true);
  EXPECT_TRUE(f.exists);
  EXPECT_EQ(f.cgroup, "/groups/a");
  EXPECT_EQ(f.start_time, 555u);
  EXPECT_EQ(f.ns_pid, 7);
  EXPECT_EQ(f.comm, "python");
  EXPECT_TRUE(fs.Alive(100, 555));
  EXPECT_TRUE(fs.Alive(100, 0));
  EXPECT_FALSE(fs.Alive(100, 554));  // pid reused
  EXPECT_FALSE(fs.Alive(101, 556));  // zombie
  EXPECT_FALSE(fs.Facts(101, false).exists);
  EXPECT_FALSE(fs.Facts(102, false).exists);
  EXPECT_FALSE(fs.Alive(-1, 0));
}

TEST(ProcFsTest, CgroupExistenceAndPodSearch) {
  testing::TempDir dir;
  testing::FakeHost host(dir.path());
  host.MakeCgroup(std::string("/kubepods/burstable/pod") + kUid + "/c1");
  const ProcFs fs(host.proc_root(), host.cgroup_root());
  EXPECT_TRUE(fs.CgroupExists(std::string("/kubepods/burstable/pod") + kUid + "/c1"));
  EXPECT_FALSE(fs.CgroupExists("/kubepods/burstable/podother"));
  EXPECT_FALSE(fs.CgroupExists("relative"));
  EXPECT_FALSE(fs.CgroupExists("/kubepods/../etc"));
  EXPECT_EQ(fs.FindPodCgroup(kUid), std::string("/kubepods/burstable/pod") + kUid);
  EXPECT_EQ(fs.FindPodCgroup("11111111-2222-3333-4444-555555555555"), "");
}

TEST(ProcFsTest, EachHierarchyAloneIsSearched) {
  for (const char* hierarchy : {"memory", "pids", "unified"}) {
    SCOPED_TRACE(hierarchy);
    testing::TempDir dir;
    testing::FakeHost host(dir.path());
    host.MakeCgroup(std::string("/") + hierarchy + "/kubepods/podx/c");
    const ProcFs fs(host.proc_root(), host.cgroup_root());
    EXPECT_TRUE(fs.CgroupExists("/kubepods/podx/c"));
  }
}

// Hybrid cgroups (seen on a real kubelet 1.20 with runc 1.1): a deleted pod's directories are gone
// from the v1 controllers but stay, empty, in the unified hierarchy. Only v1 decides there.
TEST(ProcFsTest, HybridHostsIgnoreTheUnifiedHierarchy) {
  testing::TempDir dir;
  testing::FakeHost host(dir.path());
  host.MakeCgroup(std::string("/memory/kubepods/besteffort/pod") + kUid + "/c1");
  host.MakeCgroup("/unified/kubepods/besteffort/pod11111111-2222-3333-4444-555555555555");
  host.MakeCgroup(std::string("/unified/kubepods/besteffort/pod") + kUid + "/c1");
  const ProcFs fs(host.proc_root(), host.cgroup_root());
  EXPECT_TRUE(fs.CgroupExists(std::string("/kubepods/besteffort/pod") + kUid + "/c1"));
  EXPECT_FALSE(fs.CgroupExists("/kubepods/besteffort/pod11111111-2222-3333-4444-555555555555"));
  EXPECT_EQ(fs.FindPodCgroup("11111111-2222-3333-4444-555555555555"), "");
  EXPECT_EQ(fs.FindPodCgroup(kUid), std::string("/kubepods/besteffort/pod") + kUid);
}

TEST(ProcFsTest, RealProcOfThisProcess) {
  const ProcFs fs("/proc", "/sys/fs/cgroup");
  const ProcessFacts f = fs.Facts(getpid(), true);
  EXPECT_TRUE(f.exists);
  EXPECT_GT(f.start_time, 0u);
  EXPECT_FALSE(f.cgroup.empty());
  EXPECT_EQ(f.ns_pid, getpid());
  EXPECT_FALSE(fs.Namespace(0, "mnt").empty());
}

}  // namespace
}  // namespace vgpu::node
