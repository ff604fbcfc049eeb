// Harness of the memory-limit tests (memory_test.cc): runs the programs/memory_*.cc programs
// against the simulated driver with libvgpu.so preloaded, parses what they report, and runs the
// outside observer (programs/memory_observer.cc) that sees what the simulated driver really
// holds. Not thread-safe: one test fixture per test, used from the test's thread (the observer
// runs on a thread of its own, owned by the fixture).
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "subprocess.h"

namespace vgpu::testing {

using Env = std::map<std::string, std::string>;

inline constexpr uint64_t kMiB = 1ull << 20;
inline constexpr uint64_t kGiB = 1ull << 30;
inline constexpr uint64_t kOom = 2;              // CUDA_ERROR_OUT_OF_MEMORY
inline constexpr uint64_t kNotPermitted = 800;   // CUDA_ERROR_NOT_PERMITTED
inline constexpr uint64_t kSimGranularity = 2 * kMiB;  // VGPU_SIM_GRANULARITY default

// UUIDs of the simulated driver's physical devices 0 and 1 (tests/simdriver/README.md).
inline const std::string kUuid0 = "GPU-5151a000-0000-4000-8000-000000000000";
inline const std::string kUuid1 = "GPU-5151a000-0000-4000-8000-000000000001";

// Exit status and output of a run, for failure messages.
std::string Describe(const RunResult& r);
// "<bytes / MiB> MiB", for failure messages.
std::string MiB(uint64_t bytes);
int64_t NowMs();  // CLOCK_MONOTONIC
void SleepMs(int ms);

// A program's transcript: "key value" lines (programs/memory_common.h). Keys may repeat.
// A missing key is a test failure (ADD_FAILURE naming the key, with the transcript).
class Transcript {
 public:
  explicit Transcript(const RunResult& run);
  bool Has(const std::string& key) const { return values_.count(key) > 0; }
  std::string Text(const std::string& key) const;
  uint64_t U64(const std::string& key) const;          // 0 (and a failure) when missing
  std::vector<uint64_t> All(const std::string& key) const;  // every value of a repeated key
  // Every "code_*" entry, to compare a native run with a vgpu run.
  std::map<std::string, std::string> Codes() const;

 private:
  RunResult run_;
  std::multimap<std::string, std::string> values_;
};

// What the outside observer saw (line format in programs/memory_observer.cc).
struct Observation {
  // The snapshot taken while one program waited at a hold point.
  struct Hold {
    int holder_pid = 0;
    std::string label;
    std::map<int, uint64_t> device_used;               // physical device -> bytes
    std::map<std::pair<int, int>, uint64_t> pid_used;  // (device, pid) -> bytes
  };
  std::map<int, uint64_t> peak_device;  // highest "used" of each physical device
  std::vector<Hold> holds;
  long samples = 0;
  RunResult run;

  uint64_t Peak(int device) const;
  const Hold* FindHold(const std::string& label) const;
  // Device usage at the first hold point with this label (a test failure when there was none).
  uint64_t HoldUsed(const std::string& label, int device) const;
};

Observation ParseObservation(const RunResult& run);

// Fixture: a fresh directory per test holding the ledger (CUDA_DEVICE_MEMORY_SHARED_CACHE) and
// the simulated driver's state file (VGPU_SIM_STATE), so tests never see each other; removed
// at the end. Tests adjust sim_ (VGPU_SIM_* settings) before starting any process.
class MemoryTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // The simulated driver's environment. Every process of a test, observer included, must use
  // the same values (the state file's geometry comes from the first process that attaches).
  Env SimEnv() const;
  // A program's environment under vgpu: SimEnv, LD_PRELOAD, the test's ledger, hold points
  // while an observer runs, no memory headroom (VGPU_MEMORY_HEADROOM=0), then `limits` (which
  // may also override the ledger path and the headroom).
  Env VgpuEnv(const Env& limits) const;
  Env Limit(uint64_t bytes) const { return {{"CUDA_DEVICE_MEMORY_LIMIT", std::to_string(bytes)}}; }

  // Runs programs/<argv[0]> with `env`.
  RunResult Run(const std::vector<std::string>& argv, const Env& env, int timeout_seconds = 60) const;

  // Starts memory_observer on its own thread and waits until it samples; StopObserver ends it
  // and returns what it saw. REQUIRES: at most one observer at a time.
  void StartObserver();
  Observation StopObserver();
  // Runs programs/<argv[0]> under vgpu with `limits` (VgpuEnv, built once the observer runs, so
  // that the program stops at the hold points) while an observer watches: the program's result
  // and what the observer saw.
  struct ObservedRun {
    RunResult run;
    Observation obs;
  };
  ObservedRun RunObserved(const std::vector<std::string>& argv, const Env& limits);

  // Starts `memory_procs hold <mib> <chunk_mib>` (`hold_when_free` with `retry`: refused chunks
  // are tried again) with `env` on *thread (its result lands in *result when the thread ends) and
  // waits up to 10 s until it holds its memory. Returns its pid, or 0 when it never got there
  // (then *thread has been joined).
  pid_t StartHolder(uint64_t mib, uint64_t chunk_mib, const Env& env, std::thread* thread, RunResult* result,
                    bool retry = false);

  std::string dir_;
  Env sim_ = {{"VGPU_SIM_MEMORY", "8GiB"}, {"VGPU_SIM_CONTEXT_OVERHEAD", "256MiB"}};

 private:
  std::thread observer_;
  RunResult observer_run_;
};

}  // namespace vgpu::testing
