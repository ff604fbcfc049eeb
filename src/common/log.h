// Levelled, rate-limited logging to stderr (fd 2; never the application's stdout).
//
// Silent by default except for errors. The level is set once at init from the configuration.
// Each call site is rate-limited: at most kLogBurstPerSecond lines per one-second window; the
// rest are dropped and counted, and the site's first line in a later window is preceded by one
// "N messages suppressed" line. (If a site never logs again, its last count is never printed.)
// Logging formats "vgpu[<pid>] <LEVEL>: <message>\n" into a stack buffer of kMaxLogLine bytes
// (longer messages are cut and end in "...\n") and issues one write(2), retried on EINTR; other
// write errors are ignored. It never allocates, preserves errno, and is safe to call from any
// thread and after fork() (the pid is read on every line). Never call it on a hot path at a
// level that is enabled by default.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/config.h"

namespace vgpu {

inline constexpr int kLogBurstPerSecond = 10;
inline constexpr int kMaxLogLine = 1024;  // bytes per line, including the prefix and '\n'

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();

inline std::atomic<int> g_log_level{static_cast<int>(LogLevel::kError)};

inline bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) <= g_log_level.load(std::memory_order_relaxed);
}

// Per-call-site limiter state; zero-initialised static in the VGPU_LOG macro (constant
// initialisation, so no guard variable and no constructor). Lock-free; when threads race at the
// moment a window opens, the window may admit one line more than the burst and the suppressed
// count may be off by one. Lines themselves are never torn (one write per line).
struct LogSite {
  std::atomic<int64_t> window_start_ns{0};  // CLOCK_MONOTONIC start of the current window
  std::atomic<int> count{0};                // lines attempted in the current window
};

// Formats "vgpu[pid] LEVEL: message\n" and writes it to fd 2 unless `level` is disabled or
// `site` is over its rate. `site` may be nullptr (no rate limit; for one-off messages).
// Messages at LogLevel::kSilent are dropped. A trailing '\n' in the message is not doubled.
void LogWrite(LogSite* site, LogLevel level, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

// Test hooks. Not for production code paths; not synchronised with concurrent LogWrite calls
// beyond being atomic themselves.
void SetLogFdForTesting(int fd);                     // default 2; pass 2 to restore
void SetLogClockForTesting(int64_t (*now_ns)());     // nanoseconds; nullptr = CLOCK_MONOTONIC

}  // namespace vgpu

// The arguments are evaluated only when the level is enabled.
#define VGPU_LOG(level, ...)                                  \
  do {                                                        \
    if (::vgpu::LogEnabled(level)) {                          \
      static ::vgpu::LogSite vgpu_log_site_;                  \
      ::vgpu::LogWrite(&vgpu_log_site_, level, __VA_ARGS__);  \
    }                                                         \
  } while (0)

#define VGPU_ERROR(...) VGPU_LOG(::vgpu::LogLevel::kError, __VA_ARGS__)
#define VGPU_WARN(...) VGPU_LOG(::vgpu::LogLevel::kWarn, __VA_ARGS__)
#define VGPU_INFO(...) VGPU_LOG(::vgpu::LogLevel::kInfo, __VA_ARGS__)
#define VGPU_DEBUG(...) VGPU_LOG(::vgpu::LogLevel::kDebug, __VA_ARGS__)
#define VGPU_TRACE(...) VGPU_LOG(::vgpu::LogLevel::kTrace, __VA_ARGS__)

// For messages that their caller already emits at most once per cause (no rate limit).
#define VGPU_LOG_UNLIMITED(level, ...)                                              \
  do {                                                                              \
    if (::vgpu::LogEnabled(level)) ::vgpu::LogWrite(nullptr, level, __VA_ARGS__);   \
  } while (0)
