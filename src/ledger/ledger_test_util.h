// Helpers shared by the ledger tests.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "ledger/ledger.h"

namespace vgpu::ledger::testing {

inline constexpr uint64_t kMiB = 1024 * 1024;
inline constexpr uint64_t kGiB = 1024 * kMiB;

// A private temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string ReadBytes(const std::string& path);
void WriteBytes(const std::string& path, const std::string& bytes);
int Mode(const std::string& path);  // permission bits, -1 when lstat fails

// A limit set with one memory limit for every device (no per-device entries).
LimitSet Uniform(uint64_t memory_limit, Authority authority = Authority::kLibrary);

// Creates a ledger at `path` from `limits` through the library path; aborts the test on error.
std::unique_ptr<Ledger> MustOpen(const std::string& path, const LimitSet& limits);

// Test-process-friendly "<pid> <start time>" registration of the calling process.
int RegisterSelf(Ledger* ledger);

// Waits (bounded) for `pid` and returns its wait status, or -1 on timeout (then kills it).
int WaitChild(pid_t pid, int timeout_ms);

}  // namespace vgpu::ledger::testing
