// Structured logging of vgpu-node: one line per event on stderr (or a test sink), either logfmt
//   time=2026-11-21T10:00:00.123Z level=info component=registration msg="registered" host_pid=4242
// or JSON lines
//   {"time":"2026-11-21T10:00:00.123Z","level":"info","component":"registration","msg":"registered","host_pid":4242}
// Values are quoted/escaped as each format requires (control bytes escaped), so a hostile string
// from a client cannot forge a line. Thread-safe: a line is built in memory and written with one
// write(2) under a mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <string>
#include <string_view>

namespace vgpu::node {

enum class Level { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };
enum class LogFormat { kLogfmt, kJson };

// "error", "warn", "info", "debug"; ParseLevel accepts those (any case) and "warning".
const char* LevelName(Level level);
bool ParseLevel(std::string_view text, Level* level);
bool ParseLogFormat(std::string_view text, LogFormat* format);

// One key/value. Numbers are written bare; strings quoted when needed (logfmt) or always (JSON).
struct KV {
  KV(std::string_view k, std::string_view v) : key(k), text(v) {}
  KV(std::string_view k, const char* v) : key(k), text(v == nullptr ? "" : v) {}
  KV(std::string_view k, const std::string& v) : key(k), text(v) {}
  KV(std::string_view k, int64_t v) : key(k), text(std::to_string(v)), bare(true) {}
  KV(std::string_view k, int v) : KV(k, static_cast<int64_t>(v)) {}
  KV(std::string_view k, uint32_t v) : KV(k, static_cast<int64_t>(v)) {}
  KV(std::string_view k, uint64_t v) : key(k), text(std::to_string(v)), bare(true) {}
  KV(std::string_view k, double v);
  KV(std::string_view k, bool v) : key(k), text(v ? "true" : "false"), bare(true) {}
  std::string_view key;
  std::string text;
  bool bare = false;
};

class Logger {
 public:
  Logger() = default;
  void Configure(Level level, LogFormat format);
  // Replaces the output (default: write to fd 2). For tests.
  void SetSinkForTesting(std::function<void(const std::string& line)> sink);

  bool Enabled(Level level) const { return static_cast<int>(level) <= level_.load(std::memory_order_relaxed); }
  void Log(Level level, std::string_view component, std::string_view msg, std::initializer_list<KV> fields = {});

  // The line Log would write (without the trailing newline), for a given time. Pure.
  static std::string Format(LogFormat format, int64_t unix_ns, Level level, std::string_view component,
                            std::string_view msg, std::initializer_list<KV> fields);

 private:
  std::atomic<int> level_{static_cast<int>(Level::kInfo)};
  LogFormat format_ = LogFormat::kLogfmt;  // guarded by mu_
  std::mutex mu_;
  std::function<void(const std::string&)> sink_;  // guarded by mu_
};

}  // namespace vgpu::node
