#include "cli/ps.h"

#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cli/commands.h"

namespace vgpu::cli {
namespace {

namespace fs = std::filesystem;
using ledger::Authority;
using ledger::DeviceUsage;
using ledger::ProcessUsage;
using ledger::Snapshot;

constexpr uint64_t kMiB = 1024 * 1024;
constexpr uint64_t kGiB = 1024 * kMiB;

bool Contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

PsEntry MadeUp() {
  PsEntry entry;
  entry.path = "/tmp/vgpu-1000/run-42-1700000000/ledger";
  Snapshot& s = entry.snapshot;
  s.path = entry.path;
  s.authority = Authority::kVgpuRun;
  s.task_priority = 1;
  s.default_memory_limit = 4 * kGiB;
  s.default_sm_limit = 30;
  s.created_unix_ns = 1'700'000'000'000'000'000;
  s.devices.push_back({0, "GPU-aaaa", 4 * kGiB, 1536 * kMiB, 2 * kGiB, 3, 0, 30, 60, 298'400, 2'500'000'000, 7'000'000'000});
  s.devices.push_back({-1, "GPU-bbbb", 0, 2 * kMiB, 2 * kMiB, 0, 1, 0, 0});
  ProcessUsage running;
  running.slot = 0;
  running.pid = 1234;
  running.host_pid = 99;
  running.alive = true;
  running.charged[0] = kGiB;
  running.overhead[0] = 300 * kMiB;
  ProcessUsage exited;
  exited.slot = 1;
  exited.pid = 1240;
  exited.host_pid = 1240;
  exited.charged[0] = 236 * kMiB;
  exited.charged[1] = 2 * kMiB;
  s.processes = {running, exited};
  return entry;
}

TEST(PsFormatTest, TableShowsLimitsDevicesAndProcesses) {
  PsEntry broken;
  broken.path = "/tmp/x/ledger";
  broken.error = "ledger /tmp/x/ledger: not a vgpu ledger (bad magic)";
  PsEntry empty;
  empty.path = "/tmp/y/ledger";
  empty.snapshot.authority = Authority::kLibrary;
  const std::string expected =
      "/tmp/vgpu-1000/run-42-1700000000/ledger\n"
      "  limits by vgpu run, created 2023-11-14T22:13:20Z; priority 1\n"
      "  default per GPU: memory 4 GiB, compute 30%\n"
      "  DEVICE  ORDINAL  UUID      USED / LIMIT       PEAK   REFUSALS  COMPUTE         SHARE\n"
      "  0       0        GPU-aaaa  1.50 GiB / 4 GiB   2 GiB  3         30% (soft 60%)  29.8%\n"
      "  1       -        GPU-bbbb  2 MiB / unlimited  2 MiB  0         unlimited       -\n"
      "  PID   HOST PID  STATE                       DEVICE 0         DEVICE 1\n"
      "  1234  99        running                     1 GiB + 300 MiB  0 B\n"
      "  1240  1240      exited (not yet reclaimed)  236 MiB          2 MiB\n"
      "\n"
      "/tmp/x/ledger\n"
      "  error: ledger /tmp/x/ledger: not a vgpu ledger (bad magic)\n"
      "\n"
      "/tmp/y/ledger\n"
      "  limits by library, created 1970-01-01T00:00:00Z; priority 1\n"
      "  default per GPU: memory unlimited, compute unlimited\n"
      "  no devices yet (a process binds them when it first uses a GPU)\n"
      "  no processes\n";
  EXPECT_EQ(FormatPsTable({MadeUp(), broken, empty}), expected);
  EXPECT_EQ(FormatPsTable({}), "");
}

// A dead process whose memory the driver still holds (its slot drains, docs/ledger.md) is told
// apart from one the next scan will reclaim.
TEST(PsFormatTest, ADrainingProcessSaysItsMemoryIsStillHeld) {
  PsEntry entry = MadeUp();
  entry.snapshot.processes[1].draining = true;
  EXPECT_NE(FormatPsTable({entry}).find("  1240  1240      exited (its memory still held by the driver)  "),
            std::string::npos)
      << FormatPsTable({entry});
  EXPECT_NE(FormatPsJson({entry}).find("\"pid\": 1240, \"host_pid\": 1240, \"start_time\": 0, \"alive\": false, \"draining\": true"),
            std::string::npos);
}

TEST(PsFormatTest, JsonHasEveryFieldAndEscapes) {
  PsEntry broken;
  broken.path = "/tmp/we\"ird\\path\n/ledger";
  broken.error = "bad\tthing";
  const std::string json = FormatPsJson({MadeUp(), broken});
  const std::string expected =
      "{\"ledgers\": [\n"
      "  {\"path\": \"/tmp/vgpu-1000/run-42-1700000000/ledger\", \"ok\": true, \"authority\": \"vgpu run\", "
      "\"task_priority\": 1, \"created_unix_ns\": 1700000000000000000, \"lock_recoveries\": 0, "
      "\"reclaimed_processes\": 0, \"default_memory_limit\": 4294967296, \"default_sm_limit\": 30, "
      "\"default_sm_soft_limit\": 0, \"default_host_limit\": 0, \"devices\": ["
      "{\"index\": 0, \"ordinal\": 0, \"uuid\": \"GPU-aaaa\", \"memory_limit\": 4294967296, \"used\": 1610612736, "
      "\"peak\": 2147483648, \"oom_refusals\": 3, \"sm_limit\": 30, \"sm_soft_limit\": 60, "
      "\"share_ppm\": 298400, \"busy_ns\": 2500000000, \"throttled_ns\": 7000000000, \"host_limit\": 0, "
      "\"spilled\": 0, \"spill_peak\": 0, \"spill_refusals\": 0}, "
      "{\"index\": 1, \"ordinal\": -1, \"uuid\": \"GPU-bbbb\", \"memory_limit\": 0, \"used\": 2097152, "
      "\"peak\": 2097152, \"oom_refusals\": 0, \"sm_limit\": 0, \"sm_soft_limit\": 0, "
      "\"share_ppm\": 0, \"busy_ns\": 0, \"throttled_ns\": 0, \"host_limit\": 0, \"spilled\": 0, "
      "\"spill_peak\": 0, \"spill_refusals\": 0}], \"processes\": ["
      "{\"pid\": 1234, \"host_pid\": 99, \"start_time\": 0, \"alive\": true, \"draining\": false, \"devices\": ["
      "{\"index\": 0, \"charged\": 1073741824, \"overhead\": 314572800, \"spilled\": 0}, "
      "{\"index\": 1, \"charged\": 0, \"overhead\": 0, \"spilled\": 0}]}, "
      "{\"pid\": 1240, \"host_pid\": 1240, \"start_time\": 0, \"alive\": false, \"draining\": false, \"devices\": ["
      "{\"index\": 0, \"charged\": 247463936, \"overhead\": 0, \"spilled\": 0}, "
      "{\"index\": 1, \"charged\": 2097152, \"overhead\": 0, \"spilled\": 0}]}]},\n"
      "  {\"path\": \"/tmp/we\\\"ird\\\\path\\u000a/ledger\", \"ok\": false, \"error\": \"bad\\u0009thing\"}\n"
      "]}\n";
  EXPECT_EQ(json, expected);
  EXPECT_EQ(FormatPsJson({}), "{\"ledgers\": []}\n");
}

// Oversubscription: a host column per device, host bytes per process, the default host limit.
TEST(PsFormatTest, SpilledMemoryIsShownApartFromDeviceMemory) {
  PsEntry entry = MadeUp();
  Snapshot& s = entry.snapshot;
  s.default_host_limit = 4 * kGiB;
  s.devices[0].host_limit = 4 * kGiB;
  s.devices[0].spilled = 2560 * kMiB;
  s.devices[0].spill_peak = 3 * kGiB;
  s.devices[0].spill_refusals = 2;
  s.processes[0].spilled[0] = 2 * kGiB;
  s.processes[1].spilled[0] = 512 * kMiB;
  const std::string table = FormatPsTable({entry});
  const std::string expected =
      "/tmp/vgpu-1000/run-42-1700000000/ledger\n"
      "  limits by vgpu run, created 2023-11-14T22:13:20Z; priority 1\n"
      "  default per GPU: memory 4 GiB, compute 30%, host spill 4 GiB\n"
      "  DEVICE  ORDINAL  UUID      USED / LIMIT       HOST / LIMIT      PEAK   REFUSALS  COMPUTE         SHARE\n"
      "  0       0        GPU-aaaa  1.50 GiB / 4 GiB   2.50 GiB / 4 GiB  2 GiB  3         30% (soft 60%)  29.8%\n"
      "  1       -        GPU-bbbb  2 MiB / unlimited  -                 2 MiB  0         unlimited       -\n"
      "  PID   HOST PID  STATE                       DEVICE 0                     DEVICE 1\n"
      "  1234  99        running                     1 GiB + 300 MiB, host 2 GiB  0 B\n"
      "  1240  1240      exited (not yet reclaimed)  236 MiB, host 512 MiB        2 MiB\n";
  EXPECT_EQ(table, expected);
  const std::string json = FormatPsJson({entry});
  EXPECT_TRUE(Contains(json, "\"default_host_limit\": 4294967296")) << json;
  EXPECT_TRUE(Contains(json, "\"host_limit\": 4294967296, \"spilled\": 2684354560, \"spill_peak\": 3221225472, "
                             "\"spill_refusals\": 2}")) << json;
  EXPECT_TRUE(Contains(json, "{\"index\": 0, \"charged\": 1073741824, \"overhead\": 314572800, \"spilled\": 2147483648}"))
      << json;
}

class PsFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/vgpu-ps-test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    tmp_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
  std::string Touch(const std::string& relative) {
    const fs::path path = fs::path(tmp_) / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << "x";
    return path.string();
  }
  std::string tmp_;
};

TEST_F(PsFilesTest, FindsLedgersInEveryPlaceOnce) {
  const std::string own = Touch("uid/ledger");
  const std::string run = Touch("uid/run-1-2/ledger");
  Touch("uid/other/ledger");         // not a run directory: not searched
  Touch("uid/run-3-4/not-a-ledger");
  const std::string xdg = Touch("xdg/vgpu/run-5-6/ledger");
  const std::string d1 = Touch("d1/ledger");
  const std::string d1x = Touch("d1/x/ledger");
  const std::string d2y = Touch("d2/y/ledger");
  fs::create_symlink(tmp_ + "/elsewhere", tmp_ + "/d2/z");
  fs::create_directories(tmp_ + "/d2/link");
  fs::create_symlink(tmp_ + "/nowhere", tmp_ + "/d2/link/ledger");  // listed, so that it is refused visibly

  LedgerSearch search;
  search.uid_root = tmp_ + "/uid";
  search.xdg_runtime_dir = tmp_ + "/xdg";
  search.ledger_dirs = tmp_ + "/d1::" + tmp_ + "/d2:" + tmp_ + "/missing";
  std::vector<std::string> expected = {d1, d1x, tmp_ + "/d2/link/ledger", d2y, own, run, xdg};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(FindLedgerPaths(search), expected);

  // With operands, only they count: a directory is searched, a file is listed (even missing),
  // and the same ledger twice is listed once.
  search.operands = {tmp_ + "/d1", tmp_ + "/missing/ledger", d1x, tmp_ + "/d1/../d1/ledger"};
  EXPECT_EQ(FindLedgerPaths(search), (std::vector<std::string>{d1, d1x, tmp_ + "/missing/ledger"}));
}

TEST_F(PsFilesTest, ReadLedgersReportsEveryProblem) {
  const std::string good = tmp_ + "/good";
  ASSERT_TRUE(ledger::Ledger::WriteLimits(good, {Authority::kVgpuRun, kGiB, 0, 0, 1, {}}).ok);
  const std::string junk = Touch("junk");
  const std::vector<PsEntry> entries = ReadLedgers({good, junk, tmp_ + "/missing"});
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_TRUE(entries[0].ok()) << entries[0].error;
  EXPECT_EQ(entries[0].snapshot.default_memory_limit, kGiB);
  EXPECT_TRUE(Contains(entries[1].error, "truncated")) << entries[1].error;
  EXPECT_TRUE(Contains(entries[2].error, "does not exist")) << entries[2].error;
}

// --- Integration: the built tool ------------------------------------------------------------

struct ToolRun {
  int status = -1;
  std::string out;
};

ToolRun RunTool(const std::string& arguments, const std::string& env = "") {
  ToolRun run;
  const std::string command = env + " " VGPU_EXE " ps " + arguments + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) run.out.append(buf, n);
  const int status = pclose(pipe);
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

TEST_F(PsFilesTest, TheToolListsALiveLedger) {
  const std::string dir = tmp_ + "/job";
  fs::create_directories(dir);
  const std::string path = dir + "/ledger";
  ledger::LimitSet limits{Authority::kVgpuRun, 2 * kGiB, 0, 0, 3, {{0, "", kGiB, 30, 0}}};
  ASSERT_TRUE(ledger::Ledger::WriteLimits(path, limits).ok);
  ledger::LedgerStatus status;
  std::unique_ptr<ledger::Ledger> ledger = ledger::Ledger::Open(path, limits, &status, nullptr);
  ASSERT_NE(ledger, nullptr) << status.message;
  const int slot = ledger->RegisterProcess(getpid(), getpid(), ledger::ProcessStartTime(getpid()));
  std::string error;
  const int device = ledger->BindDevice(0, "GPU-ps-test", &error);
  ASSERT_GE(device, 0) << error;
  ASSERT_TRUE(ledger->TryReserve(slot, device, 300 * kMiB));
  ledger->SetOverhead(slot, device, 12 * kMiB);

  ToolRun run = RunTool(path);
  EXPECT_EQ(run.status, 0) << run.out;
  EXPECT_TRUE(Contains(run.out, path + "\n  limits by vgpu run")) << run.out;
  EXPECT_TRUE(Contains(run.out, "priority 3")) << run.out;
  EXPECT_TRUE(Contains(run.out, "default per GPU: memory 2 GiB")) << run.out;
  EXPECT_TRUE(Contains(run.out, "GPU-ps-test  312 MiB / 1 GiB")) << run.out;
  EXPECT_TRUE(Contains(run.out, std::to_string(getpid()))) << run.out;
  EXPECT_TRUE(Contains(run.out, "running  300 MiB + 12 MiB")) << run.out;

  run = RunTool("--json", "VGPU_LEDGER_DIRS=" + tmp_);  // found through the directory search
  EXPECT_TRUE(Contains(run.out, "{\"path\": \"" + path + "\", \"ok\": true, \"authority\": \"vgpu run\"")) << run.out;
  EXPECT_TRUE(Contains(run.out, "{\"pid\": " + std::to_string(getpid()) + ",")) << run.out;
  EXPECT_TRUE(Contains(run.out, "\"charged\": 314572800, \"overhead\": 12582912")) << run.out;
  ledger->UnregisterProcess(slot);
  EXPECT_TRUE(Contains(RunTool(path).out, "no processes"));
}

TEST_F(PsFilesTest, TheToolListsBrokenLedgersWithTheirErrorAndFails) {
  const std::string junk = Touch("broken/ledger");
  ToolRun run = RunTool(junk + " " + tmp_ + "/absent");
  EXPECT_EQ(run.status, 1) << run.out;
  EXPECT_TRUE(Contains(run.out, junk + "\n  error: ledger " + junk + ": truncated")) << run.out;
  EXPECT_TRUE(Contains(run.out, tmp_ + "/absent: does not exist")) << run.out;
  EXPECT_TRUE(Contains(run.out, "some ledgers could not be read")) << run.out;
  run = RunTool("--json " + junk);
  EXPECT_EQ(run.status, 1);
  EXPECT_TRUE(Contains(run.out, "\"ok\": false, \"error\": \"ledger " + junk)) << run.out;
  EXPECT_EQ(RunTool("--bogus").status, 2);
}

TEST(PsCommandTest, HelpDocumentsThePlacesAndTheJson) {
  const Command* ps = FindCommand("ps");
  ASSERT_NE(ps, nullptr);
  const std::string help = CommandHelp(*ps);
  for (const char* part : {"--json", "/tmp/vgpu-<uid>/ledger", "$XDG_RUNTIME_DIR/vgpu/run-*/ledger",
                           "/tmp/vgpu-<uid>/run-*/ledger", "$VGPU_LEDGER_DIRS", "Exit status", "\"oom_refusals\""}) {
    EXPECT_TRUE(Contains(help, part)) << part;
  }
}

}  // namespace
}  // namespace vgpu::cli
