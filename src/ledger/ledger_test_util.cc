#include "ledger/ledger_test_util.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace vgpu::ledger::testing {

TempDir::TempDir() {
  char pattern[] = "/tmp/vgpu-ledger-test.XXXXXX";
  if (mkdtemp(pattern) == nullptr) abort();
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

int Mode(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return -1;
  return static_cast<int>(st.st_mode & 07777);
}

LimitSet Uniform(uint64_t memory_limit, Authority authority) {
  LimitSet limits;
  limits.authority = authority;
  limits.default_memory_limit = memory_limit;
  return limits;
}

std::unique_ptr<Ledger> MustOpen(const std::string& path, const LimitSet& limits) {
  LedgerStatus status;
  std::string disagreement;
  std::unique_ptr<Ledger> ledger = Ledger::Open(path, limits, &status, &disagreement);
  EXPECT_TRUE(status.ok) << status.message;
  EXPECT_NE(ledger, nullptr);
  return ledger;
}

int RegisterSelf(Ledger* ledger) {
  return ledger->RegisterProcess(getpid(), getpid(), ProcessStartTime(getpid()));
}

int WaitChild(pid_t pid, int timeout_ms) {
  for (int waited = 0; waited <= timeout_ms; ++waited) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return status;
    if (done < 0) return -1;
    const struct timespec pause = {0, 1'000'000};
    nanosleep(&pause, nullptr);
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  return -1;
}

}  // namespace vgpu::ledger::testing
