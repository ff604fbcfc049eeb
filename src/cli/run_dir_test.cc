#include "cli/run_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace vgpu::cli {
namespace {

namespace fs = std::filesystem;

class RunDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/vgpu-run-dir-test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    tmp_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(tmp_, fs::perms::owner_all, ec);
    fs::remove_all(tmp_, ec);
  }
  static int Mode(const std::string& path) {
    struct stat st;
    EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  }
  std::string tmp_;
};

TEST_F(RunDirTest, RootPrefersAWritableXdgRuntimeDir) {
  EXPECT_EQ(ChooseRunRoot(tmp_.c_str(), 1234), tmp_ + "/vgpu");
  EXPECT_EQ(ChooseRunRoot(nullptr, 1234), "/tmp/vgpu-1234");
  EXPECT_EQ(ChooseRunRoot("", 1234), "/tmp/vgpu-1234");
  EXPECT_EQ(ChooseRunRoot("relative/dir", 1234), "/tmp/vgpu-1234");
  EXPECT_EQ(ChooseRunRoot((tmp_ + "/missing").c_str(), 1234), "/tmp/vgpu-1234");
  std::ofstream(tmp_ + "/file") << "x";
  EXPECT_EQ(ChooseRunRoot((tmp_ + "/file").c_str(), 1234), "/tmp/vgpu-1234");
  if (geteuid() != 0) {  // root may write anywhere
    fs::create_directory(tmp_ + "/ro");
    chmod((tmp_ + "/ro").c_str(), 0500);
    EXPECT_EQ(ChooseRunRoot((tmp_ + "/ro").c_str(), 1234), "/tmp/vgpu-1234");
  }
}

TEST_F(RunDirTest, CreatesPrivateRootAndRunDirectoryEvenWithAPermissiveUmask) {
  const mode_t old_umask = umask(0);
  const RunLedger ledger = PrepareRunLedgerIn(RunSpec{}, tmp_ + "/vgpu", 4242, 1700000000);
  umask(old_umask);
  ASSERT_TRUE(ledger.ok()) << ledger.error;
  EXPECT_EQ(ledger.run_dir, tmp_ + "/vgpu/run-4242-1700000000");
  EXPECT_EQ(ledger.ledger_path, ledger.run_dir + "/ledger");
  EXPECT_EQ(Mode(tmp_ + "/vgpu"), 0700);
  EXPECT_EQ(Mode(ledger.run_dir), 0700);
  EXPECT_FALSE(fs::exists(ledger.ledger_path));  // the library creates the file
}

TEST_F(RunDirTest, NameClashTakesTheNextName) {
  const RunLedger first = PrepareRunLedgerIn(RunSpec{}, tmp_, 7, 100);
  const RunLedger second = PrepareRunLedgerIn(RunSpec{}, tmp_, 7, 100);
  ASSERT_TRUE(first.ok() && second.ok()) << first.error << second.error;
  EXPECT_EQ(first.run_dir, tmp_ + "/run-7-100");
  EXPECT_EQ(second.run_dir, tmp_ + "/run-7-100.1");
}

TEST_F(RunDirTest, RefusesAnUnsafeExistingRoot) {
  fs::create_directory(tmp_ + "/open");
  chmod((tmp_ + "/open").c_str(), 0777);
  RunLedger ledger = PrepareRunLedgerIn(RunSpec{}, tmp_ + "/open", 1, 1);
  EXPECT_NE(ledger.error.find("writable by group or others"), std::string::npos) << ledger.error;

  fs::create_directory(tmp_ + "/target");
  fs::create_directory_symlink(tmp_ + "/target", tmp_ + "/link");
  ledger = PrepareRunLedgerIn(RunSpec{}, tmp_ + "/link", 1, 1);
  EXPECT_NE(ledger.error.find("refusing to use"), std::string::npos) << ledger.error;
  EXPECT_TRUE(fs::is_empty(tmp_ + "/target"));

  std::ofstream(tmp_ + "/plain") << "x";
  ledger = PrepareRunLedgerIn(RunSpec{}, tmp_ + "/plain", 1, 1);
  EXPECT_FALSE(ledger.ok());

  ledger = PrepareRunLedgerIn(RunSpec{}, tmp_ + "/no/such/parent", 1, 1);
  EXPECT_NE(ledger.error.find("cannot create"), std::string::npos) << ledger.error;
}

TEST_F(RunDirTest, AcceptsAnExistingPrivateRoot) {
  fs::create_directory(tmp_ + "/mine");
  chmod((tmp_ + "/mine").c_str(), 0700);
  const RunLedger ledger = PrepareRunLedgerIn(RunSpec{}, tmp_ + "/mine", 1, 2);
  ASSERT_TRUE(ledger.ok()) << ledger.error;
  EXPECT_TRUE(fs::is_directory(ledger.run_dir));
}

TEST_F(RunDirTest, ExplicitLedgerCreatesNothingAndIsMadeAbsolute) {
  RunSpec spec;
  spec.ledger_path = "/shared/ledger";
  RunLedger ledger = PrepareRunLedgerIn(spec, tmp_ + "/vgpu", 1, 1);
  ASSERT_TRUE(ledger.ok()) << ledger.error;
  EXPECT_EQ(ledger.ledger_path, "/shared/ledger");
  EXPECT_TRUE(ledger.run_dir.empty());
  EXPECT_FALSE(fs::exists(tmp_ + "/vgpu"));

  spec.ledger_path = "sub/../ledger";
  ledger = PrepareRunLedgerIn(spec, tmp_ + "/vgpu", 1, 1);
  EXPECT_EQ(ledger.ledger_path, (fs::current_path() / "ledger").string());
}

TEST_F(RunDirTest, RemoveRunDirectoryRemovesContentsButNotSymlinkTargets) {
  const RunLedger ledger = PrepareRunLedgerIn(RunSpec{}, tmp_ + "/vgpu", 9, 9);
  ASSERT_TRUE(ledger.ok()) << ledger.error;
  std::ofstream(ledger.ledger_path) << "ledger";
  std::ofstream(tmp_ + "/keep") << "keep";
  fs::create_symlink(tmp_ + "/keep", ledger.run_dir + "/link");
  EXPECT_EQ(RemoveRunDirectory(ledger.run_dir), "");
  EXPECT_FALSE(fs::exists(ledger.run_dir));
  EXPECT_TRUE(fs::exists(tmp_ + "/keep"));
  EXPECT_TRUE(fs::exists(tmp_ + "/vgpu"));  // the root stays for other runs
}

}  // namespace
}  // namespace vgpu::cli
