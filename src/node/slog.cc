#include "node/slog.h"

#include <errno.h>
#include <time.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>

namespace vgpu::node {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string UtcTimestamp(int64_t unix_ns) {
  const time_t seconds = static_cast<time_t>(unix_ns / 1'000'000'000);
  struct tm tm;
  gmtime_r(&seconds, &tm);
  char buf[48];
  snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
           tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>((unix_ns / 1'000'000) % 1000));
  return buf;
}

void AppendEscaped(std::string* out, std::string_view s) {
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '\t') {
      out->append("\\t");
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      snprintf(buf, sizeof(buf), "\\u%04x", u);
      out->append(buf);
    } else {
      out->push_back(c);
    }
  }
}

bool NeedsQuotes(std::string_view s) {
  if (s.empty()) return true;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f || c == '"' || c == '=' || c == '\\') return true;
  }
  return false;
}

void AppendLogfmt(std::string* out, std::string_view key, std::string_view value, bool bare) {
  out->push_back(' ');
  out->append(key);
  out->push_back('=');
  if (bare || !NeedsQuotes(value)) {
    out->append(value);
  } else {
    out->push_back('"');
    AppendEscaped(out, value);
    out->push_back('"');
  }
}

void AppendJson(std::string* out, std::string_view key, std::string_view value, bool bare) {
  out->append(",\"");
  AppendEscaped(out, key);
  out->append("\":");
  if (bare) {
    out->append(value);
  } else {
    out->push_back('"');
    AppendEscaped(out, value);
    out->push_back('"');
  }
}

}  // namespace

KV::KV(std::string_view k, double v) : key(k), bare(true) {
  if (!std::isfinite(v)) {
    text = "0";
    return;
  }
  char buf[32];
  snprintf(buf, sizeof(buf), "%.6g", v);
  text = buf;
}

const char* LevelName(Level level) {
  switch (level) {
    case Level::kError: return "error";
    case Level::kWarn: return "warn";
    case Level::kInfo: return "info";
    case Level::kDebug: return "debug";
  }
  return "info";
}

bool ParseLevel(std::string_view text, Level* level) {
  const std::string t = Lower(text);
  if (t == "error") *level = Level::kError;
  else if (t == "warn" || t == "warning") *level = Level::kWarn;
  else if (t == "info") *level = Level::kInfo;
  else if (t == "debug") *level = Level::kDebug;
  else return false;
  return true;
}

bool ParseLogFormat(std::string_view text, LogFormat* format) {
  const std::string t = Lower(text);
  if (t == "logfmt" || t == "text") *format = LogFormat::kLogfmt;
  else if (t == "json") *format = LogFormat::kJson;
  else return false;
  return true;
}

void Logger::Configure(Level level, LogFormat format) {
  std::lock_guard<std::mutex> lock(mu_);
  level_.store(static_cast<int>(level));
  format_ = format;
}

void Logger::SetSinkForTesting(std::function<void(const std::string&)> sink) {
  std::lock_guard<std::mutex> lock(mu_);
  sink_ = std::move(sink);
}

std::string Logger::Format(LogFormat format, int64_t unix_ns, Level level, std::string_view component,
                           std::string_view msg, std::initializer_list<KV> fields) {
  std::string line;
  if (format == LogFormat::kJson) {
    line = "{\"time\":\"" + UtcTimestamp(unix_ns) + "\",\"level\":\"" + LevelName(level) + "\"";
    AppendJson(&line, "component", component, false);
    AppendJson(&line, "msg", msg, false);
    for (const KV& kv : fields) AppendJson(&line, kv.key, kv.text, kv.bare);
    line.push_back('}');
  } else {
    line = "time=" + UtcTimestamp(unix_ns) + " level=" + LevelName(level);
    AppendLogfmt(&line, "component", component, false);
    AppendLogfmt(&line, "msg", msg, false);
    for (const KV& kv : fields) AppendLogfmt(&line, kv.key, kv.text, kv.bare);
  }
  return line;
}

void Logger::Log(Level level, std::string_view component, std::string_view msg, std::initializer_list<KV> fields) {
  if (!Enabled(level)) return;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  const int64_t now = static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  std::lock_guard<std::mutex> lock(mu_);
  std::string line = Format(format_, now, level, component, msg, fields);
  if (sink_) {
    sink_(line);
    return;
  }
  line.push_back('\n');
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = write(2, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

}  // namespace vgpu::node
