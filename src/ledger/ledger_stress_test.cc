// Stress: 8 processes x 4 threads reserve and release at random on one ledger while the parent
// SIGKILLs random children (some while they hold the ledger lock) and starts replacements.
//
// Checked throughout: no device total ever exceeds its limit (each child after every admitted
// reservation; the parent under the lock, and independently from the children's own tallies),
// no operation waits unboundedly, a killed child's bytes are reclaimed by the survivors within
// 1 s, and at the end every survivor's tally equals its ledger charge and the ledger returns to
// zero. Duration: $VGPU_STRESS_SECONDS (default 10).
//
// Children are fork()ed and never return into gtest: they always _exit.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "ledger/ledger.h"
#include "ledger/ledger_test_util.h"

namespace vgpu::ledger {
namespace {

using testing::kMiB;
using testing::TempDir;

constexpr int kProcesses = 8;
constexpr int kThreads = 4;
constexpr int kDevices = 2;
constexpr uint64_t kLimits[kDevices] = {8 * kMiB, 2 * kMiB};
constexpr int kMaxChildren = 2048;
// Nobody reads a driver here, so a killed child's slot drains until kDrainTimeoutNs passed and
// the next scan (at most kReclaimIntervalNs later) frees it.
constexpr int64_t kMaxReclaimNs = kDrainTimeoutNs + 2 * kReclaimIntervalNs;
constexpr int64_t kMaxOpNs = 5'000'000'000;  // under kLockTimeoutNs: a timeout would show up here

enum ChildState : uint32_t { kStarting, kRunning, kQuiesced, kDone, kFailed };
enum Phase : uint32_t { kRun, kQuiesce, kFinish };

struct ChildRecord {
  std::atomic<int32_t> pid;
  std::atomic<int32_t> slot;
  std::atomic<uint32_t> state;
  std::atomic<uint32_t> holding_lock;
  std::atomic<uint64_t> held[kDevices];  // the child's own tally: admitted minus released
  std::atomic<uint64_t> ops;
  char failure[240];
};

struct Shared {
  std::atomic<uint32_t> phase;
  std::atomic<int64_t> max_op_ns;
  ChildRecord children[kMaxChildren];
};

int64_t NowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void RaiseMax(std::atomic<int64_t>* max, int64_t value) {
  int64_t seen = max->load();
  while (value > seen && !max->compare_exchange_weak(seen, value)) {
  }
}

[[noreturn]] void ChildFail(ChildRecord* me, const char* what) {
  snprintf(me->failure, sizeof(me->failure), "pid %d: %s", getpid(), what);
  me->state.store(kFailed);
  _exit(1);
}

struct Held {
  int device;
  uint64_t bytes;
};

// One worker thread: random reservations (4 KiB .. 256 KiB) and releases until the phase ends.
void WorkerThread(Ledger* ledger, Shared* shared, ChildRecord* me, const int* devices, int slot, unsigned seed,
                  std::vector<Held>* mine) {
  std::mt19937 random(seed);
  while (shared->phase.load(std::memory_order_relaxed) == kRun) {
    const int64_t start = NowNs();
    if (!mine->empty() && random() % 2 == 0) {
      const size_t pick = random() % mine->size();
      const Held held = (*mine)[pick];
      (*mine)[pick] = mine->back();
      mine->pop_back();
      me->held[held.device].fetch_sub(held.bytes);  // tally first: it never exceeds the charge
      ledger->Release(slot, devices[held.device], held.bytes);
    } else {
      const int d = static_cast<int>(random() % kDevices);
      const uint64_t bytes = 4096 * (1 + random() % 64);
      if (ledger->TryReserve(slot, devices[d], bytes)) {
        me->held[d].fetch_add(bytes);
        mine->push_back({d, bytes});
        if (ledger->DeviceUsed(devices[d]) > kLimits[d]) ChildFail(me, "device total above its limit");
      }
    }
    RaiseMax(&shared->max_op_ns, NowNs() - start);
    me->ops.fetch_add(1, std::memory_order_relaxed);
    // A short pause, as a real program computes between allocations. Without it 32 threads in a
    // tight lock/unlock loop on a small machine starve each other for seconds (the mutex is not
    // fair: the releasing thread re-acquires before a woken waiter runs).
    const struct timespec pause = {0, static_cast<long>(random() % 20'000)};
    nanosleep(&pause, nullptr);
  }
}

// Opens, registers and binds; fails the child on any error.
std::unique_ptr<Ledger> ChildSetUp(const std::string& path, ChildRecord* me, int* slot, int* devices) {
  LedgerStatus status;
  std::unique_ptr<Ledger> ledger = Ledger::Open(path, testing::Uniform(kMiB), &status, nullptr);
  if (ledger == nullptr) ChildFail(me, status.message.c_str());
  *slot = testing::RegisterSelf(ledger.get());
  if (*slot < 0) ChildFail(me, "cannot register");
  for (int d = 0; d < kDevices; ++d) {
    std::string error;
    devices[d] = ledger->BindDevice(d, "GPU-stress-" + std::to_string(d), &error);
    if (devices[d] < 0) ChildFail(me, error.c_str());
  }
  me->slot.store(*slot);
  return ledger;
}

bool WaitForPhase(Shared* shared, uint32_t phase, int64_t timeout_ns) {
  const int64_t deadline = NowNs() + timeout_ns;
  while (shared->phase.load() < phase) {
    if (NowNs() > deadline) return false;
    usleep(1000);
  }
  return true;
}

[[noreturn]] void WorkerChild(const std::string& path, Shared* shared, ChildRecord* me) {
  int slot = -1;
  int devices[kDevices];
  std::unique_ptr<Ledger> ledger = ChildSetUp(path, me, &slot, devices);
  me->state.store(kRunning);
  std::vector<std::vector<Held>> held(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back(WorkerThread, ledger.get(), shared, me, devices, slot,
                         static_cast<unsigned>(getpid() * 131 + t), &held[t]);
  }
  for (std::thread& thread : threads) thread.join();
  me->state.store(kQuiesced);
  if (!WaitForPhase(shared, kFinish, 120'000'000'000)) ChildFail(me, "never told to finish");
  for (const std::vector<Held>& list : held) {
    for (const Held& h : list) {
      me->held[h.device].fetch_sub(h.bytes);
      ledger->Release(slot, devices[h.device], h.bytes);
    }
  }
  for (int d = 0; d < kDevices; ++d) {
    if (ledger->SlotCharged(slot, devices[d]) != 0) ChildFail(me, "charge left after releasing everything");
  }
  if (!ledger->Health().ok) ChildFail(me, ledger->Health().message.c_str());
  ledger->UnregisterProcess(slot);
  me->state.store(kDone);
  _exit(0);
}

// Charges a little, then takes the lock and sleeps in it until killed.
[[noreturn]] void LockHolderChild(const std::string& path, ChildRecord* me) {
  int slot = -1;
  int devices[kDevices];
  std::unique_ptr<Ledger> ledger = ChildSetUp(path, me, &slot, devices);
  if (ledger->TryReserve(slot, devices[0], 64 * 1024)) me->held[0].fetch_add(64 * 1024);
  me->state.store(kRunning);
  ledger->HoldLockForTesting(
      60'000'000'000, [](void* arg) { static_cast<ChildRecord*>(arg)->holding_lock.store(1); }, me);
  ChildFail(me, "was not killed while holding the lock");
}

class LedgerStressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    void* map = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(map, MAP_FAILED);
    shared_ = static_cast<Shared*>(map);  // zero-filled: every atomic starts at 0
    path_ = dir_.File("ledger");
    LimitSet limits = testing::Uniform(kMiB, Authority::kVgpuRun);
    for (int d = 0; d < kDevices; ++d) limits.devices.push_back({d, "GPU-stress-" + std::to_string(d), kLimits[d], 0, 0});
    ASSERT_TRUE(Ledger::WriteLimits(path_, limits).ok);
    LedgerStatus status;
    monitor_ = Ledger::Open(path_, testing::Uniform(kMiB), &status, nullptr);
    ASSERT_NE(monitor_, nullptr) << status.message;
    observer_ = Ledger::OpenReadOnly(path_, &status);
    ASSERT_NE(observer_, nullptr) << status.message;
    const char* seconds = getenv("VGPU_STRESS_SECONDS");
    duration_s_ = seconds != nullptr && atoi(seconds) > 0 ? atoi(seconds) : 10;
  }
  void TearDown() override {
    for (int i = 0; i < next_child_; ++i) {
      const pid_t pid = shared_->children[i].pid.load();
      if (pid > 0 && waitpid(pid, nullptr, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
    munmap(shared_, sizeof(Shared));
  }

  // Forks a child running `body`; returns its record index.
  int Spawn(bool lock_holder) {
    const int index = next_child_++;
    if (index >= kMaxChildren) return -1;
    ChildRecord* me = &shared_->children[index];
    fflush(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      if (lock_holder) LockHolderChild(path_, me);
      WorkerChild(path_, shared_, me);
    }
    me->pid.store(pid);
    if (!lock_holder) live_.push_back(index);
    return index;
  }

  static bool WaitForState(const ChildRecord* child, uint32_t state, int64_t timeout_ns) {
    const int64_t deadline = NowNs() + timeout_ns;
    while (true) {
      const uint32_t now = child->state.load();
      if (now == kFailed) return false;
      if (now >= state) return true;
      if (NowNs() > deadline) return false;
      usleep(500);
    }
  }

  // Kills the child, reaps it, and measures how long the survivors take to reclaim its slot.
  // Observed through a read-only view (pread, no lock), so the observer's own lock waits are
  // not counted, and the observer never reclaims anything itself.
  void KillAndMeasure(int index) {
    ChildRecord* child = &shared_->children[index];
    const pid_t pid = child->pid.load();
    kill(pid, SIGKILL);
    const int64_t killed_at = NowNs();
    waitpid(pid, nullptr, 0);
    ++kills_;
    while (true) {
      const Snapshot snapshot = observer_->Read();
      const bool present = std::any_of(snapshot.processes.begin(), snapshot.processes.end(),
                                       [&](const ProcessUsage& p) { return p.pid == pid; });
      const int64_t waited = NowNs() - killed_at;
      if (!present) {
        max_reclaim_ns_ = std::max(max_reclaim_ns_, waited);
        return;
      }
      if (waited > 3 * kMaxReclaimNs) {
        ADD_FAILURE() << "killed pid " << pid << " not reclaimed within " << 3 * kMaxReclaimNs / 1e9 << " s";
        max_reclaim_ns_ = std::max(max_reclaim_ns_, waited);
        return;
      }
      usleep(2000);
    }
  }

  // Sums the live children's own tallies while the monitor holds the ledger lock. A child's
  // tally never exceeds its charge (it counts a reservation after TryReserve returns and a
  // release before calling Release), and no charge can grow while the lock is held, so the sum
  // is bounded by the limit exactly when the ledger's admission is.
  static void SumTallies(void* arg) {
    LedgerStressTest* self = static_cast<LedgerStressTest*>(arg);
    for (int d = 0; d < kDevices; ++d) {
      self->tallies_[d] = 0;
      for (const int index : self->live_) self->tallies_[d] += self->shared_->children[index].held[d].load();
    }
  }

  // Under the lock: totals equal the slots and stay within the limits; independently, the live
  // children's own tallies stay within the limits.
  void CheckInvariants() {
    const Snapshot snapshot = monitor_->Read();
    ASSERT_EQ(snapshot.devices.size(), static_cast<size_t>(kDevices));
    for (int d = 0; d < kDevices; ++d) {
      uint64_t sum = 0;
      for (const ProcessUsage& p : snapshot.processes) sum += p.charged[d] + p.overhead[d];
      EXPECT_EQ(sum, snapshot.devices[d].used);
      EXPECT_LE(snapshot.devices[d].used, kLimits[d]);
    }
    monitor_->HoldLockForTesting(0, SumTallies, this);
    for (int d = 0; d < kDevices; ++d) EXPECT_LE(tallies_[d], kLimits[d]) << "device " << d;
    ++checks_;
  }

  void KillSomething(std::mt19937* random) {
    if ((*random)() % 3 == 0) {
      const int holder = Spawn(true);
      ASSERT_GE(holder, 0);
      ChildRecord* child = &shared_->children[holder];
      const int64_t deadline = NowNs() + 10'000'000'000;
      while (child->holding_lock.load() == 0 && child->state.load() != kFailed && NowNs() < deadline) usleep(200);
      ASSERT_EQ(child->holding_lock.load(), 1u) << child->failure;
      KillAndMeasure(holder);
      ++lock_kills_;
      return;
    }
    const size_t pick = (*random)() % live_.size();
    const int victim = live_[pick];
    live_.erase(live_.begin() + static_cast<long>(pick));
    KillAndMeasure(victim);
    ASSERT_GE(Spawn(false), 0);
  }

  void RunWithKills();
  void QuiesceAndCompareTallies();
  Snapshot FinishAndCheckZero();

  TempDir dir_;
  Shared* shared_ = nullptr;
  std::string path_;
  std::unique_ptr<Ledger> monitor_;   // reads under the lock
  std::unique_ptr<Ledger> observer_;  // reads without it
  int duration_s_ = 10;
  int next_child_ = 0;
  std::vector<int> live_;
  int kills_ = 0;
  int lock_kills_ = 0;
  int checks_ = 0;
  int64_t max_reclaim_ns_ = 0;
  uint64_t tallies_[kDevices] = {};
};

// The run phase: invariant checks every 20-50 ms, a kill every 100-300 ms.
void LedgerStressTest::RunWithKills() {
  for (int i = 0; i < kProcesses; ++i) ASSERT_GE(Spawn(false), 0);
  std::mt19937 random(12345);
  const int64_t end = NowNs() + static_cast<int64_t>(duration_s_) * 1'000'000'000;
  int64_t next_kill = NowNs() + 200'000'000;
  while (NowNs() < end && !HasFatalFailure()) {
    usleep(20'000 + random() % 30'000);
    CheckInvariants();
    if (NowNs() >= next_kill) {
      KillSomething(&random);
      next_kill = NowNs() + 100'000'000 + static_cast<int64_t>(random() % 200'000'000);
    }
    for (const int index : live_) {
      ASSERT_NE(shared_->children[index].state.load(), static_cast<uint32_t>(kFailed)) << shared_->children[index].failure;
    }
  }
}

// Quiesce: every survivor's own tally must equal its charge in the ledger.
void LedgerStressTest::QuiesceAndCompareTallies() {
  shared_->phase.store(kQuiesce);
  for (const int index : live_) {
    ASSERT_TRUE(WaitForState(&shared_->children[index], kQuiesced, 30'000'000'000)) << shared_->children[index].failure;
  }
  monitor_->ReclaimDead();
  const Snapshot quiet = monitor_->Read();
  EXPECT_EQ(quiet.processes.size(), live_.size());  // the monitor never registers
  for (const int index : live_) {
    const ChildRecord& child = shared_->children[index];
    const auto it = std::find_if(quiet.processes.begin(), quiet.processes.end(),
                                 [&](const ProcessUsage& p) { return p.pid == child.pid.load(); });
    ASSERT_NE(it, quiet.processes.end());
    for (int d = 0; d < kDevices; ++d) EXPECT_EQ(it->charged[d], child.held[d].load()) << "pid " << child.pid.load();
  }
}

// Finish: everyone releases and unregisters; the ledger must be back to zero.
Snapshot LedgerStressTest::FinishAndCheckZero() {
  shared_->phase.store(kFinish);
  for (const int index : live_) {
    ChildRecord* child = &shared_->children[index];
    const int status = testing::WaitChild(child->pid.load(), 30000);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << child->failure;
  }
  const Snapshot end_state = monitor_->Read();
  for (int d = 0; d < kDevices; ++d) EXPECT_EQ(end_state.devices.at(d).used, 0u) << "device " << d;
  EXPECT_TRUE(end_state.processes.empty());
  EXPECT_TRUE(monitor_->Health().ok) << monitor_->Health().message;
  return end_state;
}

TEST_F(LedgerStressTest, LimitsHoldAndTheDeadAreReclaimedUnderRandomKills) {
  RunWithKills();
  ASSERT_FALSE(HasFatalFailure());
  QuiesceAndCompareTallies();
  ASSERT_FALSE(HasFatalFailure());
  const Snapshot end_state = FinishAndCheckZero();
  uint64_t ops = 0;
  for (int i = 0; i < next_child_; ++i) ops += shared_->children[i].ops.load();
  EXPECT_GE(end_state.lock_recoveries, static_cast<uint64_t>(lock_kills_));
  EXPECT_GE(kills_, duration_s_ / 2);  // each kill waits for its reclaim (up to ~1.4 s)
  EXPECT_GE(lock_kills_, 1);
  EXPECT_LT(max_reclaim_ns_, kMaxReclaimNs);
  EXPECT_LT(shared_->max_op_ns.load(), kMaxOpNs);
  EXPECT_GT(end_state.devices[0].oom_refusals + end_state.devices[1].oom_refusals, 0u);  // the limits did bite
  printf("stress: %d s, %d children, %llu ops, %d kills (%d holding the lock), %llu lock recoveries, "
         "%llu reclaimed, refusals %llu/%llu, max reclaim latency %.1f ms, max op latency %.1f ms, %d checks\n",
         duration_s_, next_child_, static_cast<unsigned long long>(ops), kills_, lock_kills_,
         static_cast<unsigned long long>(end_state.lock_recoveries),
         static_cast<unsigned long long>(end_state.reclaimed_processes),
         static_cast<unsigned long long>(end_state.devices[0].oom_refusals),
         static_cast<unsigned long long>(end_state.devices[1].oom_refusals), max_reclaim_ns_ / 1e6,
         shared_->max_op_ns.load() / 1e6, checks_);
}

}  // namespace
}  // namespace vgpu::ledger
