// Logging for code that runs inside other people's processes: no allocation, no stdio streams,
// no iostreams, one write(2) per line, errno preserved. See log.h for the contract.

#include "common/log.h"

#include <errno.h>
#include <time.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace vgpu {
namespace {

constexpr int64_t kWindowNs = 1'000'000'000;

// Constant-initialised: no constructor runs at load time.
std::atomic<int> g_log_fd{2};
std::atomic<int64_t (*)()> g_clock_for_testing{nullptr};

int64_t NowNs() {
  if (int64_t (*fake)() = g_clock_for_testing.load(std::memory_order_relaxed)) return fake();
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kWindowNs + ts.tv_nsec;
}

const char* LevelTag(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "ERROR";
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kTrace: return "TRACE";
    case LogLevel::kSilent: break;
  }
  return "?";
}

// One write(2) in the normal case; retried on EINTR, continued after a short write, and given
// up on any other error (there is nowhere to report a failure to log).
void WriteAll(const char* data, size_t size) {
  const int fd = g_log_fd.load(std::memory_order_relaxed);
  while (size > 0) {
    const ssize_t written = write(fd, data, size);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return;
    data += written;
    size -= static_cast<size_t>(written);
  }
}

// Decides whether `site` may log now. Returns -1 when this line is to be dropped, otherwise the
// number of lines dropped in the site's previous window (to be reported before this line).
// A window starts at the first line logged at least kWindowNs after the previous window began.
int Admit(LogSite* site) {
  const int64_t now = NowNs();
  int64_t start = site->window_start_ns.load(std::memory_order_acquire);
  if (now - start >= kWindowNs &&
      site->window_start_ns.compare_exchange_strong(start, now, std::memory_order_acq_rel)) {
    const int previous = site->count.exchange(1, std::memory_order_acq_rel);
    return previous > kLogBurstPerSecond ? previous - kLogBurstPerSecond : 0;
  }
  // Same window (or another thread just opened a new one: count this line in it).
  const int attempts = site->count.fetch_add(1, std::memory_order_acq_rel) + 1;
  return attempts > kLogBurstPerSecond ? -1 : 0;
}

void WriteSuppressed(int pid, LogLevel level, int suppressed) {
  char line[160];
  const int length = std::snprintf(line, sizeof(line),
                                   "vgpu[%d] %s: %d message%s suppressed (more than %d per second "
                                   "from one call site)\n",
                                   pid, LevelTag(level), suppressed, suppressed == 1 ? "" : "s",
                                   kLogBurstPerSecond);
  if (length > 0) WriteAll(line, static_cast<size_t>(length) < sizeof(line) ? length : sizeof(line) - 1);
}

// Formats one complete line into `line` (kMaxLogLine bytes) and returns its length.
size_t FormatLine(char* line, int pid, LogLevel level, const char* fmt, va_list args) {
  constexpr char kCut[] = "...\n";
  const int prefix = std::snprintf(line, kMaxLogLine, "vgpu[%d] %s: ", pid, LevelTag(level));
  const size_t capacity = kMaxLogLine - static_cast<size_t>(prefix);  // room for body + NUL
  const int body = std::vsnprintf(line + prefix, capacity, fmt, args);
  if (body < 0) {  // bad format or encoding: keep the prefix, say so
    constexpr char kBad[] = "(unformattable log message)\n";
    std::memcpy(line + prefix, kBad, sizeof(kBad) - 1);
    return static_cast<size_t>(prefix) + sizeof(kBad) - 1;
  }
  if (static_cast<size_t>(body) >= capacity) {  // cut: overwrite the tail, use every byte
    std::memcpy(line + kMaxLogLine - (sizeof(kCut) - 1), kCut, sizeof(kCut) - 1);
    return kMaxLogLine;
  }
  size_t length = static_cast<size_t>(prefix) + static_cast<size_t>(body);
  if (body > 0 && line[length - 1] == '\n') --length;
  line[length++] = '\n';  // fits: length <= kMaxLogLine - 1 here
  return length;
}

}  // namespace

void SetLogLevel(LogLevel level) {
  int value = static_cast<int>(level);
  if (value < static_cast<int>(LogLevel::kSilent)) value = static_cast<int>(LogLevel::kSilent);
  if (value > static_cast<int>(LogLevel::kTrace)) value = static_cast<int>(LogLevel::kTrace);
  g_log_level.store(value, std::memory_order_relaxed);
}

LogLevel GetLogLevel() { return static_cast<LogLevel>(g_log_level.load(std::memory_order_relaxed)); }

void SetLogFdForTesting(int fd) { g_log_fd.store(fd, std::memory_order_relaxed); }

void SetLogClockForTesting(int64_t (*now_ns)()) {
  g_clock_for_testing.store(now_ns, std::memory_order_relaxed);
}

void LogWrite(LogSite* site, LogLevel level, const char* fmt, ...) {
  if (level == LogLevel::kSilent || !LogEnabled(level)) return;
  const int saved_errno = errno;
  const int suppressed = site != nullptr ? Admit(site) : 0;
  if (suppressed >= 0) {
    // Read on every line: after fork() the child must not print its parent's pid.
    const int pid = static_cast<int>(getpid());
    if (suppressed > 0) WriteSuppressed(pid, level, suppressed);
    char line[kMaxLogLine];
    va_list args;
    va_start(args, fmt);
    const size_t length = FormatLine(line, pid, level, fmt, args);
    va_end(args);
    WriteAll(line, length);
  }
  errno = saved_errno;
}

}  // namespace vgpu
