// Admission, release, peaks, refusals, overhead, devices, bindings, registration, reclaim and
// lock recovery, one process (plus forked helpers) at a time.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>

#include "ledger/ledger.h"
#include "ledger/ledger_test_util.h"

namespace vgpu::ledger {
namespace {

using testing::kGiB;
using testing::kMiB;
using testing::TempDir;

class LedgerAdmissionTest : public ::testing::Test {
 protected:
  void Open(const LimitSet& limits) {
    ledger_ = testing::MustOpen(dir_.File("ledger"), limits);
    ASSERT_NE(ledger_, nullptr);
    slot_ = testing::RegisterSelf(ledger_.get());
    ASSERT_GE(slot_, 0);
    std::string error;
    device_ = ledger_->BindDevice(0, "GPU-0000", &error);
    ASSERT_GE(device_, 0) << error;
  }

  const DeviceUsage& Usage(const Snapshot& snapshot, int device) { return snapshot.devices.at(device); }

  // Forks a child that registers in this ledger, charges `bytes` on ordinal 0 and then runs `then`
  // (ForkCharger). Returns its pid once it answered: *answer is 'y' when it charged, 'n' when it
  // could not, 0 when it died before answering.
  pid_t StartCharger(uint64_t bytes, char* answer, void (*then)(Ledger*) = nullptr);

  ~LedgerAdmissionTest() override {
    if (ready_[0] >= 0) close(ready_[0]);
    if (ready_[1] >= 0) close(ready_[1]);
  }

  TempDir dir_;
  int ready_[2] = {-1, -1};  // the chargers' answers
  std::unique_ptr<Ledger> ledger_;
  int slot_ = -1;
  int device_ = -1;
};

TEST_F(LedgerAdmissionTest, ExactLimitReleaseRefusalsAndPeak) {
  Open(testing::Uniform(kMiB));
  EXPECT_EQ(ledger_->MemoryLimit(device_), kMiB);
  EXPECT_TRUE(ledger_->TryReserve(slot_, device_, kMiB - 4096));
  EXPECT_TRUE(ledger_->TryReserve(slot_, device_, 4096));  // exactly at the limit
  EXPECT_EQ(ledger_->DeviceUsed(device_), kMiB);
  EXPECT_FALSE(ledger_->TryReserve(slot_, device_, 1));    // one byte more
  EXPECT_TRUE(ledger_->TryReserve(slot_, device_, 0));     // nothing is always fine
  EXPECT_EQ(ledger_->DeviceUsed(device_), kMiB);
  EXPECT_EQ(ledger_->SlotCharged(slot_, device_), kMiB);
  Snapshot snapshot = ledger_->Read();
  EXPECT_EQ(Usage(snapshot, device_).oom_refusals, 1u);
  EXPECT_EQ(Usage(snapshot, device_).peak, kMiB);

  ledger_->Release(slot_, device_, kMiB / 2);
  EXPECT_EQ(ledger_->DeviceUsed(device_), kMiB / 2);
  EXPECT_FALSE(ledger_->TryReserve(slot_, device_, kMiB / 2 + 1));
  EXPECT_TRUE(ledger_->TryReserve(slot_, device_, kMiB / 2));
  ledger_->Release(slot_, device_, kMiB);
  EXPECT_EQ(ledger_->DeviceUsed(device_), 0u);
  snapshot = ledger_->Read();
  EXPECT_EQ(Usage(snapshot, device_).peak, kMiB);  // peak is history
  EXPECT_EQ(Usage(snapshot, device_).oom_refusals, 2u);
  EXPECT_TRUE(ledger_->Health().ok);
}

TEST_F(LedgerAdmissionTest, HugeRequestsNeitherOverflowNorPass) {
  Open(testing::Uniform(kMiB));
  EXPECT_FALSE(ledger_->TryReserve(slot_, device_, ~uint64_t{0}));
  EXPECT_TRUE(ledger_->TryReserve(slot_, device_, 100));
  EXPECT_FALSE(ledger_->TryReserve(slot_, device_, ~uint64_t{0} - 50));  // would wrap to below the limit
  EXPECT_EQ(ledger_->DeviceUsed(device_), 100u);
}

TEST_F(LedgerAdmissionTest, UnlimitedDeviceIsStillBoundedBy2To63) {
  Open(testing::Uniform(0));
  EXPECT_EQ(ledger_->MemoryLimit(device_), 0u);
  EXPECT_TRUE(ledger_->TryReserve(slot_, device_, 512 * kGiB));
  EXPECT_TRUE(ledger_->TryReserve(slot_, device_, (uint64_t{1} << 63) - 512 * kGiB));
  EXPECT_FALSE(ledger_->TryReserve(slot_, device_, 1));
}

TEST_F(LedgerAdmissionTest, OverheadCountsAgainstTheLimit) {
  Open(testing::Uniform(10 * kMiB));
  ledger_->SetOverhead(slot_, device_, 3 * kMiB);
  EXPECT_EQ(ledger_->DeviceUsed(device_), 3 * kMiB);
  EXPECT_EQ(ledger_->SlotOverhead(slot_, device_), 3 * kMiB);
  EXPECT_EQ(ledger_->SlotCharged(slot_, device_), 0u);
  EXPECT_FALSE(ledger_->TryReserve(slot_, device_, 7 * kMiB + 1));
  EXPECT_TRUE(ledger_->TryReserve(slot_, device_, 7 * kMiB));
  // Growth is recorded even past the limit (the memory exists), and then refuses everything.
  ledger_->SetOverhead(slot_, device_, 5 * kMiB);
  EXPECT_EQ(ledger_->DeviceUsed(device_), 12 * kMiB);
  EXPECT_FALSE(ledger_->TryReserve(slot_, device_, 1));
  EXPECT_EQ(ledger_->Read().devices[0].peak, 12 * kMiB);
  ledger_->SetOverhead(slot_, device_, kMiB);  // shrinking frees room
  EXPECT_EQ(ledger_->DeviceUsed(device_), 8 * kMiB);
  EXPECT_TRUE(ledger_->TryReserve(slot_, device_, 2 * kMiB));
  EXPECT_FALSE(ledger_->TryReserve(slot_, device_, 1));
}

// Oversubscription: spilled (host) bytes are a budget of their own, capped by the host limit,
// never part of `used`, so the device limit stays hard.
TEST_F(LedgerAdmissionTest, SpillHasItsOwnBudgetAndNeverTouchesDeviceUsage) {
  LimitSet limits = testing::Uniform(kMiB);
  limits.default_host_limit = 4 * kMiB;
  Open(limits);
  EXPECT_EQ(ledger_->HostLimit(device_), 4 * kMiB);
  ASSERT_TRUE(ledger_->TryReserve(slot_, device_, kMiB));
  EXPECT_FALSE(ledger_->TryReserve(slot_, device_, 1));
  EXPECT_TRUE(ledger_->TrySpill(slot_, device_, 3 * kMiB));
  EXPECT_TRUE(ledger_->TrySpill(slot_, device_, kMiB));       // exactly at the host limit
  EXPECT_FALSE(ledger_->TrySpill(slot_, device_, 1));         // one byte more
  EXPECT_FALSE(ledger_->TrySpill(slot_, device_, ~uint64_t{0}));
  EXPECT_TRUE(ledger_->TrySpill(slot_, device_, 0));
  EXPECT_EQ(ledger_->DeviceSpilled(device_), 4 * kMiB);
  EXPECT_EQ(ledger_->SlotSpilled(slot_, device_), 4 * kMiB);
  EXPECT_EQ(ledger_->DeviceUsed(device_), kMiB);               // the device figure is untouched
  EXPECT_EQ(ledger_->SlotCharged(slot_, device_), kMiB);
  Snapshot snapshot = ledger_->Read();
  EXPECT_EQ(Usage(snapshot, device_).spilled, 4 * kMiB);
  EXPECT_EQ(Usage(snapshot, device_).spill_peak, 4 * kMiB);
  EXPECT_EQ(Usage(snapshot, device_).spill_refusals, 2u);
  EXPECT_EQ(Usage(snapshot, device_).oom_refusals, 1u);        // counted apart
  EXPECT_EQ(Usage(snapshot, device_).host_limit, 4 * kMiB);
  EXPECT_EQ(Usage(snapshot, device_).peak, kMiB);
  ASSERT_EQ(snapshot.processes.size(), 1u);
  EXPECT_EQ(snapshot.processes[0].spilled[device_], 4 * kMiB);

  ledger_->ReleaseSpill(slot_, device_, 3 * kMiB);
  EXPECT_EQ(ledger_->DeviceSpilled(device_), kMiB);
  EXPECT_EQ(ledger_->DeviceUsed(device_), kMiB);
  EXPECT_TRUE(ledger_->TrySpill(slot_, device_, 3 * kMiB));
  ledger_->Release(slot_, device_, kMiB);                      // device frees leave the spill alone
  EXPECT_EQ(ledger_->DeviceSpilled(device_), 4 * kMiB);
  EXPECT_TRUE(ledger_->Health().ok) << ledger_->Health().message;
  ledger_->ReleaseSpill(slot_, device_, 5 * kMiB);             // more than held: clamped and reported
  EXPECT_EQ(ledger_->DeviceSpilled(device_), 0u);
  EXPECT_FALSE(ledger_->Health().ok);
  EXPECT_NE(ledger_->Health().message.find("release of spilled memory of 5242880 bytes"), std::string::npos)
      << ledger_->Health().message;
}

TEST_F(LedgerAdmissionTest, WithoutAHostLimitNothingSpills) {
  Open(testing::Uniform(kMiB));
  EXPECT_EQ(ledger_->HostLimit(device_), 0u);
  EXPECT_FALSE(ledger_->TrySpill(slot_, device_, 1));
  EXPECT_TRUE(ledger_->TrySpill(slot_, device_, 0));
  EXPECT_FALSE(ledger_->TrySpill(slot_ + 1, device_, 1));  // unregistered slot
  EXPECT_FALSE(ledger_->TrySpill(slot_, device_ + 1, 1));  // unbound device
  EXPECT_EQ(ledger_->DeviceSpilled(device_), 0u);
}

TEST_F(LedgerAdmissionTest, DevicesAreIndependent) {
  LimitSet limits = testing::Uniform(kMiB);
  limits.devices.push_back({1, "", 4 * kMiB, 30, 60});
  Open(limits);
  std::string error;
  const int other = ledger_->BindDevice(1, "GPU-1111", &error);
  ASSERT_GE(other, 0) << error;
  ASSERT_NE(other, device_);
  EXPECT_EQ(ledger_->MemoryLimit(other), 4 * kMiB);
  EXPECT_EQ(ledger_->SmLimit(other), 30);
  EXPECT_EQ(ledger_->SmSoftLimit(other), 60);
  EXPECT_EQ(ledger_->SmLimit(device_), 0);
  EXPECT_TRUE(ledger_->TryReserve(slot_, device_, kMiB));
  EXPECT_FALSE(ledger_->TryReserve(slot_, device_, 1));
  EXPECT_TRUE(ledger_->TryReserve(slot_, other, 4 * kMiB));
  EXPECT_FALSE(ledger_->TryReserve(slot_, other, 1));
  ledger_->Release(slot_, device_, kMiB);
  EXPECT_TRUE(ledger_->TryReserve(slot_, device_, kMiB));
  EXPECT_EQ(ledger_->DeviceUsed(other), 4 * kMiB);
  const Snapshot snapshot = ledger_->Read();
  EXPECT_EQ(snapshot.devices.at(device_).oom_refusals, 1u);
  EXPECT_EQ(snapshot.devices.at(other).oom_refusals, 1u);
}

TEST_F(LedgerAdmissionTest, InvalidSlotsAndDevicesAreRefusedWithoutCounting) {
  Open(testing::Uniform(kMiB));
  EXPECT_FALSE(ledger_->TryReserve(-1, device_, 1));
  EXPECT_FALSE(ledger_->TryReserve(slot_ + 1, device_, 1));  // never registered
  EXPECT_FALSE(ledger_->TryReserve(kLedgerMaxProcesses, device_, 1));
  EXPECT_FALSE(ledger_->TryReserve(slot_, 1, 1));            // not bound
  EXPECT_FALSE(ledger_->TryReserve(slot_, -1, 1));
  EXPECT_FALSE(ledger_->TryReserve(slot_, kLedgerMaxDevices, 1));
  EXPECT_EQ(ledger_->Read().devices[0].oom_refusals, 0u);
  EXPECT_EQ(ledger_->MemoryLimit(-1), 0u);
  EXPECT_EQ(ledger_->DeviceUsed(99), 0u);
  EXPECT_EQ(ledger_->SlotCharged(-1, 0), 0u);
}

TEST_F(LedgerAdmissionTest, OverReleaseIsClampedAndReported) {
  Open(testing::Uniform(kMiB));
  ASSERT_TRUE(ledger_->TryReserve(slot_, device_, 100));
  ledger_->Release(slot_, device_, 300);
  EXPECT_EQ(ledger_->DeviceUsed(device_), 0u);
  EXPECT_EQ(ledger_->SlotCharged(slot_, device_), 0u);
  EXPECT_FALSE(ledger_->Health().ok);
  EXPECT_NE(ledger_->Health().message.find("release of 300 bytes"), std::string::npos) << ledger_->Health().message;
}

TEST_F(LedgerAdmissionTest, BindDeviceResolvesUuidsFirstAndReportsConflicts) {
  LimitSet limits = testing::Uniform(kMiB);
  limits.devices.push_back({2, "", 2 * kMiB, 0, 0});
  limits.devices.push_back({-1, "GPU-byuuid", 3 * kMiB, 0, 0});
  Open(limits);  // binds ordinal 0 to GPU-0000 (a new record: 0 and 1 are the configured ones)
  std::string error;
  EXPECT_EQ(ledger_->BindDevice(0, "GPU-0000", &error), device_);  // idempotent
  const int configured = ledger_->BindDevice(2, "GPU-2222", &error);
  EXPECT_EQ(ledger_->MemoryLimit(configured), 2 * kMiB) << error;
  EXPECT_EQ(ledger_->BindDevice(2, "GPU-2222", &error), configured);
  // The same ordinal with another uuid: an error naming both.
  EXPECT_EQ(ledger_->BindDevice(0, "GPU-ffff", &error), -1);
  EXPECT_NE(error.find("GPU-0000"), std::string::npos) << error;
  EXPECT_NE(error.find("GPU-ffff"), std::string::npos) << error;
  EXPECT_NE(error.find(dir_.File("ledger")), std::string::npos) << error;
  // A bound uuid seen at another ordinal (narrower CUDA_VISIBLE_DEVICES): the same budget.
  EXPECT_EQ(ledger_->BindDevice(5, "GPU-2222", &error), configured);
  // A device configured by uuid takes the first ordinal it is seen at.
  const int by_uuid = ledger_->BindDevice(3, "GPU-byuuid", &error);
  ASSERT_GE(by_uuid, 0) << error;
  EXPECT_EQ(ledger_->MemoryLimit(by_uuid), 3 * kMiB);
  EXPECT_EQ(ledger_->Read().devices[by_uuid].ordinal, 3);
  EXPECT_EQ(ledger_->BindDevice(-1, "GPU-x", &error), -1);
  EXPECT_EQ(ledger_->BindDevice(0, "", &error), -1);
  EXPECT_EQ(ledger_->BindDevice(0, "GPU with blanks", &error), -1);
  EXPECT_EQ(ledger_->BindDevice(0, std::string(64, 'x'), &error), -1);
  // Every remaining ordinal binds; then every ordinal has its record.
  for (const int ordinal : {1, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}) {
    ASSERT_GE(ledger_->BindDevice(ordinal, "GPU-fill-" + std::to_string(ordinal), &error), 0) << error;
  }
  EXPECT_EQ(ledger_->DeviceCount(), kLedgerMaxDevices);
}

TEST_F(LedgerAdmissionTest, BindDeviceReportsAFullTable) {
  LimitSet limits = testing::Uniform(kMiB);
  for (int i = 0; i < kLedgerMaxDevices; ++i) limits.devices.push_back({-1, "GPU-u" + std::to_string(i), kMiB, 0, 0});
  ASSERT_TRUE(Ledger::WriteLimits(dir_.File("full"), limits).ok);
  std::unique_ptr<Ledger> ledger = testing::MustOpen(dir_.File("full"), limits);
  std::string error;
  EXPECT_EQ(ledger->BindDevice(0, "GPU-u7", &error), 7);
  EXPECT_EQ(ledger->BindDevice(1, "GPU-new", &error), -1);
  EXPECT_NE(error.find("all 16 device records are in use"), std::string::npos) << error;
}

TEST(ProcStatTest, ParsesStateAndStartTimeAfterTheLastParenthesis) {
  // 22 fields; comm holds a space and ") S 1", which a split at the first ')' would take for
  // the state and the next fields.
  const char* text = "4242 (evil) S 1 (x) Z 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 123456789 99 100\n";
  char state = '?';
  uint64_t start = 0;
  ASSERT_TRUE(ParseProcStat(text, &state, &start));
  EXPECT_EQ(state, 'Z');
  EXPECT_EQ(start, 123456789u);
  // Our own stat file agrees with ProcessStartTime.
  EXPECT_GT(ProcessStartTime(getpid()), 0u);
  // Malformed: no ')', nothing after it, too few fields, a non-number; outputs untouched.
  for (const char* bad : {"4242 comm S 1 2", "4242 (comm)", "4242 (comm) S 1 2 3", "4242 (comm) S 1 2 3 4 5 6 7 8 9 "
                          "10 11 12 13 14 15 16 17 18 x 20"}) {
    state = '?';
    start = 7;
    EXPECT_FALSE(ParseProcStat(bad, &state, &start)) << bad;
    EXPECT_EQ(state, '?') << bad;
    EXPECT_EQ(start, 7u) << bad;
  }
}

TEST_F(LedgerAdmissionTest, RegistrationIsPerProcessIdentity) {
  Open(testing::Uniform(kMiB));
  const uint64_t start = ProcessStartTime(getpid());
  EXPECT_EQ(ledger_->RegisterProcess(getpid(), getpid(), start), slot_);  // idempotent
  ASSERT_TRUE(ledger_->TryReserve(slot_, device_, 1000));
  // The same pid with another start time is a new process: the old charges go.
  const int reused = ledger_->RegisterProcess(getpid(), 77, start + 1);
  ASSERT_GE(reused, 0);
  EXPECT_EQ(ledger_->DeviceUsed(device_), 0u);
  EXPECT_EQ(ledger_->Read().processes.at(0).host_pid, 77);
  EXPECT_EQ(ledger_->RegisterProcess(0, 0, 0), -1);
  EXPECT_EQ(ledger_->RegisterProcess(-3, 0, 0), -1);
  ASSERT_TRUE(ledger_->TryReserve(reused, device_, 500));
  ledger_->SetOverhead(reused, device_, 200);
  ledger_->UnregisterProcess(reused);
  EXPECT_EQ(ledger_->DeviceUsed(device_), 0u);
  EXPECT_EQ(ledger_->DeviceSpilled(device_), 0u);
  EXPECT_TRUE(ledger_->Read().processes.empty());
  EXPECT_FALSE(ledger_->TryReserve(reused, device_, 1));  // unregistered slots cannot charge
}

TEST_F(LedgerAdmissionTest, AFullTableReclaimsTheDeadToMakeRoom) {
  Open(testing::Uniform(kMiB));
  // pids above the largest possible pid_max (2^22) never exist: these "processes" are dead.
  // A periodic scan during the fill (a loaded machine) would reclaim some: fill again then.
  int next = 1;
  for (int round = 0; round < 5 && ledger_->Read().processes.size() < kLedgerMaxProcesses; ++round) {
    for (size_t have = ledger_->Read().processes.size(); have < kLedgerMaxProcesses; ++have) {
      ASSERT_GE(ledger_->RegisterProcess(4194304 + next++, 0, 1), 0);
    }
  }
  ASSERT_EQ(ledger_->Read().processes.size(), static_cast<size_t>(kLedgerMaxProcesses));
  // Registering one more finds the table full, reclaims, and succeeds.
  EXPECT_GE(ledger_->RegisterProcess(4194304 + 5000, 0, 1), 0);
  EXPECT_LE(ledger_->Read().processes.size(), 2u);
}

// Forks a child that registers, charges `bytes` on ordinal 0 and then runs `then` (never returns).
pid_t ForkCharger(const std::string& path, uint64_t bytes, int ready_fd, void (*then)(Ledger*)) {
  const pid_t child = fork();
  if (child != 0) return child;
  LedgerStatus status;
  std::unique_ptr<Ledger> ledger = Ledger::Open(path, testing::Uniform(kGiB), &status, nullptr);
  std::string error;
  const int slot = ledger ? testing::RegisterSelf(ledger.get()) : -1;
  const int device = ledger ? ledger->BindDevice(0, "GPU-0000", &error) : -1;
  // Spills as much as it charges where the ledger allows spilling.
  const bool ok = slot >= 0 && device >= 0 && ledger->TryReserve(slot, device, bytes) &&
                  (ledger->HostLimit(device) == 0 || ledger->TrySpill(slot, device, bytes));
  const char c = ok ? 'y' : 'n';
  (void)!write(ready_fd, &c, 1);
  if (ok && then != nullptr) then(ledger.get());
  _exit(ok ? 0 : 1);
}

pid_t LedgerAdmissionTest::StartCharger(uint64_t bytes, char* answer, void (*then)(Ledger*)) {
  *answer = 0;
  if (ready_[0] < 0 && pipe(ready_) != 0) return -1;
  const pid_t child = ForkCharger(dir_.File("ledger"), bytes, ready_[1], then);
  if (read(ready_[0], answer, 1) != 1) *answer = 0;
  return child;
}

// A reading of the driver taken after a dead process was found dead.
uint64_t ReadingAfterNow() {
  usleep(1'000);
  return Ledger::ClockNs();
}

TEST_F(LedgerAdmissionTest, DeadProcessesDrainUntilTheDriverNoLongerListsThem) {
  Open(testing::Uniform(kGiB));
  char c = 0;
  const pid_t child = StartCharger(100 * kMiB, &c);
  ASSERT_EQ(c, 'y');
  EXPECT_EQ(ledger_->DeviceUsed(device_), 100 * kMiB);
  // The child has exited without unregistering; unreaped it is a zombie, which counts as dead.
  // Its memory is not free yet: the driver tears its context down after it is gone.
  for (int i = 0; i < 2000 && IsProcessAlive(child, 0); ++i) usleep(1000);
  EXPECT_EQ(ledger_->ReclaimDead(), 0);
  EXPECT_EQ(ledger_->DeviceUsed(device_), 100 * kMiB);
  Snapshot snapshot = ledger_->Read();
  ASSERT_EQ(snapshot.processes.size(), 2u);
  EXPECT_TRUE(snapshot.processes.at(1).draining);
  EXPECT_FALSE(snapshot.processes.at(0).draining);
  // A reading that still lists it keeps the charge; so does one taken before it was found dead.
  const Ledger::DriverProcess listed[] = {{getpid(), 0}, {child, 100 * kMiB}};
  EXPECT_EQ(ledger_->ApplyDriverView(device_, listed, 2, ReadingAfterNow()), 0);
  EXPECT_EQ(ledger_->ApplyDriverView(device_, nullptr, 0, 1), 0);
  EXPECT_EQ(ledger_->DeviceUsed(device_), 100 * kMiB);
  // Gone from the driver's list: the charge comes back.
  EXPECT_EQ(ledger_->ApplyDriverView(device_, listed, 1, ReadingAfterNow()), 1);
  EXPECT_EQ(ledger_->DeviceUsed(device_), 0u);
  snapshot = ledger_->Read();
  EXPECT_EQ(snapshot.reclaimed_processes, 1u);
  EXPECT_EQ(snapshot.processes.size(), 1u);
  EXPECT_EQ(testing::WaitChild(child, 5000), 0);
  EXPECT_EQ(ledger_->ReclaimDead(), 0);
}

TEST_F(LedgerAdmissionTest, ADrainingProcessNobodyConfirmsIsFreedAfterTheTimeout) {
  Open(testing::Uniform(kGiB));
  char c = 0;
  const pid_t child = StartCharger(100 * kMiB, &c);
  ASSERT_EQ(c, 'y');
  ASSERT_EQ(testing::WaitChild(child, 5000), 0);
  EXPECT_EQ(ledger_->ReclaimDead(), 0);
  EXPECT_EQ(ledger_->DeviceUsed(device_), 100 * kMiB);
  usleep(static_cast<useconds_t>(kDrainTimeoutNs / 1000 + 20'000));
  EXPECT_EQ(ledger_->ReclaimDead(), 1);
  EXPECT_EQ(ledger_->DeviceUsed(device_), 0u);
}

TEST_F(LedgerAdmissionTest, ADeadProcessHoldingNoDeviceMemoryIsFreedAtOnce) {
  Open(testing::Uniform(kGiB));
  char c = 0;
  const pid_t child = StartCharger(0, &c);
  ASSERT_EQ(c, 'y');
  ASSERT_EQ(testing::WaitChild(child, 5000), 0);
  EXPECT_EQ(ledger_->ReclaimDead(), 1);
}

TEST_F(LedgerAdmissionTest, TheDriversFigureRaisesAnotherProcesssOverheadNeverLowersIt) {
  Open(testing::Uniform(kGiB));
  ASSERT_TRUE(ledger_->TryReserve(slot_, device_, 100 * kMiB));
  ledger_->SetOverhead(slot_, device_, 50 * kMiB);
  // The driver attributes more than the slot holds: lazily loaded modules its process has not
  // reconciled yet. They count from now on.
  const Ledger::DriverProcess more[] = {{getpid(), 230 * kMiB}};
  ledger_->ApplyDriverView(device_, more, 1, Ledger::ClockNs());
  EXPECT_EQ(ledger_->SlotOverhead(slot_, device_), 130 * kMiB);
  EXPECT_EQ(ledger_->DeviceUsed(device_), 230 * kMiB);
  // Less than it holds (its charges in flight are invisible to others): nothing changes.
  const Ledger::DriverProcess less[] = {{getpid(), 10 * kMiB}};
  ledger_->ApplyDriverView(device_, less, 1, Ledger::ClockNs());
  EXPECT_EQ(ledger_->SlotOverhead(slot_, device_), 130 * kMiB);
}

TEST_F(LedgerAdmissionTest, HeadroomIsKeptFreeUnderALimitOnly) {
  Open(testing::Uniform(kGiB));
  EXPECT_FALSE(ledger_->TryReserve(slot_, device_, kGiB - 64 * kMiB, 128 * kMiB));
  EXPECT_TRUE(ledger_->TryReserve(slot_, device_, kGiB - 128 * kMiB, 128 * kMiB));
  EXPECT_FALSE(ledger_->TryReserve(slot_, device_, 1, 128 * kMiB));
  EXPECT_TRUE(ledger_->TryReserve(slot_, device_, 64 * kMiB));  // no headroom asked
  EXPECT_EQ(ledger_->Read().devices.at(device_).oom_refusals, 2u);
}

TEST_F(LedgerAdmissionTest, ContextSizeIsTheLargestNoted) {
  Open(testing::Uniform(kGiB));
  EXPECT_EQ(ledger_->ContextBytes(device_), 0u);
  ledger_->NoteContextBytes(device_, 518 * kMiB);
  ledger_->NoteContextBytes(device_, 300 * kMiB);
  EXPECT_EQ(ledger_->ContextBytes(device_), 518 * kMiB);
  EXPECT_EQ(ledger_->Read().devices.at(device_).context_bytes, 518 * kMiB);
  ledger_->NoteContextBytes(99, kMiB);  // out of range: ignored
}

TEST_F(LedgerAdmissionTest, ADeadProcesssSpillIsReturnedAtOnceAndARefusedSpillReclaims) {
  LimitSet limits = testing::Uniform(kGiB);
  limits.default_host_limit = 100 * kMiB;
  Open(limits);
  char c = 0;
  const pid_t child = StartCharger(100 * kMiB, &c);
  ASSERT_EQ(c, 'y');
  EXPECT_EQ(ledger_->DeviceSpilled(device_), 100 * kMiB);
  ASSERT_EQ(testing::WaitChild(child, 5000), 0);
  // The host budget is full, but its holder is dead: the refused spill scans and retries. Its
  // host bytes come back at once; its device bytes drain until the driver lets them go.
  EXPECT_TRUE(ledger_->TrySpill(slot_, device_, 100 * kMiB));
  const Snapshot snapshot = ledger_->Read();
  EXPECT_EQ(snapshot.devices.at(device_).spill_refusals, 0u);
  EXPECT_EQ(snapshot.devices.at(device_).spilled, 100 * kMiB);
  EXPECT_EQ(snapshot.devices.at(device_).used, 100 * kMiB);
  ASSERT_EQ(snapshot.processes.size(), 2u);
  EXPECT_TRUE(snapshot.processes.at(1).draining);
}

TEST_F(LedgerAdmissionTest, ARefusalReclaimsImmediatelyAndTheIntervalReclaimsAnyway) {
  Open(testing::Uniform(100 * kMiB));
  char c = 0;
  pid_t child = StartCharger(100 * kMiB, &c);
  ASSERT_NE(c, 0);  // it answered
  ASSERT_EQ(testing::WaitChild(child, 5000), 0);
  // Full, but the holder is dead: the refused reservation scans at once (the slot drains) and,
  // once the driver no longer lists it, the next one is admitted.
  EXPECT_FALSE(ledger_->TryReserve(slot_, device_, 100 * kMiB));
  EXPECT_EQ(ledger_->ApplyDriverView(device_, nullptr, 0, ReadingAfterNow()), 1);
  EXPECT_TRUE(ledger_->TryReserve(slot_, device_, 100 * kMiB));
  EXPECT_EQ(ledger_->Read().devices.at(device_).oom_refusals, 1u);
  ledger_->Release(slot_, device_, 100 * kMiB);

  child = StartCharger(10 * kMiB, &c);
  ASSERT_NE(c, 0);
  ASSERT_EQ(testing::WaitChild(child, 5000), 0);
  EXPECT_EQ(ledger_->DeviceUsed(device_), 10 * kMiB);
  usleep(static_cast<useconds_t>(kReclaimIntervalNs / 1000 + 50'000));
  EXPECT_TRUE(ledger_->TryReserve(slot_, device_, 1));  // any lock after the interval scans: it drains
  EXPECT_EQ(ledger_->DeviceUsed(device_), 10 * kMiB + 1);
  usleep(static_cast<useconds_t>(kDrainTimeoutNs / 1000 + 20'000));
  EXPECT_TRUE(ledger_->TryReserve(slot_, device_, 1));  // nobody read the driver: the timeout frees it
  EXPECT_EQ(ledger_->DeviceUsed(device_), 2u);
}

TEST_F(LedgerAdmissionTest, AProcessKilledHoldingTheLockIsRecoveredFrom) {
  LimitSet limits = testing::Uniform(kGiB);
  limits.default_host_limit = kGiB;  // the dead process also spilled: recovery returns both
  Open(limits);
  char c = 0;
  const pid_t child = StartCharger(300 * kMiB, &c, [](Ledger* ledger) {
    ledger->HoldLockForTesting(60'000'000'000, [](void*) { (void)!write(STDOUT_FILENO, "", 0); }, nullptr);
  });
  ASSERT_EQ(c, 'y');
  usleep(100'000);  // let it take the lock
  kill(child, SIGKILL);
  const auto start = std::chrono::steady_clock::now();
  // Only possible once the dead charge is gone. The kernel hands the lock over (EOWNERDEAD)
  // while the child is still exiting, before it is a zombie, and an exiting process counts as
  // alive (its GPU memory is not freed yet): the reservation may need a few tries.
  bool admitted = false;
  while (!admitted && std::chrono::steady_clock::now() - start < std::chrono::seconds(2)) {
    admitted = ledger_->TryReserve(slot_, device_, kGiB - 1);
    if (!admitted) usleep(1000);
  }
  EXPECT_TRUE(admitted);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_LT(waited, std::chrono::seconds(2));
  const Snapshot snapshot = ledger_->Read();
  EXPECT_EQ(snapshot.lock_recoveries, 1u);
  EXPECT_EQ(snapshot.devices[0].used, kGiB - 1);
  EXPECT_EQ(snapshot.devices[0].spilled, 0u);
  EXPECT_EQ(snapshot.processes.size(), 1u);
  EXPECT_TRUE(ledger_->Health().ok) << ledger_->Health().message;
  testing::WaitChild(child, 5000);
}

TEST_F(LedgerAdmissionTest, HotPathIsCheap) {
  Open(testing::Uniform(kGiB));
  constexpr int kPairs = 200000;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kPairs; ++i) {
    if (!ledger_->TryReserve(slot_, device_, 4096)) FAIL() << i;
    ledger_->Release(slot_, device_, 4096);
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / kPairs;
  std::cout << "reserve+release: " << ns << " ns per pair\n";
  EXPECT_LT(ns, 5000.0);  // generous: ~100 ns on an idle machine; this only catches syscalls per call
  EXPECT_EQ(ledger_->DeviceUsed(device_), 0u);
}

}  // namespace
}  // namespace vgpu::ledger
