// Limits: the authority's limits win over the environment's, disagreements are reported,
// rewrites keep charges and bindings, invalid limit sets are refused, and the conversion from
// the configuration.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include "common/config.h"
#include "ledger/ledger.h"
#include "ledger/ledger_test_util.h"
#include "ledger/limits_from_config.h"

namespace vgpu::ledger {
namespace {

using testing::kGiB;
using testing::kMiB;
using testing::TempDir;

LimitSet PerOrdinal(uint64_t ordinal0, Authority authority) {
  LimitSet limits = testing::Uniform(4 * kGiB, authority);
  limits.default_sm_limit = 50;
  limits.devices.push_back({0, "", ordinal0, 30, 60});
  return limits;
}

TEST(LedgerLimitsTest, TheAuthorityWinsAndADisagreementIsReported) {
  TempDir dir;
  const std::string path = dir.File("ledger");
  ASSERT_TRUE(Ledger::WriteLimits(path, PerOrdinal(kGiB, Authority::kVgpuRun)).ok);
  LedgerStatus status;
  std::string disagreement;
  std::unique_ptr<Ledger> ledger = Ledger::Open(path, PerOrdinal(2 * kGiB, Authority::kLibrary), &status, &disagreement);
  ASSERT_NE(ledger, nullptr) << status.message;
  EXPECT_NE(disagreement.find("device 0 memory limit 1 GiB vs 2 GiB"), std::string::npos) << disagreement;
  EXPECT_NE(disagreement.find("written by vgpu run"), std::string::npos) << disagreement;
  EXPECT_NE(disagreement.find(path), std::string::npos) << disagreement;
  EXPECT_NE(disagreement.find("the ledger's limits apply"), std::string::npos) << disagreement;
  std::string error;
  const int device = ledger->BindDevice(0, "GPU-0", &error);
  ASSERT_GE(device, 0) << error;
  EXPECT_EQ(ledger->MemoryLimit(device), kGiB);
  EXPECT_EQ(ledger->SmLimit(device), 30);
  EXPECT_EQ(ledger->Limits().authority, Authority::kVgpuRun);  // opening never demotes it
  const int other = ledger->BindDevice(1, "GPU-1", &error);
  EXPECT_EQ(ledger->MemoryLimit(other), 4 * kGiB);  // the defaults
  EXPECT_EQ(ledger->SmLimit(other), 50);

  // Every field is compared.
  LimitSet env = PerOrdinal(kGiB, Authority::kLibrary);
  env.devices[0].sm_soft_limit = 70;
  env.default_sm_limit = 0;
  env.task_priority = 0;
  env.devices[0].host_limit = kMiB;
  ledger = Ledger::Open(path, env, &status, &disagreement);
  ASSERT_NE(ledger, nullptr);
  EXPECT_NE(disagreement.find("device 0 soft compute limit 60% vs 70%"), std::string::npos) << disagreement;
  EXPECT_NE(disagreement.find("device 1 compute limit 50% vs unlimited"), std::string::npos) << disagreement;
  EXPECT_NE(disagreement.find("other devices: compute limit 50% vs unlimited"), std::string::npos) << disagreement;
  EXPECT_NE(disagreement.find("task priority 1 vs 0"), std::string::npos) << disagreement;
  EXPECT_NE(disagreement.find("device 0 host spill limit no spilling vs 1 MiB"), std::string::npos) << disagreement;
}

TEST(LedgerLimitsTest, AgreementIsSilentWhateverTheSpelling) {
  TempDir dir;
  const std::string path = dir.File("ledger");
  LimitSet authority = testing::Uniform(kGiB, Authority::kNodeDaemon);
  authority.devices.push_back({1, "GPU-1", kGiB, 0, 0});  // the same as the default
  ASSERT_TRUE(Ledger::WriteLimits(path, authority).ok);
  LedgerStatus status;
  std::string disagreement = "stale";
  ASSERT_NE(Ledger::Open(path, testing::Uniform(kGiB), &status, &disagreement), nullptr) << status.message;
  EXPECT_EQ(disagreement, "");
  EXPECT_EQ(CompareLimits(authority, testing::Uniform(kGiB)), "");
}

TEST(LedgerLimitsTest, TheFirstLibraryProcessWritesTheLimitsAndLaterOnesAreChecked) {
  TempDir dir;
  const std::string path = dir.File("ledger");
  std::unique_ptr<Ledger> first = testing::MustOpen(path, testing::Uniform(kGiB));
  EXPECT_EQ(first->Limits().authority, Authority::kLibrary);
  LedgerStatus status;
  std::string disagreement;
  std::unique_ptr<Ledger> second = Ledger::Open(path, testing::Uniform(2 * kGiB), &status, &disagreement);
  ASSERT_NE(second, nullptr);
  EXPECT_NE(disagreement.find("written by library"), std::string::npos) << disagreement;
  EXPECT_NE(disagreement.find("other devices: memory limit 1 GiB vs 2 GiB"), std::string::npos) << disagreement;
  EXPECT_EQ(second->Limits().default_memory_limit, kGiB);
}

// Process `pid` as Open's opener, stating limits or not.
Ledger::Opener OpenerOf(pid_t pid, bool states_limits) {
  Ledger::Opener opener;
  opener.pid = pid;
  opener.host_pid = pid;
  opener.start_time = ProcessStartTime(pid);
  opener.states_limits = states_limits;
  return opener;
}

// The calling process as Open's opener.
Ledger::Opener Self(bool states_limits) { return OpenerOf(getpid(), states_limits); }

// pids above the largest possible pid_max (2^22) never exist.
constexpr int32_t kDeadPid = 4194304 + 17;

TEST(LedgerLimitsTest, ALedgerThatFinishedRunsLeftTakesTheNextRunsLimits) {
  TempDir dir;
  const std::string path = dir.File("ledger");
  std::unique_ptr<Ledger> first = testing::MustOpen(path, testing::Uniform(kGiB));
  // A run that ended without unregistering, its memory not yet given back by the driver.
  const int dead = first->RegisterProcess(kDeadPid, kDeadPid, 1);
  std::string error;
  const int device = first->BindDevice(0, "GPU-0", &error);
  ASSERT_GE(dead, 0);
  ASSERT_TRUE(first->TryReserve(dead, device, 100 * kMiB));
  first.reset();

  LedgerStatus status;
  std::string disagreement = "stale", replaced;
  int slot = -1;
  const Ledger::Opener self = Self(true);
  std::unique_ptr<Ledger> next =
      Ledger::Open(path, testing::Uniform(2 * kGiB), &status, &disagreement, &self, &slot, &replaced);
  ASSERT_NE(next, nullptr) << status.message;
  EXPECT_EQ(disagreement, "");
  EXPECT_NE(replaced.find(path), std::string::npos) << replaced;
  EXPECT_NE(replaced.find("no live process"), std::string::npos) << replaced;
  EXPECT_NE(replaced.find("other devices: memory limit 1 GiB vs 2 GiB"), std::string::npos) << replaced;
  EXPECT_EQ(next->Limits().default_memory_limit, 2 * kGiB);
  EXPECT_EQ(next->Limits().authority, Authority::kLibrary);
  EXPECT_EQ(next->MemoryLimit(device), 2 * kGiB);
  EXPECT_EQ(next->DeviceUsed(device), 100 * kMiB) << "the dead run's memory stays charged until the driver frees it";
  ASSERT_GE(slot, 0);
  EXPECT_EQ(testing::RegisterSelf(next.get()), slot) << "the opener was registered";
}

TEST(LedgerLimitsTest, ALiveProcessKeepsTheLedgersLimits) {
  TempDir dir;
  const std::string path = dir.File("ledger");
  std::unique_ptr<Ledger> first = testing::MustOpen(path, testing::Uniform(kGiB));
  ASSERT_GE(testing::RegisterSelf(first.get()), 0);
  LedgerStatus status;
  std::string disagreement, replaced = "stale";
  const Ledger::Opener self = Self(true);
  std::unique_ptr<Ledger> second =
      Ledger::Open(path, testing::Uniform(2 * kGiB), &status, &disagreement, &self, nullptr, &replaced);
  ASSERT_NE(second, nullptr) << status.message;
  EXPECT_EQ(replaced, "");
  EXPECT_NE(disagreement.find("the ledger's limits apply"), std::string::npos) << disagreement;
  EXPECT_EQ(second->Limits().default_memory_limit, kGiB);
}

TEST(LedgerLimitsTest, AnOpenerRegisteredWhileTheLimitsAreCheckedHoldsThemAgainstTheNext) {
  TempDir dir;
  const std::string path = dir.File("ledger");
  testing::MustOpen(path, testing::Uniform(kGiB)).reset();  // a finished run's ledger, nobody in it
  // Another process opens it first, with other limits, and stays alive.
  const pid_t other = fork();
  if (other == 0) {
    pause();
    _exit(0);
  }
  ASSERT_GT(other, 0);
  const Ledger::Opener first = OpenerOf(other, true);
  LedgerStatus status;
  std::string disagreement, replaced;
  int slot = -1;
  ASSERT_NE(Ledger::Open(path, testing::Uniform(2 * kGiB), &status, &disagreement, &first, &slot, &replaced), nullptr);
  EXPECT_FALSE(replaced.empty());
  EXPECT_GE(slot, 0);
  // This process comes second: the first one is alive in the table, its limits stay.
  const Ledger::Opener self = Self(true);
  std::unique_ptr<Ledger> second =
      Ledger::Open(path, testing::Uniform(3 * kGiB), &status, &disagreement, &self, nullptr, &replaced);
  kill(other, SIGKILL);
  testing::WaitChild(other, 2000);
  ASSERT_NE(second, nullptr) << status.message;
  EXPECT_EQ(replaced, "");
  EXPECT_NE(disagreement.find("other devices: memory limit 2 GiB vs 3 GiB"), std::string::npos) << disagreement;
  EXPECT_EQ(second->Limits().default_memory_limit, 2 * kGiB);
}

TEST(LedgerLimitsTest, AnAuthoritysLimitsAndAnOpenerWithoutLimitsLeaveAnUnusedLedgerAsItIs) {
  TempDir dir;
  const std::string path = dir.File("ledger");
  ASSERT_TRUE(Ledger::WriteLimits(path, testing::Uniform(kGiB, Authority::kVgpuRun)).ok);
  LedgerStatus status;
  std::string disagreement, replaced;
  const Ledger::Opener states = Self(true);
  std::unique_ptr<Ledger> ledger =
      Ledger::Open(path, testing::Uniform(2 * kGiB), &status, &disagreement, &states, nullptr, &replaced);
  ASSERT_NE(ledger, nullptr) << status.message;
  EXPECT_EQ(replaced, "");
  EXPECT_NE(disagreement.find("written by vgpu run"), std::string::npos) << disagreement;
  EXPECT_EQ(ledger->Limits().default_memory_limit, kGiB);

  // A library ledger nobody holds, opened by a process that only names it (no limits of its own:
  // it joins the ledger's, never runs unlimited).
  const std::string joined = dir.File("joined");
  testing::MustOpen(joined, testing::Uniform(kGiB)).reset();
  const Ledger::Opener names = Self(false);
  ledger = Ledger::Open(joined, testing::Uniform(0), &status, &disagreement, &names, nullptr, &replaced);
  ASSERT_NE(ledger, nullptr) << status.message;
  EXPECT_EQ(replaced, "");
  EXPECT_EQ(ledger->Limits().default_memory_limit, kGiB);
}

TEST(LedgerLimitsTest, RewritingKeepsChargesIndicesAndBindings) {
  TempDir dir;
  const std::string path = dir.File("ledger");
  std::unique_ptr<Ledger> ledger = testing::MustOpen(path, testing::Uniform(kGiB));
  const int slot = testing::RegisterSelf(ledger.get());
  std::string error;
  const int d0 = ledger->BindDevice(0, "GPU-0", &error);
  const int d1 = ledger->BindDevice(1, "GPU-1", &error);
  ASSERT_TRUE(ledger->TryReserve(slot, d1, 600 * kMiB));

  LimitSet limits = testing::Uniform(512 * kMiB, Authority::kVgpuRun);
  limits.devices.push_back({-1, "GPU-1", 2 * kGiB, 40, 0});  // by uuid
  limits.devices.push_back({3, "", 3 * kGiB, 0, 0});          // a new ordinal
  ASSERT_TRUE(Ledger::WriteLimits(path, limits).ok);
  EXPECT_EQ(ledger->MemoryLimit(d0), 512 * kMiB);  // not listed: the new default
  EXPECT_EQ(ledger->MemoryLimit(d1), 2 * kGiB);
  EXPECT_EQ(ledger->SmLimit(d1), 40);
  EXPECT_EQ(ledger->DeviceUsed(d1), 600 * kMiB);
  EXPECT_EQ(ledger->SlotCharged(slot, d1), 600 * kMiB);
  EXPECT_EQ(ledger->BindDevice(1, "GPU-1", &error), d1);
  const int d3 = ledger->BindDevice(3, "GPU-3", &error);
  EXPECT_EQ(d3, 2);
  EXPECT_EQ(ledger->MemoryLimit(d3), 3 * kGiB);
  EXPECT_EQ(ledger->Limits().authority, Authority::kVgpuRun);

  // Lowering a limit below what is held refuses new charges but takes nothing away.
  limits.devices[0].memory_limit = 100 * kMiB;
  ASSERT_TRUE(Ledger::WriteLimits(path, limits).ok);
  EXPECT_FALSE(ledger->TryReserve(slot, d1, 1));
  EXPECT_EQ(ledger->DeviceUsed(d1), 600 * kMiB);

  // Host spill limits: per listed device, the default for the others; a rewrite keeps spills.
  EXPECT_EQ(ledger->HostLimit(d0), 0u);
  EXPECT_FALSE(ledger->TrySpill(slot, d1, 1));
  limits.default_host_limit = kGiB;
  limits.devices[0].host_limit = 64 * kMiB;
  ASSERT_TRUE(Ledger::WriteLimits(path, limits).ok);
  EXPECT_EQ(ledger->HostLimit(d0), kGiB);
  EXPECT_EQ(ledger->HostLimit(d1), 64 * kMiB);
  EXPECT_EQ(ledger->HostLimit(d3), 0u) << "listed without a host limit: the default does not apply";
  ASSERT_TRUE(ledger->TrySpill(slot, d1, 64 * kMiB));
  EXPECT_FALSE(ledger->TrySpill(slot, d1, 1));
  EXPECT_EQ(ledger->BindDevice(5, "GPU-5", &error), 3);
  EXPECT_EQ(ledger->HostLimit(3), kGiB) << "a device bound later gets the default host limit";
  limits.devices[0].host_limit = 0;
  ASSERT_TRUE(Ledger::WriteLimits(path, limits).ok);
  EXPECT_EQ(ledger->DeviceSpilled(d1), 64 * kMiB) << "switching spilling off takes nothing away";
  EXPECT_FALSE(ledger->TrySpill(slot, d1, 1));
  EXPECT_EQ(ledger->Limits().devices.at(d1).host_limit, 0u);
  EXPECT_EQ(ledger->Limits().default_host_limit, kGiB);
}

TEST(LedgerLimitsTest, AConflictingRewriteChangesNothing) {
  TempDir dir;
  const std::string path = dir.File("ledger");
  std::unique_ptr<Ledger> ledger = testing::MustOpen(path, testing::Uniform(kGiB));
  std::string error;
  const int d0 = ledger->BindDevice(0, "GPU-0", &error);
  ASSERT_TRUE(Ledger::WriteLimits(path, testing::Uniform(kGiB, Authority::kVgpuRun)).ok);

  LimitSet limits = testing::Uniform(5 * kGiB, Authority::kNodeDaemon);
  limits.devices.push_back({0, "GPU-other", kMiB, 0, 0});
  LedgerStatus status = Ledger::WriteLimits(path, limits);
  EXPECT_FALSE(status.ok);
  EXPECT_NE(status.message.find("ordinal 0 is bound to GPU-0 in the ledger, the limits say GPU-other"), std::string::npos)
      << status.message;
  limits.devices = {{7, "GPU-0", kMiB, 0, 0}};
  status = Ledger::WriteLimits(path, limits);
  EXPECT_NE(status.message.find("GPU-0 is ordinal 0 in the ledger, the limits say 7"), std::string::npos) << status.message;
  limits.devices = {{0, "", kMiB, 0, 0}, {-1, "GPU-0", kMiB, 0, 0}};
  status = Ledger::WriteLimits(path, limits);
  EXPECT_NE(status.message.find("describe the same device"), std::string::npos) << status.message;
  EXPECT_EQ(ledger->MemoryLimit(d0), kGiB);
  EXPECT_EQ(ledger->Limits().authority, Authority::kVgpuRun);
  EXPECT_EQ(ledger->Limits().default_memory_limit, kGiB);
}

TEST(LedgerLimitsTest, InvalidLimitSetsAreRefused) {
  struct Case {
    LimitSet limits;
    const char* problem;
  };
  auto with = [](DeviceLimit device) {
    LimitSet limits;
    limits.devices.push_back(device);
    return limits;
  };
  LimitSet too_many;
  for (int i = 0; i < 17; ++i) too_many.devices.push_back({-1, "GPU-" + std::to_string(i), 0, 0, 0});
  LimitSet twice;
  twice.devices = {{1, "", 0, 0, 0}, {1, "", 0, 0, 0}};
  LimitSet same_uuid;
  same_uuid.devices = {{1, "GPU-x", 0, 0, 0}, {2, "GPU-x", 0, 0, 0}};
  LimitSet priority;
  priority.task_priority = 101;
  LimitSet sm;
  sm.default_sm_limit = 101;
  LimitSet memory;
  memory.default_memory_limit = (uint64_t{1} << 63) + 1;
  LimitSet host;
  host.default_host_limit = (uint64_t{1} << 63) + 1;
  LimitSet authority;
  authority.authority = static_cast<Authority>(7);
  const Case cases[] = {
      {too_many, "17 devices, more than 16"},
      {twice, "ordinal 1 is listed twice"},
      {same_uuid, "uuid GPU-x is listed twice"},
      {priority, "task priority 101"},
      {sm, "percentages"},
      {memory, "above 2^63"},
      {host, "default host spill limit above 2^63"},
      {with({0, "", 0, 0, 0, (uint64_t{1} << 63) + 1}), "host spill limit above 2^63"},
      {authority, "unknown authority"},
      {with({16, "", 0, 0, 0}), "ordinal 16 is out of range"},
      {with({-2, "", 0, 0, 0}), "ordinal -2 is out of range"},
      {with({-1, "", 0, 0, 0}), "needs an ordinal or a uuid"},
      {with({0, std::string(64, 'u'), 0, 0, 0}), "longer than 63"},
      {with({0, "GPU x", 0, 0, 0}), "blank or non-ASCII"},
      {with({0, "", 0, -1, 0}), "percentages"},
      {with({0, "", 0, 0, 101}), "percentages"},
  };
  TempDir dir;
  for (const Case& c : cases) {
    const std::string problem = ValidateLimitSet(c.limits);
    EXPECT_NE(problem.find(c.problem), std::string::npos) << "wanted " << c.problem << ", got " << problem;
    const LedgerStatus status = Ledger::WriteLimits(dir.File("ledger"), c.limits);
    EXPECT_FALSE(status.ok);
    EXPECT_NE(status.message.find(c.problem), std::string::npos) << status.message;
    if (c.limits.authority != Authority::kLibrary) continue;  // Open states its own authority
    LedgerStatus open_status;
    EXPECT_EQ(Ledger::Open(dir.File("ledger"), c.limits, &open_status, nullptr), nullptr);
    EXPECT_NE(open_status.message.find("invalid limits from the environment"), std::string::npos);
  }
  EXPECT_EQ(ValidateLimitSet(PerOrdinal(kGiB, Authority::kNodeDaemon)), "");
}

ConfigResult Parse(std::vector<std::string> entries) {
  std::vector<const char*> envp;
  for (const std::string& entry : entries) envp.push_back(entry.c_str());
  envp.push_back(nullptr);
  return ParseEnviron(envp.data());
}

constexpr char kUuidA[] = "GPU-c496852d-f5df-316c-e2d5-86f0b322ec4c";
constexpr char kUuidB[] = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6";

TEST(LedgerLimitsTest, FromConfigHoldsEffectiveValuesPerListedOrdinal) {
  const ConfigResult parsed = Parse({"CUDA_DEVICE_MEMORY_LIMIT=2g", "CUDA_DEVICE_MEMORY_LIMIT_1=1g",
                                     "CUDA_DEVICE_SM_LIMIT=30", "CUDA_DEVICE_SM_LIMIT_2=100",
                                     "CUDA_CORE_SOFT_LIMIT=60", "CUDA_TASK_PRIORITY=0",
                                     "GPU_DEVICES_UUID=" + std::string(kUuidA) + "," + kUuidB});
  ASSERT_TRUE(parsed.ok()) << parsed.errors[0].Message();
  const LimitSet limits = LimitSetFromConfig(parsed.config, Authority::kLibrary);
  EXPECT_EQ(limits.default_memory_limit, 2 * kGiB);
  EXPECT_EQ(limits.default_sm_limit, 30);
  EXPECT_EQ(limits.default_sm_soft_limit, 60);
  EXPECT_EQ(limits.task_priority, 0);
  ASSERT_EQ(limits.devices.size(), 3u);
  EXPECT_EQ(limits.devices[0].ordinal, 0);
  EXPECT_EQ(limits.devices[0].uuid, kUuidA);
  EXPECT_EQ(limits.devices[0].memory_limit, 2 * kGiB);
  EXPECT_EQ(limits.devices[1].uuid, kUuidB);
  EXPECT_EQ(limits.devices[1].memory_limit, kGiB);
  EXPECT_EQ(limits.devices[1].sm_limit, 30);
  EXPECT_EQ(limits.devices[2].ordinal, 2);
  EXPECT_EQ(limits.devices[2].sm_limit, 0);  // explicitly unlimited
  EXPECT_EQ(ValidateLimitSet(limits), "");

  EXPECT_EQ(limits.default_host_limit, 0u);
  for (const DeviceLimit& device : limits.devices) EXPECT_EQ(device.host_limit, 0u);

  // Oversubscription: each device spills as much as its memory limit, or the host limit given.
  const ConfigResult spill = Parse({"CUDA_DEVICE_MEMORY_LIMIT=2g", "CUDA_DEVICE_MEMORY_LIMIT_1=1g", "CUDA_OVERSUBSCRIBE=1"});
  ASSERT_TRUE(spill.ok()) << spill.errors[0].Message();
  const LimitSet spill_limits = LimitSetFromConfig(spill.config, Authority::kLibrary);
  EXPECT_EQ(spill_limits.default_host_limit, 2 * kGiB);
  ASSERT_EQ(spill_limits.devices.size(), 1u);
  EXPECT_EQ(spill_limits.devices[0].host_limit, kGiB);
  const ConfigResult capped = Parse({"CUDA_DEVICE_MEMORY_LIMIT_1=1g", "CUDA_OVERSUBSCRIBE=1", "CUDA_OVERSUBSCRIBE_HOST_LIMIT=5g"});
  ASSERT_TRUE(capped.ok()) << capped.errors[0].Message();
  const LimitSet capped_limits = LimitSetFromConfig(capped.config, Authority::kLibrary);
  EXPECT_EQ(capped_limits.default_host_limit, 5 * kGiB);
  EXPECT_EQ(capped_limits.devices.at(0).host_limit, 5 * kGiB);
  const std::string diff = CompareLimits(spill_limits, capped_limits);
  EXPECT_NE(diff.find("device 1 host spill limit 1 GiB vs 5 GiB"), std::string::npos) << diff;
  EXPECT_NE(diff.find("other devices: memory limit 2 GiB vs unlimited; other devices: host spill limit 2 GiB vs 5 GiB"),
            std::string::npos) << diff;

  const ConfigResult disabled = Parse({"CUDA_DEVICE_MEMORY_LIMIT=2g", "CUDA_DISABLE_CONTROL=true"});
  ASSERT_TRUE(disabled.ok());
  const LimitSet none = LimitSetFromConfig(disabled.config, Authority::kLibrary);
  EXPECT_EQ(none.default_memory_limit, 0u);
  EXPECT_TRUE(none.devices.empty());
}

TEST(LedgerLimitsTest, AuthorityNames) {
  EXPECT_STREQ(AuthorityName(Authority::kLibrary), "library");
  EXPECT_STREQ(AuthorityName(Authority::kVgpuRun), "vgpu run");
  EXPECT_STREQ(AuthorityName(Authority::kNodeDaemon), "node daemon");
  EXPECT_STREQ(AuthorityName(static_cast<Authority>(9)), "unknown");
}

}  // namespace
}  // namespace vgpu::ledger
