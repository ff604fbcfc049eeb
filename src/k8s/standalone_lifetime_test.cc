#include "k8s/standalone_lifetime.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace vgpu::k8s {
namespace {

using Clock = StandaloneLifetime::Clock;
using std::chrono::seconds;

const std::set<std::string> kResources = {"alnair/vgpu-memory", "alnair/vgpu-compute"};

TEST(StandaloneKeyTest, StableSortedAndSpecificToResourceAndIds) {
  const std::string key = StandaloneKey("alnair/vgpu-memory", {"GPU-a_1", "GPU-a_0"});
  EXPECT_EQ(key.rfind(kStandaloneKeyPrefix, 0), 0u);
  EXPECT_EQ(key.size(), std::string(kStandaloneKeyPrefix).size() + 16);
  EXPECT_EQ(key, StandaloneKey("alnair/vgpu-memory", {"GPU-a_0", "GPU-a_1"})) << "order of the IDs does not matter";
  EXPECT_NE(key, StandaloneKey("alnair/vgpu-compute", {"GPU-a_0", "GPU-a_1"}));
  EXPECT_NE(key, StandaloneKey("alnair/vgpu-memory", {"GPU-a_0"}));
  EXPECT_NE(key, StandaloneKey("alnair/vgpu-memory", {"GPU-a_0GPU-a_1"})) << "IDs are separated";
  // Pinned (FNV-1a 64): a daemon restarted with a newer build must find the same names on disk.
  EXPECT_EQ(StandaloneKey("alnair/vgpu-memory", {"GPU-5151a000-0000-4000-8000-000000000000_0"}),
            "standalone-85faaee06c5721be");
}

TEST(StandaloneKeyTest, HeldKeysCoverBothResourcesAndIgnoreOthers) {
  const std::vector<HeldDevices> held = {HeldDevices{"alnair/vgpu-memory", {"GPU-a_0", "GPU-a_1"}},
                                         HeldDevices{"alnair/vgpu-compute", {"GPU-a_5"}},
                                         HeldDevices{"nvidia.com/gpu", {"GPU-b"}},
                                         HeldDevices{"alnair/vgpu-memory", {}}};
  const std::set<std::string> keys = HeldStandaloneKeys(held, kResources);
  EXPECT_EQ(keys, (std::set<std::string>{StandaloneKey("alnair/vgpu-memory", {"GPU-a_0", "GPU-a_1"}),
                                         StandaloneKey("alnair/vgpu-compute", {"GPU-a_5"})}));
}

TEST(StandaloneLifetimeTest, AGrantIsGoneOnlyAfterGraceWithoutAnyHolder) {
  StandaloneLifetime lifetime(seconds(30));
  const std::string mine = StandaloneKey("alnair/vgpu-memory", {"GPU-a_0"});
  const std::string other = StandaloneKey("alnair/vgpu-compute", {"GPU-a_9"});
  PodResourcesSnapshot held{2, {HeldDevices{"alnair/vgpu-memory", {"GPU-a_0"}}, HeldDevices{"alnair/vgpu-compute", {"GPU-a_9"}}}};
  PodResourcesSnapshot without_mine{1, {HeldDevices{"alnair/vgpu-compute", {"GPU-a_9"}}}};
  const Clock::time_point t0 = Clock::now();
  EXPECT_TRUE(lifetime.Observe({mine, other}, held, kResources, t0).empty());
  EXPECT_TRUE(lifetime.Observe({mine, other}, without_mine, kResources, t0 + seconds(5)).empty()) << "within grace";
  EXPECT_TRUE(lifetime.Observe({mine, other}, without_mine, kResources, t0 + seconds(34)).empty());
  EXPECT_EQ(lifetime.Observe({mine, other}, without_mine, kResources, t0 + seconds(35)), std::vector<std::string>{mine});
}

TEST(StandaloneLifetimeTest, HeldAgainStartsOver) {
  StandaloneLifetime lifetime(seconds(30));
  const std::string mine = StandaloneKey("alnair/vgpu-memory", {"GPU-a_0"});
  PodResourcesSnapshot held{1, {HeldDevices{"alnair/vgpu-memory", {"GPU-a_0"}}}};
  PodResourcesSnapshot other{1, {HeldDevices{"alnair/vgpu-memory", {"GPU-a_1"}}}};
  const Clock::time_point t0 = Clock::now();
  EXPECT_TRUE(lifetime.Observe({mine}, other, kResources, t0).empty());
  EXPECT_TRUE(lifetime.Observe({mine}, held, kResources, t0 + seconds(20)).empty());
  EXPECT_TRUE(lifetime.Observe({mine}, other, kResources, t0 + seconds(40)).empty()) << "absent since 40 s only";
  EXPECT_EQ(lifetime.Observe({mine}, other, kResources, t0 + seconds(70)).size(), 1u);
}

TEST(StandaloneLifetimeTest, AListWithoutAnyPodIsNoEvidence) {
  // A kubelet that just restarted may list no pod for a moment; vgpu-node's own pod is always
  // there once it has synced.
  StandaloneLifetime lifetime(seconds(30));
  const std::string mine = StandaloneKey("alnair/vgpu-memory", {"GPU-a_0"});
  const Clock::time_point t0 = Clock::now();
  PodResourcesSnapshot empty{0, {}};
  for (int s = 0; s <= 120; s += 10) EXPECT_TRUE(lifetime.Observe({mine}, empty, kResources, t0 + seconds(s)).empty());
  PodResourcesSnapshot one_pod{1, {}};
  EXPECT_TRUE(lifetime.Observe({mine}, one_pod, kResources, t0 + seconds(130)).empty()) << "absence starts now";
  EXPECT_EQ(lifetime.Observe({mine}, one_pod, kResources, t0 + seconds(160)).size(), 1u);
}

TEST(StandaloneReaperTest, ReleasesWhatTheKubeletNoLongerListsAndNothingWithoutAList) {
  const std::string kept = StandaloneKey("alnair/vgpu-memory", {"GPU-a_0"});
  const std::string gone = StandaloneKey("alnair/vgpu-memory", {"GPU-a_1"});
  std::vector<std::string> grants = {kept, gone};
  std::vector<std::string> released;
  bool kubelet_answers = false;
  StandaloneReaperOptions options;
  options.resources = kResources;
  options.grace = seconds(30);
  options.list = [&](PodResourcesSnapshot* out) {
    if (!kubelet_answers) return Status::Error("List on /x/kubelet.sock: connection refused");
    *out = {1, {HeldDevices{"alnair/vgpu-memory", {"GPU-a_0"}}}};
    return Status::Ok();
  };
  options.grants = [&] { return grants; };
  options.release = [&](const std::string& uid) {
    released.push_back(uid);
    grants.erase(std::find(grants.begin(), grants.end(), uid));
    return Status::Ok();
  };
  StandaloneReaper reaper(options);
  const Clock::time_point t0 = Clock::now();
  for (int s = 0; s <= 60; s += 5) reaper.RunOnce(t0 + seconds(s));
  EXPECT_TRUE(released.empty()) << "no List, no release";
  kubelet_answers = true;
  reaper.RunOnce(t0 + seconds(65));
  reaper.RunOnce(t0 + seconds(90));
  EXPECT_TRUE(released.empty());
  reaper.RunOnce(t0 + seconds(95));
  EXPECT_EQ(released, std::vector<std::string>{gone});
  EXPECT_EQ(reaper.released(), 1);
  reaper.RunOnce(t0 + seconds(200));
  EXPECT_EQ(released.size(), 1u) << "the held grant stays";
}

TEST(StandaloneReaperTest, StopEndsTheThreadPromptly) {
  StandaloneReaperOptions options;
  options.interval = seconds(3600);
  int lists = 0;
  options.list = [&](PodResourcesSnapshot* out) {
    ++lists;
    *out = {};
    return Status::Ok();
  };
  options.grants = [] { return std::vector<std::string>{}; };
  options.release = [](const std::string&) { return Status::Ok(); };
  StandaloneReaper reaper(options);
  const Clock::time_point start = Clock::now();
  reaper.Start();
  reaper.Stop();
  EXPECT_LT(Clock::now() - start, seconds(5));
  EXPECT_LE(lists, 1);
}

}  // namespace
}  // namespace vgpu::k8s
