// Process identity and liveness from kill(2) and /proc, and the default ledger path.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ledger/ledger.h"
#include "ledger/ledger_internal.h"

namespace vgpu::ledger {
namespace internal {

// Reads /proc/<pid>/stat into `buf`; false when it cannot be read.
static bool ReadStatFile(int32_t pid, char* buf, size_t size, size_t* length) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t total = 0;
  while (total + 1 < size) {
    const ssize_t n = read(fd, buf + total, size - 1 - total);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    total += static_cast<size_t>(n);
  }
  close(fd);
  buf[total] = '\0';
  *length = total;
  return total > 0;
}

bool ReadProcStat(int32_t pid, ProcStat* out) {
  if (pid <= 0) return false;
  char buf[1024];
  size_t length = 0;
  if (!ReadStatFile(pid, buf, sizeof(buf), &length)) return false;
  return ParseProcStat(buf, &out->state, &out->start_time);
}

}  // namespace internal

bool ParseProcStat(const char* text, char* state, uint64_t* start_time) {
  const char* close_paren = strrchr(text, ')');
  if (close_paren == nullptr || close_paren[1] != ' ' || close_paren[2] == '\0') return false;
  const char* p = close_paren + 2;
  const char parsed_state = *p;
  // Field 3 is the state; field 22 (starttime) is 19 separators further on.
  for (int field = 3; field < 22; ++field) {
    p = strchr(p, ' ');
    if (p == nullptr) return false;
    ++p;
  }
  char* end = nullptr;
  errno = 0;
  const unsigned long long start = strtoull(p, &end, 10);
  if (end == p || errno != 0) return false;
  *state = parsed_state;
  *start_time = start;
  return true;
}

uint64_t ProcessStartTime(int32_t pid) {
  internal::ProcStat stat;
  return internal::ReadProcStat(pid, &stat) ? stat.start_time : 0;
}

bool IsProcessAlive(int32_t pid, uint64_t start_time) {
  if (pid <= 0) return false;  // kill(0 or -n, 0) would address process groups
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;  // EPERM: exists, someone else's
  internal::ProcStat stat;
  if (!internal::ReadProcStat(pid, &stat)) {
    // Gone between the two calls, or /proc is not mounted / hidden: trust kill() unless the
    // process has vanished since.
    return !(kill(pid, 0) != 0 && errno == ESRCH);
  }
  if (stat.state == 'Z' || stat.state == 'X') return false;  // exited, not yet reaped
  return start_time == 0 || stat.start_time == start_time;
}

std::string DefaultLedgerPath() {
  return "/tmp/vgpu-" + std::to_string(static_cast<unsigned long>(geteuid())) + "/ledger";
}

}  // namespace vgpu::ledger
