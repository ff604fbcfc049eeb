// Memory oversubscription end to end, against the simulated driver: programs/memory_spill.cc
// allocates past the device limit with CUDA_OVERSUBSCRIBE=true; the observer (no libvgpu.so)
// sees what the simulated driver really holds on the device, and the harness reads the ledger
// itself (read-only, as `vgpu ps` does) while the program waits.
//
// Numbers: limit L = 1 GiB, context overhead O = 256 MiB (VGPU_SIM_CONTEXT_OVERHEAD), blocks of
// C = 64 MiB: the device takes (L - O) / C = 12 blocks, the rest spills, up to the host limit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ledger/ledger.h"
#include "memory_harness.h"

namespace vgpu::testing {
namespace {

constexpr uint64_t kLimit = 1 * kGiB;
constexpr uint64_t kOverhead = 256 * kMiB;
constexpr uint64_t kChunk = 64 * kMiB;
constexpr uint64_t kDeviceBlocks = (kLimit - kOverhead) / kChunk;  // 12

class MemorySpillTest : public MemoryTest {
 protected:
  // L with oversubscription; `host` = CUDA_OVERSUBSCRIBE_HOST_LIMIT when not empty.
  Env Spilling(const std::string& host = "") const {
    Env env = Limit(kLimit);
    env["CUDA_OVERSUBSCRIBE"] = "true";
    if (!host.empty()) env["CUDA_OVERSUBSCRIBE_HOST_LIMIT"] = host;
    return env;
  }

  // The ledger as `vgpu ps` reads it.
  ledger::Snapshot ReadLedger() const {
    ledger::LedgerStatus status;
    std::unique_ptr<ledger::Ledger> ledger = ledger::Ledger::OpenReadOnly(dir_ + "/ledger", &status);
    EXPECT_NE(ledger, nullptr) << status.message;
    if (ledger == nullptr) return {};
    return ledger->Read();
  }

  bool WaitFile(const std::string& name) const {
    const int64_t deadline = NowMs() + 20'000;
    while (!std::filesystem::exists(dir_ + "/" + name)) {
      if (NowMs() > deadline) return false;
      SleepMs(1);
    }
    return true;
  }

  void Touch(const std::string& name) const { std::ofstream(dir_ + "/" + name).flush(); }
};

// ---------------------------------------------------------------------------------------------
// 1. What does not fit the device spills; the device limit stays hard; frees give both back.

class MemorySpillPathTest : public MemorySpillTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(MemorySpillPathTest, BeyondTheLimitSpillsToTheHostAndTheDeviceLimitStaysHard) {
  const std::string path = GetParam();
  StartObserver();
  const Env env = VgpuEnv(Spilling("2GiB"));
  RunResult run;
  std::thread program([&] { run = Run({"memory_spill", "fill", path, "64", "2048", dir_}, env); });
  ledger::Snapshot full, freed;
  if (WaitFile("full")) full = ReadLedger();
  Touch("go");
  if (WaitFile("freed")) freed = ReadLedger();
  Touch("go2");
  program.join();
  const Observation obs = StopObserver();
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  const Transcript t(run);
  SCOPED_TRACE(Describe(run));

  // 2 GiB obtained: the device part up to the limit, the rest spilled, all placed on the host.
  const uint64_t device = t.U64("round1_device"), spilled = t.U64("round1_spilled");
  EXPECT_EQ(t.U64("round1_code"), 0u);
  EXPECT_EQ(device + spilled, 2 * kGiB / kChunk);
  EXPECT_EQ(t.U64("round1_misplaced"), 0u);
  if (path == "async") {
    EXPECT_GE(device, kDeviceBlocks - 1);  // the pool reserves in its own steps
    EXPECT_LE(device, kDeviceBlocks);
  } else {
    EXPECT_EQ(device, kDeviceBlocks);
  }
  // The application still sees the device limit, full.
  EXPECT_EQ(t.U64("round1_info_total"), kLimit);
  EXPECT_LT(t.U64("round1_info_free"), kChunk);
  // What the driver holds on the device never passes the limit; spilled memory is not there.
  EXPECT_LE(obs.Peak(0), kLimit) << "observer peak " << MiB(obs.Peak(0));
  if (path != "async") {
    EXPECT_EQ(obs.HoldUsed("full", 0), kOverhead + device * kChunk);
  }
  // The ledger counts device and host apart, per device and per process.
  ASSERT_EQ(full.devices.size(), 1u);
  EXPECT_EQ(full.devices[0].host_limit, 2 * kGiB);
  EXPECT_EQ(full.devices[0].spilled, spilled * kChunk);
  EXPECT_EQ(full.devices[0].spill_peak, spilled * kChunk);
  EXPECT_LE(full.devices[0].used, kLimit);
  if (path != "async") {
    EXPECT_EQ(full.devices[0].used, kOverhead + device * kChunk);
  }
  ASSERT_EQ(full.processes.size(), 1u);
  EXPECT_EQ(full.processes[0].spilled[0], spilled * kChunk);
  // Frees return exactly what was charged, on both sides.
  ASSERT_EQ(freed.devices.size(), 1u);
  EXPECT_EQ(freed.devices[0].spilled, 0u);
  if (path != "async") {
    EXPECT_EQ(freed.devices[0].used, kOverhead);  // (a pool may keep its reserve)
  }
  EXPECT_EQ(t.U64("round1_info_free_freed"), t.U64("info_free_initial"));
  EXPECT_EQ(obs.HoldUsed("freed", 0), kOverhead);
  // And the same again.
  EXPECT_EQ(t.U64("round2_code"), 0u);
  EXPECT_EQ(t.U64("round2_device") + t.U64("round2_spilled"), 2 * kGiB / kChunk);
  EXPECT_EQ(t.U64("round2_misplaced"), 0u);
  EXPECT_EQ(t.U64("round2_info_free_freed"), t.U64("info_free_initial"));
}

INSTANTIATE_TEST_SUITE_P(Paths, MemorySpillPathTest, ::testing::Values("alloc", "managed", "async"));

// ---------------------------------------------------------------------------------------------
// 2. The host limit.

TEST_F(MemorySpillTest, TheHostLimitDefaultsToTheDeviceLimitAndIsRefusedWithALogLine) {
  const auto [run, obs] = RunObserved({"memory_spill", "fill", "alloc", "64", "4096"}, Spilling());
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  const Transcript t(run);
  SCOPED_TRACE(Describe(run));
  EXPECT_EQ(t.U64("round1_device"), kDeviceBlocks);
  EXPECT_EQ(t.U64("round1_spilled"), kLimit / kChunk);  // as much as the device limit
  EXPECT_EQ(t.U64("round1_code"), kOom);
  EXPECT_EQ(t.U64("round2_spilled"), kLimit / kChunk);
  EXPECT_EQ(t.U64("round2_code"), kOom);
  EXPECT_LE(obs.Peak(0), kLimit);
  // The refusal says what was refused, which limit it hit and how to raise it.
  EXPECT_NE(run.err.find("out of memory on CUDA device 0: 64 MiB did not fit the device (memory limit 1 GiB"),
            std::string::npos);
  EXPECT_NE(run.err.find("would pass the host spill limit (1 GiB, 1 GiB already spilled)"), std::string::npos);
  EXPECT_NE(run.err.find("CUDA_OVERSUBSCRIBE_HOST_LIMIT"), std::string::npos);
  const ledger::Snapshot after = ReadLedger();
  ASSERT_EQ(after.devices.size(), 1u);
  EXPECT_EQ(after.devices[0].spill_refusals, 2u);  // one per round
  EXPECT_EQ(after.devices[0].spill_peak, kLimit);
}

TEST_F(MemorySpillTest, AnExplicitHostLimitIsWhatSpills) {
  const RunResult run = Run({"memory_spill", "fill", "managed", "64", "4096"}, VgpuEnv(Spilling("320MiB")));
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  const Transcript t(run);
  EXPECT_EQ(t.U64("round1_device"), kDeviceBlocks) << Describe(run);
  EXPECT_EQ(t.U64("round1_spilled"), 5u) << Describe(run);
  EXPECT_EQ(t.U64("round1_code"), kOom) << Describe(run);
  EXPECT_NE(run.err.find("host spill limit (320 MiB, 320 MiB already spilled)"), std::string::npos) << run.err;
}

TEST_F(MemorySpillTest, AMalformedHostLimitRefusesCudaAndNamesTheVariable) {
  const RunResult run = Run({"memory_spill", "fill", "alloc", "64", "128"}, VgpuEnv(Spilling("lots")));
  EXPECT_NE(run.exit_code, 0) << Describe(run);
  EXPECT_NE(run.err.find("invalid CUDA_OVERSUBSCRIBE_HOST_LIMIT=\"lots\""), std::string::npos) << run.err;
  Env without = Limit(kLimit);
  without["CUDA_OVERSUBSCRIBE_HOST_LIMIT"] = "4GiB";
  const RunResult orphan = Run({"memory_spill", "fill", "alloc", "64", "128"}, VgpuEnv(without));
  EXPECT_NE(orphan.exit_code, 0) << Describe(orphan);
  EXPECT_NE(orphan.err.find("needs memory oversubscription"), std::string::npos) << orphan.err;
}

// ---------------------------------------------------------------------------------------------
// 3. What does not spill.

TEST_F(MemorySpillTest, WithoutOversubscriptionNothingSpills) {
  for (const Env& env : {Limit(kLimit), Env{{"CUDA_DEVICE_MEMORY_LIMIT", "1GiB"}, {"CUDA_OVERSUBSCRIBE", "false"}}}) {
    const RunResult run = Run({"memory_spill", "fill", "alloc", "64", "2048"}, VgpuEnv(env));
    ASSERT_EQ(run.exit_code, 0) << Describe(run);
    const Transcript t(run);
    EXPECT_EQ(t.U64("round1_device"), kDeviceBlocks) << Describe(run);
    EXPECT_EQ(t.U64("round1_spilled"), 0u) << Describe(run);
    EXPECT_EQ(t.U64("round1_code"), kOom) << Describe(run);
    EXPECT_EQ(run.err.find("host spill limit"), std::string::npos) << run.err;
  }
}

TEST_F(MemorySpillTest, PitchedAllocationsAreRefusedNotSpilled) {
  const RunResult run = Run({"memory_spill", "fill", "pitch", "64", "2048"}, VgpuEnv(Spilling("2GiB")));
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  const Transcript t(run);
  EXPECT_EQ(t.U64("round1_device"), kDeviceBlocks) << Describe(run);
  EXPECT_EQ(t.U64("round1_spilled"), 0u) << Describe(run);
  EXPECT_EQ(t.U64("round1_code"), kOom) << Describe(run);
}

// ---------------------------------------------------------------------------------------------
// 4. Spilled memory stays on the host whatever the application prefetches or advises.

TEST_F(MemorySpillTest, PrefetchAndAdviceNeverBringSpilledMemoryOntoTheGpu) {
  const auto [run, obs] = RunObserved({"memory_spill", "prefetch"}, Spilling());
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  const Transcript t(run);
  SCOPED_TRACE(Describe(run));
  EXPECT_EQ(t.U64("prefetch_device"), kDeviceBlocks);
  EXPECT_EQ(t.U64("prefetch_spilled"), 16 - kDeviceBlocks);
  for (const auto& [call, code] : t.Codes()) EXPECT_EQ(code, "0") << call;
  const auto cpu = static_cast<uint64_t>(int64_t{-1});      // CU_DEVICE_CPU
  const auto invalid = static_cast<uint64_t>(int64_t{-2});  // CU_DEVICE_INVALID
  EXPECT_EQ(t.U64("spilled_preferred"), cpu) << "the preferred location stays the host";
  EXPECT_EQ(t.U64("spilled_last_prefetch"), invalid) << "no prefetch to the device reached the driver";
  EXPECT_EQ(obs.HoldUsed("prefetched", 0), kOverhead + kDeviceBlocks * kChunk);
  EXPECT_LE(obs.Peak(0), kLimit) << "observer peak " << MiB(obs.Peak(0));
  EXPECT_EQ(t.U64("host_prefetch_code"), 0u);
  EXPECT_EQ(t.U64("host_last_prefetch"), cpu) << "a prefetch to the host goes to the driver";
  EXPECT_EQ(t.U64("own_prefetch_code"), 0u);
  EXPECT_EQ(t.U64("own_last_prefetch"), 0u) << "memory that did not spill is prefetched as asked";
}

TEST_F(MemorySpillTest, BatchPrefetchesNeverBringSpilledMemoryOntoTheGpu) {
  const auto [run, obs] = RunObserved({"memory_spill", "batch"}, Spilling());
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  const Transcript t(run);
  SCOPED_TRACE(Describe(run));
  EXPECT_EQ(t.U64("batch_device"), kDeviceBlocks);
  EXPECT_EQ(t.U64("batch_spilled"), 16 - kDeviceBlocks);
  for (const auto& [call, code] : t.Codes()) EXPECT_EQ(code, "0") << call;
  const auto cpu = static_cast<uint64_t>(int64_t{-1});      // CU_DEVICE_CPU
  const auto invalid = static_cast<uint64_t>(int64_t{-2});  // CU_DEVICE_INVALID
  // Only the operation that would have moved spilled memory onto the GPU was dropped.
  EXPECT_EQ(t.U64("mixed_spilled_last"), invalid) << "the spilled block's prefetch to the device reached the driver";
  EXPECT_EQ(t.U64("mixed_own_last"), 0u) << "memory that did not spill is prefetched as asked";
  EXPECT_EQ(t.U64("mixed_host_last"), cpu) << "the prefetch to the host, in the same batch, reached the driver";
  EXPECT_EQ(t.U64("discard_spilled_last"), invalid);
  // The device holds the overhead, 11 device blocks and the 32 MiB prefetched: not one spilled byte.
  EXPECT_EQ(obs.HoldUsed("batched", 0), kOverhead + (kDeviceBlocks - 1) * kChunk + 32 * kMiB);
  EXPECT_LE(obs.Peak(0), kLimit) << "observer peak " << MiB(obs.Peak(0));
  EXPECT_EQ(t.U64("malformed_code"), 1u) << "a batch the driver refuses reaches it (CUDA_ERROR_INVALID_VALUE)";
  EXPECT_EQ(t.U64("host_batch_code"), 0u);
  EXPECT_EQ(t.U64("host_batch_last"), cpu);
}

// ---------------------------------------------------------------------------------------------
// 5. Several processes, dead processes, a full GPU.

TEST_F(MemorySpillTest, ProcessesShareTheDeviceAndTheHostBudgets) {
  sim_["VGPU_SIM_CONTEXT_OVERHEAD"] = "32MiB";
  const uint64_t overhead = 32 * kMiB;
  const int n = 2;
  StartObserver();
  const Env env = VgpuEnv(Spilling("1GiB"));
  std::vector<RunResult> runs(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] { runs[i] = Run({"memory_spill", "share", dir_, std::to_string(n), "64"}, env); });
  }
  for (auto& thread : threads) thread.join();
  const Observation obs = StopObserver();
  uint64_t device = 0, spilled = 0;
  std::string all;
  for (const RunResult& r : runs) {
    all += Describe(r);
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    const Transcript t(r);
    EXPECT_EQ(t.U64("share_code"), kOom) << Describe(r);
    EXPECT_EQ(t.U64("share_misplaced"), 0u) << Describe(r);
    device += t.U64("share_device");
    spilled += t.U64("share_spilled");
  }
  SCOPED_TRACE(all);
  EXPECT_EQ(device, (kLimit - n * overhead) / kChunk);  // 15: one device budget for both
  EXPECT_EQ(spilled, kGiB / kChunk);                    // 16: one host budget for both
  ASSERT_EQ(obs.holds.size(), static_cast<size_t>(n));
  for (const auto& hold : obs.holds) EXPECT_EQ(hold.device_used.at(0), n * overhead + device * kChunk);
  EXPECT_LE(obs.Peak(0), kLimit);
}

TEST_F(MemorySpillTest, SpillsOfAProcessThatExitedWithoutFreeingComeBack) {
  const Env env = VgpuEnv(Spilling());
  const RunResult leak = Run({"memory_spill", "leak", "64", "1792"}, env);
  ASSERT_EQ(leak.exit_code, 0) << Describe(leak);
  EXPECT_EQ(Transcript(leak).U64("leak_spilled"), kLimit / kChunk) << Describe(leak);
  const RunResult after = Run({"memory_spill", "fill", "alloc", "64", "1792"}, env);
  ASSERT_EQ(after.exit_code, 0) << Describe(after);
  const Transcript t(after);
  EXPECT_EQ(t.U64("round1_device"), kDeviceBlocks) << Describe(after);
  EXPECT_EQ(t.U64("round1_spilled"), kLimit / kChunk) << Describe(after);
  EXPECT_EQ(t.U64("round1_code"), 0u) << Describe(after);
}

// A limit above the GPU's memory: the driver itself runs out first, and that spills too.
TEST_F(MemorySpillTest, WhenTheGpuItselfIsFullAllocationsSpillToo) {
  sim_["VGPU_SIM_MEMORY"] = "1GiB";
  Env env = Spilling("1GiB");
  env["CUDA_DEVICE_MEMORY_LIMIT"] = "4GiB";
  const auto [run, obs] = RunObserved({"memory_spill", "fill", "alloc", "64", "1536"}, env);
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  const Transcript t(run);
  SCOPED_TRACE(Describe(run));
  EXPECT_EQ(t.U64("round1_device"), kDeviceBlocks);
  EXPECT_EQ(t.U64("round1_spilled"), 1536 * kMiB / kChunk - kDeviceBlocks);
  EXPECT_EQ(t.U64("round1_code"), 0u);
  EXPECT_LE(obs.Peak(0), 1 * kGiB);
}

}  // namespace
}  // namespace vgpu::testing
