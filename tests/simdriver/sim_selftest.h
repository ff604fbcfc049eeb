// Shared helpers of the simulated driver's self-test (sim_selftest*.cc). Plain asserts that fail
// loudly: the first failed check prints where and why, then exits 1.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sim_nvml_types.h"

namespace simtest {

[[noreturn]] inline void Fail(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "%s:%d: CHECK FAILED: %s\n", file, line, what.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

inline std::string CuName(CUresult rc) {
  const char* name = nullptr;
  cuGetErrorName(rc, &name);
  return name != nullptr ? name : ("CUresult " + std::to_string(static_cast<int>(rc)));
}

inline void CheckCu(CUresult got, CUresult want, const char* expr, const char* file, int line) {
  if (got != want) Fail(file, line, std::string(expr) + " returned " + CuName(got) + ", expected " + CuName(want));
}

inline void CheckNvml(nvmlReturn_t got, nvmlReturn_t want, const char* expr, const char* file, int line) {
  if (got != want) {
    Fail(file, line, std::string(expr) + " returned " + nvmlErrorString(got) + ", expected " + nvmlErrorString(want));
  }
}

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

// Free bytes of the current context's device (cuMemGetInfo_v2).
uint64_t FreeBytes();
// NVML's per-process usage of `pid` on physical device `index`; 0 when not listed.
uint64_t NvmlProcessBytes(unsigned index, int pid);
// Runs this executable again with `args` and extra environment entries ("NAME=value"); returns
// its pid. When `stdout_fd` is non-null it receives the read end of a pipe from the child's
// stdout. `keep_fd` (if >= 0) is passed to the child as fd 3.
int Spawn(const std::vector<std::string>& args, const std::vector<std::string>& env, int* stdout_fd,
          int keep_fd = -1);
// Waits for `pid`; returns its exit status (or 128 + signal).
int Wait(int pid);
// Reads one line from fd.
std::string ReadLine(int fd);
uint64_t NowNs();

// A sim_sleep kernel that runs `ns` nanoseconds on `stream`.
void LaunchSleep(CUfunction sleep_fn, CUstream stream, uint64_t ns);

void RunPhase2(CUfunction sleep_fn);
int Phase2Child(const std::vector<std::string>& args);

}  // namespace simtest

#define SIM_CHECK(cond) \
  ((cond) ? (void)0 : ::simtest::Fail(__FILE__, __LINE__, #cond))
#define SIM_CHECK_CU(expr, want) ::simtest::CheckCu((expr), (want), #expr, __FILE__, __LINE__)
#define SIM_OK(expr) ::simtest::CheckCu((expr), CUDA_SUCCESS, #expr, __FILE__, __LINE__)
#define SIM_NVML_OK(expr) ::simtest::CheckNvml((expr), NVML_SUCCESS, #expr, __FILE__, __LINE__)
