#include "node/container_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "node/node_test_util.h"

namespace vgpu::node {
namespace {

ContainerSpec Spec(const std::string& pod, const std::string& name, uint64_t memory = 1ull << 30) {
  ContainerSpec s;
  s.pod_uid = pod;
  s.container_name = name;
  s.ns = "default";
  s.pod_name = "trainer";
  s.limits.default_memory_limit = memory;
  s.limits.default_sm_limit = 30;
  return s;
}

TEST(ContainerStoreTest, IdentityRules) {
  EXPECT_EQ(ValidateIdentity("0e5e6ac4-2a2f", "main"), "");
  EXPECT_EQ(ValidateIdentity("job.1", "my_container"), "");
  EXPECT_NE(ValidateIdentity("pod_with_underscore", "c"), "");  // keys must stay unambiguous
  EXPECT_NE(ValidateIdentity("", "c"), "");
  EXPECT_NE(ValidateIdentity("p", ""), "");
  EXPECT_NE(ValidateIdentity("..", "c"), "");
  EXPECT_NE(ValidateIdentity("p", "a/b"), "");
  EXPECT_NE(ValidateIdentity("p", std::string(121, 'a')), "");
  EXPECT_EQ(ContainerKey("p", "c"), "p_c");
}

TEST(ContainerStoreTest, RecordFormatRoundTripsAndRejectsBadInput) {
  ContainerRecord r;
  r.pod_uid = "p";
  r.container_name = "c";
  r.ns = "ns";
  r.pod_name = "pod";
  r.cgroup = "/vgpu/job";
  r.pinned_cgroup = "/x/y";
  r.created_unix = 17;
  r.released_unix = 19;
  ContainerRecord back;
  ASSERT_EQ(ParseRecord(FormatRecord(r), &back), "");
  EXPECT_EQ(back.pod_uid, "p");
  EXPECT_EQ(back.cgroup, "/vgpu/job");
  EXPECT_EQ(back.pinned_cgroup, "/x/y");
  EXPECT_EQ(back.created_unix, 17u);
  EXPECT_TRUE(back.released());
  ContainerRecord bad;
  EXPECT_NE(ParseRecord("pod_uid = p\ncontainer_name = c\n", &bad).find("no version"), std::string::npos);
  EXPECT_NE(ParseRecord("version = 2\n", &bad).find("version 2 is not supported"), std::string::npos);
  EXPECT_NE(ParseRecord("version = 1\npod_uid = p\ncontainer_name = c\ncgroup = relative\n", &bad).find("cgroup"), std::string::npos);
  EXPECT_NE(ParseRecord("version = 1\npod_uid = p\ncontainer_name = c\ncreated_unix = x\n", &bad).find("not a number"), std::string::npos);
  EXPECT_NE(ParseRecord("version = 1\nnonsense\n", &bad).find("line 2"), std::string::npos);
}

TEST(ContainerStoreTest, EnsureCreatesDirectoryRecordAndLedger) {
  testing::TempDir dir;
  ContainerStore store(dir.path() + "/containers");
  ASSERT_TRUE(store.Init().ok);
  ContainerRecord r;
  const Status s = store.Ensure(Spec("p1", "main"), &r);
  ASSERT_TRUE(s.ok) << s.message;
  EXPECT_EQ(r.key, "p1_main");
  struct stat st;
  ASSERT_EQ(stat(r.dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
  ASSERT_EQ(stat(r.LedgerPath().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  ledger::LedgerStatus ls;
  auto ledger = ledger::Ledger::OpenReadOnly(r.LedgerPath(), &ls);
  ASSERT_NE(ledger, nullptr) << ls.message;
  EXPECT_EQ(ledger->Limits().authority, ledger::Authority::kNodeDaemon);
  EXPECT_EQ(ledger->Limits().default_memory_limit, 1ull << 30);
  EXPECT_EQ(ledger->Limits().default_sm_limit, 30);

  // A second store (a restarted daemon) finds it on disk.
  ContainerStore again(dir.path() + "/containers");
  EXPECT_EQ(again.Rescan(), 1u);
  const auto found = again.Get("p1_main");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->error, "");
  EXPECT_EQ(found->ns, "default");
  EXPECT_EQ(found->limits.default_memory_limit, 1ull << 30);
}

TEST(ContainerStoreTest, EnsureUpdatesLimitsAndKeepsPins) {
  testing::TempDir dir;
  ContainerStore store(dir.path());
  ASSERT_TRUE(store.Ensure(Spec("p", "c"), nullptr).ok);
  ASSERT_TRUE(store.Pin("p_c", "/kubepods/podp/abc").ok);
  ASSERT_TRUE(store.Release("p_c").ok);
  ContainerRecord r;
  ASSERT_TRUE(store.Ensure(Spec("p", "c", 2ull << 30), &r).ok);
  EXPECT_EQ(r.pinned_cgroup, "/kubepods/podp/abc");
  EXPECT_FALSE(r.released());  // revived
  EXPECT_EQ(r.limits.default_memory_limit, 2ull << 30);
  store.Rescan();
  EXPECT_EQ(store.Get("p_c")->limits.default_memory_limit, 2ull << 30);
}

TEST(ContainerStoreTest, BadSpecsAreRefusedByName) {
  testing::TempDir dir;
  ContainerStore store(dir.path());
  EXPECT_NE(store.Ensure(Spec("bad/pod", "c"), nullptr).message.find("pod uid"), std::string::npos);
  ContainerSpec s = Spec("p", "c");
  s.cgroup = "not/absolute";
  EXPECT_NE(store.Ensure(s, nullptr).message.find("cgroup"), std::string::npos);
  s = Spec("p", "c");
  s.limits.default_sm_limit = 101;
  EXPECT_NE(store.Ensure(s, nullptr).message.find("invalid limits"), std::string::npos);
  EXPECT_TRUE(store.List().empty());
}

TEST(ContainerStoreTest, UnreadableDirectoriesAreReportedNotDropped) {
  testing::TempDir dir;
  ContainerStore store(dir.path());
  ASSERT_TRUE(store.Ensure(Spec("p", "c"), nullptr).ok);
  testing::MakeDirs(dir.path() + "/q_c");
  testing::WriteFile(dir.path() + "/q_c/record", "version = 1\npod_uid = q\ncontainer_name = c\n");  // no ledger
  testing::MakeDirs(dir.path() + "/r_c");
  testing::WriteFile(dir.path() + "/r_c/record", "version = 1\npod_uid = other\ncontainer_name = c\n");
  EXPECT_EQ(store.Rescan(), 3u);
  EXPECT_EQ(store.Get("p_c")->error, "");
  EXPECT_NE(store.Get("q_c")->error.find("ledger"), std::string::npos);
  EXPECT_NE(store.Get("r_c")->error.find("not r_c"), std::string::npos);
}

TEST(ContainerStoreTest, RemoveDeletesOnlyWhatItOwns) {
  testing::TempDir dir;
  ContainerStore store(dir.path());
  ASSERT_TRUE(store.Ensure(Spec("p", "c"), nullptr).ok);
  ASSERT_TRUE(store.Ensure(Spec("p", "d"), nullptr).ok);
  testing::WriteFile(dir.path() + "/p_d/stray", "x");
  EXPECT_TRUE(store.Remove("p_c").ok);
  struct stat st;
  EXPECT_NE(stat((dir.path() + "/p_c").c_str(), &st), 0);
  EXPECT_FALSE(store.Remove("p_d").ok);  // a file it does not own keeps the directory
  EXPECT_EQ(stat((dir.path() + "/p_d/stray").c_str(), &st), 0);
  EXPECT_FALSE(store.Remove("../x").ok);
  EXPECT_EQ(store.ForPod("p").size(), 0u);
}

TEST(ContainerStoreTest, LoadFindsAContainerCreatedByAnotherProcess) {
  testing::TempDir dir;
  ContainerStore daemon_view(dir.path());
  ContainerStore cli_view(dir.path());
  ASSERT_TRUE(cli_view.Ensure(Spec("p", "c"), nullptr).ok);
  EXPECT_FALSE(daemon_view.Get("p_c").has_value());
  EXPECT_TRUE(daemon_view.Load("p_c"));
  EXPECT_TRUE(daemon_view.Get("p_c").has_value());
  EXPECT_FALSE(daemon_view.Load("absent_c"));
}

}  // namespace
}  // namespace vgpu::node
