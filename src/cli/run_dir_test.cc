#include "cli/run_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "ledger/ledger.h"

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
  EXPECT_EQ(Mode(ledger.ledger_path), 0644);  // vgpu run, the authority, created it
}

RunSpec LimitedSpec() {
  RunSpec spec;
  spec.memory.all = 1ull << 30;
  spec.memory.device[1] = 2ull << 30;
  spec.compute.all = 30;
  spec.priority = 0;
  return spec;
}

TEST_F(RunDirTest, TheLedgerHoldsTheSpecLimitsBeforeTheJobStarts) {
  const RunLedger ledger = PrepareRunLedgerIn(LimitedSpec(), tmp_ + "/vgpu", 5, 6);
  ASSERT_TRUE(ledger.ok()) << ledger.error;
  vgpu::ledger::LedgerStatus status;
  const auto opened = vgpu::ledger::Ledger::OpenReadOnly(ledger.ledger_path, &status);
  ASSERT_NE(opened, nullptr) << status.message;
  const vgpu::ledger::LimitSet limits = opened->Limits();
  EXPECT_EQ(limits.authority, vgpu::ledger::Authority::kVgpuRun);
  EXPECT_EQ(limits.default_memory_limit, 1ull << 30);
  EXPECT_EQ(limits.default_sm_limit, 30);
  EXPECT_EQ(limits.task_priority, 0);
  ASSERT_EQ(limits.devices.size(), 1u);
  EXPECT_EQ(limits.devices[0].ordinal, 1);
  EXPECT_EQ(limits.devices[0].memory_limit, 2ull << 30);
  EXPECT_EQ(limits.devices[0].sm_limit, 30);
}

TEST_F(RunDirTest, AnExistingLedgerGetsTheNewLimitsAndKeepsItsCharges) {
  const std::string path = tmp_ + "/shared.ledger";
  vgpu::ledger::LedgerStatus status;
  auto library = vgpu::ledger::Ledger::Open(path, {}, &status, nullptr);  // a library-made ledger
  ASSERT_NE(library, nullptr) << status.message;
  const int slot = library->RegisterProcess(getpid(), getpid(), vgpu::ledger::ProcessStartTime(getpid()));
  std::string error;
  const int device = library->BindDevice(0, "GPU-run-dir-test", &error);
  ASSERT_TRUE(library->TryReserve(slot, device, 4096)) << error;
  RunSpec spec = LimitedSpec();
  spec.ledger_path = path;
  const RunLedger ledger = PrepareRunLedgerIn(spec, tmp_ + "/vgpu", 1, 1);
  ASSERT_TRUE(ledger.ok()) << ledger.error;
  EXPECT_EQ(library->MemoryLimit(device), 1ull << 30);
  EXPECT_EQ(library->Limits().authority, vgpu::ledger::Authority::kVgpuRun);
  EXPECT_EQ(library->DeviceUsed(device), 4096u);
}

TEST_F(RunDirTest, AnExplicitPathThatIsNotALedgerIsRefusedAndUntouched) {
  const std::string path = tmp_ + "/precious";
  std::ofstream(path) << "do not overwrite";
  RunSpec spec = LimitedSpec();
  spec.ledger_path = path;
  RunLedger ledger = PrepareRunLedgerIn(spec, tmp_ + "/vgpu", 1, 1);
  EXPECT_NE(ledger.error.find("precious"), std::string::npos) << ledger.error;
  std::ifstream in(path);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "do not overwrite");

  spec.ledger_path = tmp_ + "/no/such/dir/ledger";
  ledger = PrepareRunLedgerIn(spec, tmp_ + "/vgpu", 1, 1);
  EXPECT_FALSE(ledger.ok());
  EXPECT_NE(ledger.error.find("no/such/dir/ledger"), std::string::npos) << ledger.error;
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

TEST_F(RunDirTest, ExplicitLedgerCreatesNoRunDirectoryAndIsMadeAbsolute) {
  RunSpec spec;
  spec.ledger_path = tmp_ + "/shared.ledger";
  RunLedger ledger = PrepareRunLedgerIn(spec, tmp_ + "/vgpu", 1, 1);
  ASSERT_TRUE(ledger.ok()) << ledger.error;
  EXPECT_EQ(ledger.ledger_path, tmp_ + "/shared.ledger");
  EXPECT_TRUE(ledger.run_dir.empty());
  EXPECT_FALSE(fs::exists(tmp_ + "/vgpu"));
  EXPECT_EQ(Mode(ledger.ledger_path), 0644);

  const fs::path cwd = fs::current_path();
  fs::create_directory(tmp_ + "/sub");
  fs::current_path(tmp_ + "/sub");
  spec.ledger_path = "x/../relative.ledger";
  ledger = PrepareRunLedgerIn(spec, tmp_ + "/vgpu", 1, 1);
  fs::current_path(cwd);
  EXPECT_TRUE(ledger.ok()) << ledger.error;
  EXPECT_EQ(ledger.ledger_path, tmp_ + "/sub/relative.ledger");
  EXPECT_TRUE(fs::exists(tmp_ + "/sub/relative.ledger"));
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
