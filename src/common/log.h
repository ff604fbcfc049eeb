// Levelled, rate-limited logging to stderr (fd 2; never the application's stdout).
//
// Silent by default except for errors. The level is set once at init from the configuration.
// Each call site is rate-limited (at most kBurst lines, then one per second) so a hot error path
// cannot flood a job's log. Logging formats into a stack buffer and issues one write(2):
// it never allocates and is safe to call from any thread. Never call it on a hot path at a level
// that is enabled by default.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/config.h"

namespace vgpu {

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();

inline std::atomic<int> g_log_level{static_cast<int>(LogLevel::kError)};

inline bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) <= g_log_level.load(std::memory_order_relaxed);
}

// Per-call-site limiter state; zero-initialised static in the VGPU_LOG macro.
struct LogSite {
  std::atomic<int64_t> window_start_ns{0};
  std::atomic<int> count{0};
};

// Formats "vgpu[pid] LEVEL: message\n" and writes it to fd 2 unless `site` is over its rate.
void LogWrite(LogSite* site, LogLevel level, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

}  // namespace vgpu

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
