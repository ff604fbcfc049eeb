// Shared helpers of the memory-limit test programs (memory_*.cc), which run against the simulated
// driver with libvgpu.so preloaded and are driven by tests/preload/memory_test.cc.
//
// Conventions every program follows:
//   - stdout is a transcript of "key value" lines that the harness parses; values are plain
//     decimal integers (bytes, counts, CUresult codes) unless the key says otherwise;
//   - an unexpected API failure is a CHECK failure (stderr, exit 1); an expected refusal is
//     reported as data, never checked here, so the harness can say what was wrong;
//   - hold points: when MEMTEST_HOLD_DIR is set, HoldPoint() creates <dir>/hold-<pid>-<label>
//     and waits until the outside observer (memory_observer) has taken a snapshot of the
//     simulated driver's per-process usage and deleted the file. Without the variable it is a
//     no-op, so every program also runs on its own.
#pragma once

#include <cuda.h>
#include <dirent.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "check.h"

namespace memtest {

inline constexpr uint64_t kMiB = 1ull << 20;
inline constexpr uint64_t kGiB = 1ull << 30;

// Iteration cap of every allocate-until-refused loop: far beyond any limit a test sets, so an
// unenforced path shows up as a large count instead of an endless loop.
inline constexpr int kMaxSteps = 4096;

inline void Report(const char* key, uint64_t value) {
  std::printf("%s %llu\n", key, static_cast<unsigned long long>(value));
  std::fflush(stdout);
}

inline void ReportText(const char* key, const std::string& value) {
  std::printf("%s %s\n", key, value.c_str());
  std::fflush(stdout);
}

// Parses a decimal argument; exits with a message when it is not one.
inline uint64_t ArgU64(const char* text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0') {
    std::fprintf(stderr, "not a number: %s\n", text);
    std::exit(2);
  }
  return v;
}

inline int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

inline void SleepMs(int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1'000'000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

inline bool FileExists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// Creates `path` (empty) or dies.
inline void TouchFile(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  CHECK(fd >= 0);
  close(fd);
}

// Writes `text` to `path` atomically (temporary file + rename), so a reader never sees half.
inline void WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  CHECK(fd >= 0);
  CHECK(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  close(fd);
  CHECK(rename(tmp.c_str(), path.c_str()) == 0);
}

// See the file comment. `label` must be a plain word.
inline void HoldPoint(const char* label) {
  const char* dir = std::getenv("MEMTEST_HOLD_DIR");
  if (dir == nullptr || *dir == '\0') return;
  const std::string path = std::string(dir) + "/hold-" + std::to_string(getpid()) + "-" + label;
  TouchFile(path);
  const int64_t deadline = NowNs() + 10'000'000'000;
  while (FileExists(path)) {
    if (NowNs() > deadline) {
      std::fprintf(stderr, "hold point %s: no observer took the snapshot within 10 s\n", label);
      std::exit(1);
    }
    SleepMs(1);
  }
}

// cuInit, then the primary context of `ordinal` made current. Returns the device.
inline CUdevice InitPrimaryContext(int ordinal) {
  CHECK_CU(cuInit(0));
  CUdevice dev;
  CHECK_CU(cuDeviceGet(&dev, ordinal));
  CUcontext ctx;
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK_CU(cuCtxSetCurrent(ctx));
  return dev;
}

// A new graph holding one allocation node of `bytes` on `dev` and the node that frees it. The
// allocation node's error is returned (the graph is destroyed then); CUDA errors otherwise abort.
inline CUresult GraphWithAllocation(CUdevice dev, uint64_t bytes, CUgraph* graph) {
  CHECK_CU(cuGraphCreate(graph, 0));
  CUDA_MEM_ALLOC_NODE_PARAMS params{};
  params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  params.poolProps.location.id = dev;
  params.bytesize = bytes;
  CUgraphNode alloc_node = nullptr;
  const CUresult rc = cuGraphAddMemAllocNode(&alloc_node, *graph, nullptr, 0, &params);
  if (rc != CUDA_SUCCESS) {
    CHECK_CU(cuGraphDestroy(*graph));
    *graph = nullptr;
    return rc;
  }
  CUgraphNode free_node = nullptr;
  CHECK_CU(cuGraphAddMemFreeNode(&free_node, *graph, &alloc_node, 1, params.dptr));
  return CUDA_SUCCESS;
}

inline uint64_t FreeBytes() {
  size_t free_bytes = 0, total = 0;
  CHECK_CU(cuMemGetInfo(&free_bytes, &total));
  return free_bytes;
}

// Counts the files in `dir` whose names start with `prefix` (temporary ".tmp" files excluded).
inline int CountFiles(const std::string& dir, const std::string& prefix) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  int count = 0;
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0 &&
        std::strstr(e->d_name, ".tmp") == nullptr) {
      ++count;
    }
  }
  closedir(d);
  return count;
}

// Waits until `n` files named <prefix>* exist in `dir` (a barrier between processes); each
// caller first creates its own <prefix><pid>. Dies after 20 s.
inline void Barrier(const std::string& dir, const std::string& prefix, int n) {
  TouchFile(dir + "/" + prefix + std::to_string(getpid()));
  const int64_t deadline = NowNs() + 20'000'000'000;
  while (CountFiles(dir, prefix) < n) {
    if (NowNs() > deadline) {
      std::fprintf(stderr, "barrier %s: only %d of %d processes arrived\n", prefix.c_str(),
                   CountFiles(dir, prefix), n);
      std::exit(1);
    }
    SleepMs(1);
  }
}

}  // namespace memtest
