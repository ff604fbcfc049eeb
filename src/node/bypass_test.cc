#include "node/bypass.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace vgpu::node {
namespace {

ContainerRecord Record(const std::string& key, const std::string& pod, const std::string& cgroup) {
  ContainerRecord r;
  r.key = key;
  r.pod_uid = pod;
  r.cgroup = cgroup;
  return r;
}

struct Fixture {
  std::map<int32_t, ProcessFacts> facts;
  std::set<int32_t> registered;
  BypassInputs in;

  Fixture() {
    in.registered = [this](int32_t pid, uint64_t) { return registered.count(pid) > 0; };
    in.facts = [this](int32_t pid) {
      const auto it = facts.find(pid);
      return it == facts.end() ? ProcessFacts{} : it->second;
    };
  }
  void Process(int32_t pid, const std::string& cgroup, uint64_t start, int32_t ns_pid = 0) {
    ProcessFacts f;
    f.exists = true;
    f.cgroup = cgroup;
    f.start_time = start;
    f.ns_pid = ns_pid;
    f.comm = "p" + std::to_string(pid);
    facts[pid] = f;
  }
  void OnGpu(const std::string& uuid, int32_t pid, uint64_t bytes) {
    for (GpuSample& g : in.gpus) {
      if (g.uuid == uuid) {
        g.processes.push_back({static_cast<uint32_t>(pid), bytes});
        return;
      }
    }
    GpuSample g;
    g.uuid = uuid;
    g.processes.push_back({static_cast<uint32_t>(pid), bytes});
    in.gpus.push_back(g);
  }
};

TEST(BypassTest, RecordClaims) {
  ContainerRecord k8s = Record("p_c", "abc", "");
  EXPECT_TRUE(RecordClaims(k8s, "/kubepods/podabc/x"));
  k8s.pinned_cgroup = "/kubepods/podabc/x";
  EXPECT_TRUE(RecordClaims(k8s, "/kubepods/podabc/x/sub"));
  EXPECT_FALSE(RecordClaims(k8s, "/kubepods/podabc/y"));  // sibling container of the pod
  EXPECT_TRUE(RecordClaims(Record("j_c", "j", "/vgpu/j"), "/vgpu/j/w"));
  EXPECT_FALSE(RecordClaims(Record("j_c", "j", "/vgpu/j"), "/vgpu/k"));
  ContainerRecord broken = Record("j_c", "j", "/vgpu/j");
  broken.error = "unreadable";
  EXPECT_FALSE(RecordClaims(broken, "/vgpu/j"));
}

TEST(BypassTest, UnknownProcessInALimitedGroupIsFlaggedAfterTheGrace) {
  Fixture fx;
  fx.in.records = {Record("j_c", "j", "/vgpu/j")};
  fx.Process(10, "/vgpu/j", 100);      // bypass
  fx.Process(11, "/vgpu/j", 101);      // registered with the daemon
  fx.Process(12, "/vgpu/j", 102, 3);   // in the ledger by its container pid (no daemon reachable)
  fx.Process(13, "/vgpu/j", 103);      // in the ledger by host pid
  fx.Process(14, "/other", 104);       // not in a limited group
  fx.registered.insert(11);
  ledger::ProcessUsage by_ns;
  by_ns.pid = 3;
  by_ns.host_pid = 3;
  by_ns.start_time = 102;
  ledger::ProcessUsage by_host;
  by_host.pid = 1;
  by_host.host_pid = 13;
  by_host.start_time = 103;
  fx.in.ledger_processes["j_c"] = {by_ns, by_host};
  for (int pid : {10, 11, 12, 13, 14}) fx.OnGpu("GPU-a", pid, 1 << 20);
  fx.OnGpu("GPU-b", 10, 2 << 20);

  BypassDetector detector(1000);
  EXPECT_TRUE(detector.Scan(fx.in, 0, 0).empty());  // seen, but still within the grace
  EXPECT_TRUE(detector.Scan(fx.in, 999, 0).empty());
  const std::vector<BypassFinding> found = detector.Scan(fx.in, 1000, 0);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].host_pid, 10);
  EXPECT_EQ(found[0].container_key, "j_c");
  EXPECT_EQ(found[0].comm, "p10");
  EXPECT_EQ(found[0].memory.at("GPU-a"), 1u << 20);
  EXPECT_EQ(found[0].memory.at("GPU-b"), 2u << 20);
  EXPECT_EQ(detector.detections_total(), 1u);
  detector.Scan(fx.in, 2000, 0);
  EXPECT_EQ(detector.detections_total(), 1u);  // counted once per process
}

TEST(BypassTest, AStaleLedgerSlotDoesNotHideAReusedPid) {
  Fixture fx;
  fx.in.records = {Record("j_c", "j", "/vgpu/j")};
  fx.Process(10, "/vgpu/j", 200);
  ledger::ProcessUsage old;
  old.pid = 10;
  old.host_pid = 10;
  old.start_time = 100;  // another process had this pid
  fx.in.ledger_processes["j_c"] = {old};
  fx.OnGpu("GPU-a", 10, 1);
  BypassDetector detector(0);
  EXPECT_EQ(detector.Scan(fx.in, 0, 0).size(), 1u);
}

TEST(BypassTest, ProcessesThatRegisterOrExitAreForgotten) {
  Fixture fx;
  fx.in.records = {Record("j_c", "j", "/vgpu/j")};
  fx.Process(10, "/vgpu/j", 1);
  fx.OnGpu("GPU-a", 10, 1);
  BypassDetector detector(100);
  detector.Scan(fx.in, 0, 0);
  fx.registered.insert(10);
  EXPECT_TRUE(detector.Scan(fx.in, 500, 0).empty());
  fx.registered.clear();
  EXPECT_TRUE(detector.Scan(fx.in, 600, 0).empty());  // the grace starts again
  EXPECT_EQ(detector.Scan(fx.in, 700, 0).size(), 1u);
  fx.facts.erase(10);
  EXPECT_TRUE(detector.Scan(fx.in, 800, 0).empty());
}

}  // namespace
}  // namespace vgpu::node
