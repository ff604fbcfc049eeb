// Reading the configuration dialects into one Config (see config.h for the contract).
//
// What the other systems do (read from their public sources; facts only):
//
// HAMi-core (Project-HAMi/HAMi-core), LIBCUDA_LOG_LEVEL:
//   - README "Log" table: 0 = errors only; 1 (default) and 2 = errors, warnings, messages;
//     3 = adds infos; 4 = adds debugs.
//   - src/include/log_utils.h: errors print unconditionally (no value silences them); warnings
//     and "messages" print when the variable is unset or >= 2; infos at >= 3; debugs at >= 4.
//     The value is read with atoi (junk reads as 0, never an error). So the code's 1 behaves like
//     0, although the README documents 1 as the default with warnings; a later src/log_utils.c
//     caches the level with default 2. Nothing is defined above 4.
//   - HAMi's device plugin injects CUDA_DEVICE_MEMORY_LIMIT_<i>="<MiB>m", CUDA_DEVICE_SM_LIMIT,
//     CUDA_OVERSUBSCRIBE="true", GPU_CORE_UTILIZATION_POLICY="disable"; its webhook injects
//     CUDA_TASK_PRIORITY (0 = high, 1 = low, HAMi-core default 1). HAMi-core itself reads
//     GPU_CORE_UTILIZATION_POLICY as FORCE/force, DISABLE/disable, anything else = default.
//
// vcuda-controller (tkestack) and its descendants vgpu-controller / vgpu-manager
// (coldzerofear), LOGGER_LEVEL:
//   - Message levels INFO=0, ERROR=1, WARNING=2, FATAL=3, VERBOSE=4 (vgpu-manager adds DETAIL=5);
//     a message prints when its level <= LOGGER_LEVEL; unset means 3; parsed with strtoul.
//   - Their README table: 0 infos; 1 errors+infos; 2 +warnings; 3 (default) +fatal;
//     4 +verbose; 5 +details. Info lines print at every value: the scale is not ordered by
//     severity, and no value is quieter than "infos".
//   - Same family, other variables: CUDA_MEM_LIMIT_<i> takes sizes such as "1000m" (strtod with
//     a k/m/g/t suffix, powers of 1024), falling back to an unindexed CUDA_MEM_LIMIT;
//     CUDA_CORE_LIMIT is a percent ("50"), CUDA_CORE_SOFT_LIMIT a percent that lets a container
//     exceed its hard limit (both also as _<i> forms in vgpu-manager); GPU_DEVICES_UUID is a
//     comma-separated list "GPU-84ccfef5-2da2-1225-4836-7d347036f968,GPU-..." in ordinal order;
//     CUDA_MEMORY_OVERSUBSCRIBE switches on memory oversubscription.
//
// Our mapping onto LogLevel (chosen so that a user of either system sees about the same lines):
//   LIBCUDA_LOG_LEVEL  0 -> error   1, 2 -> warn   3 -> info   4 -> debug   5 -> trace
//     (1 follows HAMi-core's documentation; 5 is our extension, HAMi-core has no level above 4.)
//   LOGGER_LEVEL       0..3 -> info   4 (verbose) -> debug   5 (detail) -> trace
//     (every vcuda level includes info lines, so none maps below info.)
//   Neither variable set -> error (errors only). Values outside 0..5 are errors, not clamped.
//   kSilent is not reachable from the environment; callers may SetLogLevel(kSilent) themselves.

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/config_internal.h"

namespace vgpu {
namespace {

using internal::IsDigit;
using internal::Trim;
using internal::UintStatus;

// Per-device variables; each also exists without the _<i> suffix (all devices).
constexpr const char* kIndexedPrefixes[] = {"CUDA_DEVICE_MEMORY_LIMIT", "CUDA_MEM_LIMIT",
                                            "CUDA_DEVICE_SM_LIMIT", "CUDA_CORE_LIMIT",
                                            "CUDA_CORE_SOFT_LIMIT"};

constexpr char kPercentExpected[] =
    "expected a whole percentage from 0 to 100 such as 30 (0 and 100 mean no limit)";
constexpr char kSoftExpected[] =
    "expected a whole percentage from 0 to 100 such as 60 (0 means no soft limit)";
constexpr char kBoolExpected[] = "expected true or false (also 1/0, yes/no, on/off)";
constexpr char kUuidExpected[] =
    "expected a comma-separated list of GPU UUIDs such as GPU-c496852d-f5df-316c-e2d5-86f0b322ec4c";

std::string Indexed(const char* prefix, int index) {
  return std::string(prefix) + "_" + std::to_string(index);
}

// A value read from one variable, kept with its origin for error messages.
template <typename T>
struct Source {
  std::string variable;
  std::string raw;
  T value;
};

template <typename T>
using ValueParser = bool (*)(std::string_view raw, T* out, std::string* reason);

// ---- value parsers: true and *out on success, else false and *reason ------------------------

bool ParseMemoryLimit(std::string_view raw, uint64_t* out, std::string* reason) {
  const std::optional<uint64_t> bytes = ParseSize(raw, reason);
  if (!bytes) return false;
  if (*bytes == 0) {
    *reason = "a limit of 0 bytes is not allowed: it would mean no limit at all; leave the "
              "variable unset for no limit, or give a size such as 512MiB";
    return false;
  }
  *out = *bytes;
  return true;
}

bool ParsePlainBytesLimit(std::string_view raw, uint64_t* out, std::string* reason) {
  uint64_t bytes = 0;
  const UintStatus status = internal::ParseUint(Trim(raw), UINT64_MAX, &bytes);
  if (status != UintStatus::kOk) {
    *reason = "expected a plain number of bytes such as 1073741824 (this variable takes no unit)";
    if (status == UintStatus::kTooLarge) *reason += "; the value does not fit in 64 bits";
    return false;
  }
  return ParseMemoryLimit(raw, out, reason);
}

bool ParsePercentWithReason(std::string_view raw, int* out, std::string* reason,
                            const char* expected) {
  const std::optional<int> percent = ParsePercent(raw);
  if (percent) {
    *out = *percent;
    return true;
  }
  *reason = expected;
  std::string_view s = Trim(raw);
  if (!s.empty() && s.back() == '%') s = Trim(s.substr(0, s.size() - 1));
  uint64_t value = 0;
  if (internal::ParseUint(s, UINT64_MAX, &value) != UintStatus::kMalformed) {
    *reason += "; the value is above 100";
  } else if (!s.empty() && s[0] == '-') {
    *reason += "; negative values are not allowed";
  }
  return false;
}

// All-device hard limit: 0 and 100 both mean no limit, stored as 0.
bool ParseHardLimitAll(std::string_view raw, int* out, std::string* reason) {
  if (!ParsePercentWithReason(raw, out, reason, kPercentExpected)) return false;
  if (*out == 100) *out = 0;
  return true;
}

// Per-device hard limit: 0 and 100 both mean "explicitly no limit here", stored as 100.
bool ParseHardLimitDevice(std::string_view raw, int* out, std::string* reason) {
  if (!ParsePercentWithReason(raw, out, reason, kPercentExpected)) return false;
  if (*out == 0) *out = 100;
  return true;
}

bool ParseSoftLimit(std::string_view raw, int* out, std::string* reason) {
  return ParsePercentWithReason(raw, out, reason, kSoftExpected);
}

bool ParseBoolValue(std::string_view raw, bool* out, std::string* reason) {
  const std::optional<bool> value = ParseBool(raw);
  if (!value) {
    *reason = kBoolExpected;
    return false;
  }
  *out = *value;
  return true;
}

// VGPU_MEMORY_HEADROOM: a size, 0 allowed (no headroom).
bool ParseHeadroom(std::string_view raw, uint64_t* out, std::string* reason) {
  const std::optional<uint64_t> bytes = ParseSize(raw, reason);
  if (!bytes) return false;
  *out = *bytes;
  return true;
}

// VGPU_COMPUTE_PERIOD: 0/off, or a duration within what the controller's debt bound allows.
constexpr int64_t kMinPeriodMs = 10;
constexpr int64_t kMaxPeriodMs = 5'000;

bool ParsePeriod(std::string_view raw, int64_t* out, std::string* reason) {
  const std::string_view s = Trim(raw);
  if (s == "0" || internal::EqualsIgnoreCase(s, "off")) {
    *out = 0;
    return true;
  }
  const std::optional<int64_t> ms = ParseDurationMs(s);
  if (!ms || *ms < kMinPeriodMs || *ms > kMaxPeriodMs) {
    *reason = "expected a duration from 10ms to 5s, such as 50ms or 1s (or 0/off for bursts launch by launch)";
    return false;
  }
  *out = *ms;
  return true;
}

bool ParsePolicy(std::string_view raw, CorePolicy* out, std::string* reason) {
  const std::string_view s = Trim(raw);
  for (CorePolicy policy : {CorePolicy::kDefault, CorePolicy::kForce, CorePolicy::kDisable}) {
    if (internal::EqualsIgnoreCase(s, CorePolicyName(policy))) {
      *out = policy;
      return true;
    }
  }
  *reason = "expected force, disable or default";
  return false;
}

bool ParsePriority(std::string_view raw, int* out, std::string* reason) {
  uint64_t value = 0;
  if (internal::ParseUint(Trim(raw), kMaxTaskPriority, &value) != UintStatus::kOk) {
    *reason = "expected a whole number from 0 (highest priority) to " +
              std::to_string(kMaxTaskPriority) + ", such as 0 or 1";
    return false;
  }
  *out = static_cast<int>(value);
  return true;
}

// LIBCUDA_LOG_LEVEL (HAMi-core scale) and LOGGER_LEVEL (vcuda scale); see the top of this file.
constexpr LogLevel kFromLibcudaLevel[] = {LogLevel::kError, LogLevel::kWarn,  LogLevel::kWarn,
                                          LogLevel::kInfo,  LogLevel::kDebug, LogLevel::kTrace};
constexpr LogLevel kFromLoggerLevel[] = {LogLevel::kInfo, LogLevel::kInfo,  LogLevel::kInfo,
                                         LogLevel::kInfo, LogLevel::kDebug, LogLevel::kTrace};

bool ParseLibcudaLevel(std::string_view raw, LogLevel* out, std::string* reason) {
  uint64_t value = 0;
  if (internal::ParseUint(Trim(raw), 5, &value) != UintStatus::kOk) {
    *reason = "expected 0 (errors only), 1 or 2 (warnings), 3 (info), 4 (debug) or 5 (trace)";
    return false;
  }
  *out = kFromLibcudaLevel[value];
  return true;
}

bool ParseLoggerLevel(std::string_view raw, LogLevel* out, std::string* reason) {
  uint64_t value = 0;
  if (internal::ParseUint(Trim(raw), 5, &value) != UintStatus::kOk) {
    *reason = "expected 0 to 5 on the vcuda scale (0-3 info, 4 verbose, 5 detail)";
    return false;
  }
  *out = kFromLoggerLevel[value];
  return true;
}

// An absolute path of a file (not a directory); `expected` is the message otherwise.
bool ParseAbsoluteFile(std::string_view raw, std::string* out, std::string* reason, const char* expected) {
  const std::string_view path = Trim(raw);
  if (path.empty() || path[0] != '/' || path.back() == '/' || path.size() >= 4096) {
    *reason = expected;
    return false;
  }
  *out = std::string(path);
  return true;
}

bool ParseLedgerPath(std::string_view raw, std::string* out, std::string* reason) {
  // A relative path would resolve against each process's working directory, so processes of
  // one container could end up with different ledgers and each get the full limit.
  return ParseAbsoluteFile(raw, out, reason, "expected an absolute file path such as /tmp/vgpu/ledger.cache");
}

// VGPU_COMPUTE_TRACE: a file the process writes at exit; relative paths would land in whatever
// directory each process runs in.
bool ParseTracePath(std::string_view raw, std::string* out, std::string* reason) {
  return ParseAbsoluteFile(raw, out, reason, "expected an absolute file path such as /tmp/vgpu-trace.%p (%p: the process id)");
}

// Quotes `text` for a one-line message: C escapes for quotes, backslashes and control bytes;
// values longer than 120 bytes are cut and end in "...".
std::string Quote(std::string_view text) {
  constexpr size_t kMaxShown = 120;
  std::string out = "\"";
  for (size_t i = 0; i < text.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > kMaxShown) out += "...";
  out += '"';
  return out;
}

bool IsHexRun(std::string_view s, size_t pos, size_t count) {
  if (pos + count > s.size()) return false;
  for (size_t i = pos; i < pos + count; ++i) {
    const char c = s[i];
    const bool hex = IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (!hex) return false;
  }
  return true;
}

// "GPU-" or "MIG-" followed by 8-4-4-4-12 hex digits, as NVML prints them.
bool IsDeviceUuid(std::string_view s) {
  if (s.size() != 40 || !(s.substr(0, 4) == "GPU-" || s.substr(0, 4) == "MIG-")) return false;
  size_t pos = 4;
  for (size_t group : {8, 4, 4, 4, 12}) {
    if (!IsHexRun(s, pos, group)) return false;
    pos += group;
    if (pos < s.size() && s[pos++] != '-') return false;
  }
  return true;
}

bool ParseUuidList(std::string_view raw, std::vector<std::string>* out, std::string* reason) {
  std::vector<std::string> uuids;
  std::string_view rest = raw;
  for (size_t entry = 1;; ++entry) {
    const size_t comma = rest.find(',');
    const std::string_view item = Trim(rest.substr(0, comma));
    std::string problem;
    if (item.empty()) {
      problem = "entry " + std::to_string(entry) + " is empty";
    } else if (!IsDeviceUuid(item)) {
      problem = "entry " + std::to_string(entry) + " " + Quote(item) + " is not a GPU UUID";
    } else {
      for (const std::string& seen : uuids) {
        if (seen == item) problem = Quote(item) + " is listed twice";
      }
    }
    if (problem.empty() && uuids.size() == static_cast<size_t>(kMaxDevices)) {
      problem = "more than " + std::to_string(kMaxDevices) + " devices are listed";
    }
    if (!problem.empty()) {
      *reason = std::string(kUuidExpected) + "; " + problem;
      return false;
    }
    uuids.emplace_back(item);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  *out = std::move(uuids);
  return true;
}

// ---- reading variables ----------------------------------------------------------------------

std::string ShowBytes(const uint64_t& bytes) {
  return FormatSize(bytes) + " = " + std::to_string(bytes) + " bytes";
}
std::string ShowHard(const int& percent) {
  return (percent == 0 || percent == 100) ? "no limit" : std::to_string(percent) + "%";
}
std::string ShowPercent(const int& percent) { return std::to_string(percent) + "%"; }
std::string ShowBool(const bool& value) { return value ? "true" : "false"; }
std::string ShowLevel(const LogLevel& level) { return LogLevelName(level); }

class DialectReader {
 public:
  DialectReader(const EnvLookup& env, std::vector<ConfigError>* errors)
      : env_(env), errors_(errors) {}

  // The raw value, or nullptr when the variable is unset or empty.
  const char* Raw(const std::string& name) const {
    const char* value = env_(name.c_str());
    return (value == nullptr || value[0] == '\0') ? nullptr : value;
  }

  // Parses `name` when set: a valid value is appended to *sources, an invalid one reported.
  template <typename T>
  void Read(const std::string& name, ValueParser<T> parse, std::vector<Source<T>>* sources) {
    const char* raw = Raw(name);
    if (raw == nullptr) return;
    T value{};
    std::string reason;
    if (parse(raw, &value, &reason)) {
      sources->push_back(Source<T>{name, raw, std::move(value)});
    } else {
      errors_->push_back(ConfigError{name, raw, std::move(reason), "", ""});
    }
  }

  template <typename T>
  std::optional<Source<T>> ReadOne(const std::string& name, ValueParser<T> parse) {
    std::vector<Source<T>> sources;
    Read(name, parse, &sources);
    if (sources.empty()) return std::nullopt;
    return std::move(sources.front());
  }

  // The first source wins; every later one with a different value is a contradiction.
  template <typename T>
  std::optional<Source<T>> Reconcile(const std::vector<Source<T>>& sources, const std::string& what,
                                     std::string (*show)(const T&)) {
    if (sources.empty()) return std::nullopt;
    const Source<T>& first = sources.front();
    for (size_t i = 1; i < sources.size(); ++i) {
      if (sources[i].value == first.value) continue;
      Conflict(first.variable, first.raw, sources[i].variable, sources[i].raw,
               "they set different " + what + ": " + show(first.value) + " vs " +
                   show(sources[i].value) + "; set only one, or the same value in both");
    }
    return first;
  }

  void Conflict(const std::string& a, const std::string& a_raw, const std::string& b,
                const std::string& b_raw, std::string reason) {
    errors_->push_back(ConfigError{a, a_raw, std::move(reason), b, b_raw});
  }

  void Error(const std::string& name, const std::string& raw, std::string reason) {
    errors_->push_back(ConfigError{name, raw, std::move(reason), "", ""});
  }

 private:
  const EnvLookup& env_;
  std::vector<ConfigError>* errors_;
};

// Reconciled compute-limit sources, kept for the soft-limit checks.
struct ComputeSources {
  std::optional<Source<int>> hard_all;
  std::optional<Source<int>> hard_device[kMaxDevices];
  std::optional<Source<int>> soft_all;
  std::optional<Source<int>> soft_device[kMaxDevices];
};

void ReadMemoryLimits(DialectReader& reader, Config* config) {
  std::vector<Source<uint64_t>> all;
  reader.Read("CUDA_DEVICE_MEMORY_LIMIT", ParseMemoryLimit, &all);
  reader.Read("CUDA_MEM_LIMIT", ParseMemoryLimit, &all);
  reader.Read("WRAPPER_MAX_MEMORY", ParsePlainBytesLimit, &all);
  if (auto chosen = reader.Reconcile(all, "memory limits for all devices", ShowBytes)) {
    config->memory_limit_all = chosen->value;
  }
  for (int i = 0; i < kMaxDevices; ++i) {
    std::vector<Source<uint64_t>> device;
    reader.Read(Indexed("CUDA_DEVICE_MEMORY_LIMIT", i), ParseMemoryLimit, &device);
    reader.Read(Indexed("CUDA_MEM_LIMIT", i), ParseMemoryLimit, &device);
    const std::string what = "memory limits for device " + std::to_string(i);
    if (auto chosen = reader.Reconcile(device, what, ShowBytes)) {
      config->memory_limit_device[i] = chosen->value;
    }
  }
}

ComputeSources ReadComputeLimits(DialectReader& reader, Config* config) {
  ComputeSources sources;
  std::vector<Source<int>> hard, soft;
  reader.Read("CUDA_DEVICE_SM_LIMIT", ParseHardLimitAll, &hard);
  reader.Read("CUDA_CORE_LIMIT", ParseHardLimitAll, &hard);
  sources.hard_all = reader.Reconcile(hard, "compute limits for all devices", ShowHard);
  reader.Read("CUDA_CORE_SOFT_LIMIT", ParseSoftLimit, &soft);
  sources.soft_all = reader.Reconcile(soft, "soft compute limits", ShowPercent);
  for (int i = 0; i < kMaxDevices; ++i) {
    std::vector<Source<int>> device;
    reader.Read(Indexed("CUDA_DEVICE_SM_LIMIT", i), ParseHardLimitDevice, &device);
    reader.Read(Indexed("CUDA_CORE_LIMIT", i), ParseHardLimitDevice, &device);
    const std::string what = "compute limits for device " + std::to_string(i);
    sources.hard_device[i] = reader.Reconcile(device, what, ShowHard);
    sources.soft_device[i] = reader.ReadOne(Indexed("CUDA_CORE_SOFT_LIMIT", i), ParseSoftLimit);
  }
  if (sources.hard_all) config->sm_limit_all = sources.hard_all->value;
  if (sources.soft_all) config->sm_soft_limit = sources.soft_all->value;
  for (int i = 0; i < kMaxDevices; ++i) {
    if (sources.hard_device[i]) config->sm_limit_device[i] = sources.hard_device[i]->value;
    if (sources.soft_device[i]) config->sm_soft_limit_device[i] = sources.soft_device[i]->value;
  }
  return sources;
}

// A soft limit must sit at or above the hard limit it relaxes, needs a hard limit to relax, and
// cannot coexist with the "force" policy (which forbids running above the limit).
void CheckSoftLimits(DialectReader& reader, const ComputeSources& s, const Config& config,
                     const std::optional<Source<CorePolicy>>& policy) {
  std::vector<const Source<int>*> softs;
  if (s.soft_all && s.soft_all->value > 0) softs.push_back(&*s.soft_all);
  for (const auto& soft : s.soft_device) {
    if (soft && soft->value > 0) softs.push_back(&*soft);
  }
  for (const Source<int>* soft : softs) {
    if (!config.HasAnySmLimit()) {
      reader.Error(soft->variable, soft->raw,
                   "a soft compute limit needs a hard one to relax: set CUDA_DEVICE_SM_LIMIT "
                   "(or CUDA_CORE_LIMIT) too, or unset this variable");
    } else if (policy && policy->value == CorePolicy::kForce) {
      reader.Conflict(policy->variable, policy->raw, soft->variable, soft->raw,
                      "the force policy never lets a container run above its compute limit, "
                      "while a soft limit lets it burst; use policy default with a soft limit");
    }
  }
  std::vector<std::pair<std::string, std::string>> reported;
  for (int i = 0; i < kMaxDevices; ++i) {
    const auto& hard = s.hard_device[i] ? s.hard_device[i] : s.hard_all;
    const auto& soft = s.soft_device[i] ? s.soft_device[i] : s.soft_all;
    if (!hard && s.soft_device[i] && s.soft_device[i]->value > 0 && config.HasAnySmLimit()) {
      reader.Error(soft->variable, soft->raw,
                   "device " + std::to_string(i) + " has no compute limit for this soft limit to "
                   "relax: set CUDA_DEVICE_SM_LIMIT_" + std::to_string(i) + " too, or unset this variable");
      continue;
    }
    if (!hard || !soft || hard->value == 0 || soft->value == 0) continue;
    if (soft->value >= hard->value) continue;
    // An all-device soft limit simply does not apply to a device made unlimited on its own.
    if (hard->value == 100 && !s.soft_device[i]) continue;
    const std::pair<std::string, std::string> key{soft->variable, hard->variable};
    bool seen = false;
    for (const auto& r : reported) seen = seen || r == key;
    if (seen) continue;
    reported.push_back(key);
    reader.Conflict(soft->variable, soft->raw, hard->variable, hard->raw,
                    "the soft limit (" + ShowPercent(soft->value) + ") is below the hard limit (" +
                        ShowHard(hard->value) + "); a soft limit must be at least the hard one");
  }
}

// CUDA_OVERSUBSCRIBE_HOST_LIMIT caps what oversubscription may spill; without oversubscription
// it would silently do nothing, so it is refused.
void ReadHostSpillLimit(DialectReader& reader, const std::optional<Source<bool>>& oversubscribe, Config* config) {
  const auto host = reader.ReadOne("CUDA_OVERSUBSCRIBE_HOST_LIMIT", ParseMemoryLimit);
  if (!host) return;
  if (!oversubscribe || !oversubscribe->value) {
    reader.Error(host->variable, host->raw,
                 "a host spill limit needs memory oversubscription: set CUDA_OVERSUBSCRIBE=true too, "
                 "or unset this variable");
    return;
  }
  config->oversubscribe_host_limit = host->value;
}

std::optional<Source<CorePolicy>> ReadScalars(DialectReader& reader, Config* config) {
  const auto policy = reader.ReadOne("GPU_CORE_UTILIZATION_POLICY", ParsePolicy);
  if (policy) config->core_policy = policy->value;
  if (auto priority = reader.ReadOne("CUDA_TASK_PRIORITY", ParsePriority)) {
    config->task_priority = priority->value;
    config->task_priority_set = true;
  }
  std::vector<Source<bool>> oversubscribe;
  reader.Read("CUDA_OVERSUBSCRIBE", ParseBoolValue, &oversubscribe);
  reader.Read("CUDA_MEMORY_OVERSUBSCRIBE", ParseBoolValue, &oversubscribe);
  const auto chosen_oversubscribe = reader.Reconcile(oversubscribe, "oversubscription settings", ShowBool);
  if (chosen_oversubscribe) config->oversubscribe = chosen_oversubscribe->value;
  ReadHostSpillLimit(reader, chosen_oversubscribe, config);
  if (auto path = reader.ReadOne("CUDA_DEVICE_MEMORY_SHARED_CACHE", ParseLedgerPath)) {
    config->shared_cache_path = std::move(path->value);
  }
  if (auto path = reader.ReadOne("VGPU_BOARD", ParseLedgerPath)) {
    config->board_path = std::move(path->value);
  }
  if (auto headroom = reader.ReadOne("VGPU_MEMORY_HEADROOM", ParseHeadroom)) {
    config->memory_headroom = headroom->value;
    config->memory_headroom_set = true;
  }
  if (auto turns = reader.ReadOne("VGPU_COMPUTE_TURNS", ParseBoolValue)) {
    config->compute_turns = turns->value;
  }
  if (auto light = reader.ReadOne("VGPU_COMPUTE_LIGHT", ParseBoolValue)) {
    config->compute_light = light->value;
  }
  if (auto hold = reader.ReadOne("VGPU_COMPUTE_RUN_HOLD", ParseBoolValue)) {
    config->compute_run_hold = hold->value;
  }
  if (auto give = reader.ReadOne("VGPU_COMPUTE_GIVE_WAY", ParseBoolValue)) {
    config->compute_give_way = give->value;
  }
  if (auto period = reader.ReadOne("VGPU_COMPUTE_PERIOD", ParsePeriod)) {
    config->compute_period_ms = period->value;
  }
  if (auto trace = reader.ReadOne("VGPU_COMPUTE_TRACE", ParseTracePath)) {
    config->compute_trace_path = std::move(trace->value);
  }
  if (auto uuids = reader.ReadOne("GPU_DEVICES_UUID", ParseUuidList)) {
    config->device_uuids = std::move(uuids->value);
  }
  std::vector<Source<LogLevel>> levels;
  reader.Read("LIBCUDA_LOG_LEVEL", ParseLibcudaLevel, &levels);
  reader.Read("LOGGER_LEVEL", ParseLoggerLevel, &levels);
  if (auto chosen = reader.Reconcile(levels, "log levels", ShowLevel)) {
    config->log_level = chosen->value;
  }
  return policy;
}

static_assert(kMaxDevices == 16, "kIndexReason spells out the device index range");
constexpr char kIndexReason[] =
    "the device index must be a number from 0 to 15 without leading zeros (the CUDA ordinal "
    "after CUDA_VISIBLE_DEVICES; vgpu supports at most 16 devices)";

// True when `suffix` is a canonical device index 0..kMaxDevices-1.
bool IsValidIndex(std::string_view suffix) {
  uint64_t index = 0;
  if (suffix.size() > 1 && suffix[0] == '0') return false;
  return internal::ParseUint(suffix, kMaxDevices - 1, &index) == UintStatus::kOk;
}

// Reports per-device variables whose index is out of range. With `envp`, every name is seen;
// otherwise indices kMaxDevices..kProbedDeviceIndices-1 are probed through the lookup.
void CheckDeviceIndices(DialectReader& reader, const char* const* envp) {
  for (const char* prefix : kIndexedPrefixes) {
    const std::string stem = std::string(prefix) + "_";
    if (envp == nullptr) {
      for (int i = kMaxDevices; i < kProbedDeviceIndices; ++i) {
        if (const char* raw = reader.Raw(Indexed(prefix, i))) {
          reader.Error(Indexed(prefix, i), raw, kIndexReason);
        }
      }
      continue;
    }
    for (const char* const* entry = envp; *entry != nullptr; ++entry) {
      const std::string_view text = *entry;
      const size_t equals = text.find('=');
      if (equals == std::string_view::npos || equals + 1 == text.size()) continue;
      const std::string_view name = text.substr(0, equals);
      if (name.substr(0, stem.size()) != stem || IsValidIndex(name.substr(stem.size()))) continue;
      const std::string variable(name);
      if (reader.Raw(variable) == text.data() + equals + 1) {  // first entry of this name only
        reader.Error(variable, std::string(text.substr(equals + 1)), kIndexReason);
      }
    }
  }
}

ConfigResult ParseWith(const EnvLookup& env, const char* const* envp) {
  ConfigResult result;
  std::vector<ConfigError> problems;
  DialectReader reader(env, &problems);
  Config& config = result.config;
  ReadMemoryLimits(reader, &config);
  const ComputeSources compute = ReadComputeLimits(reader, &config);
  const auto policy = ReadScalars(reader, &config);
  CheckSoftLimits(reader, compute, config, policy);
  CheckDeviceIndices(reader, envp);

  std::vector<ConfigError> disable_errors;
  DialectReader disable_reader(env, &disable_errors);
  const auto disable = disable_reader.ReadOne("CUDA_DISABLE_CONTROL", ParseBoolValue);
  if (disable && disable->value) {
    // Nothing is enforced, so malformed limits cannot make enforcement wrong: keep the log level
    // (so the pass-through can still be logged) and report the rest as warnings.
    Config pass_through;
    pass_through.disable_control = true;
    pass_through.log_level = config.log_level;
    result.config = std::move(pass_through);
    result.warnings = std::move(problems);
    return result;
  }
  result.errors = std::move(disable_errors);
  for (ConfigError& error : problems) result.errors.push_back(std::move(error));
  return result;
}

const char* EnvironLookup(const char* const* envp, const char* name) {
  const size_t length = std::strlen(name);
  for (const char* const* entry = envp; *entry != nullptr; ++entry) {
    if (std::strncmp(*entry, name, length) == 0 && (*entry)[length] == '=') {
      return *entry + length + 1;
    }
  }
  return nullptr;
}

void AppendLine(std::string* out, const std::string& key, const std::string& value) {
  *out += key;
  *out += ": ";
  *out += value;
  *out += '\n';
}

}  // namespace

const char* LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kSilent: return "silent";
    case LogLevel::kError: return "error";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
    case LogLevel::kTrace: return "trace";
  }
  return "unknown";
}

const char* CorePolicyName(CorePolicy policy) {
  switch (policy) {
    case CorePolicy::kDefault: return "default";
    case CorePolicy::kForce: return "force";
    case CorePolicy::kDisable: return "disable";
  }
  return "unknown";
}

uint64_t Config::MemoryLimit(int device) const {
  if (device < 0 || device >= kMaxDevices) return 0;
  return memory_limit_device[device] != 0 ? memory_limit_device[device] : memory_limit_all;
}

int Config::SmLimit(int device) const {
  if (device < 0 || device >= kMaxDevices) return 0;
  const int limit = sm_limit_device[device] != 0 ? sm_limit_device[device] : sm_limit_all;
  return limit >= 100 ? 0 : limit;
}

int Config::SmSoftLimit(int device) const {
  if (device < 0 || device >= kMaxDevices) return 0;
  return sm_soft_limit_device[device] != 0 ? sm_soft_limit_device[device] : sm_soft_limit;
}

uint64_t Config::HostSpillLimit(int device) const {
  if (!oversubscribe || device < 0 || device >= kMaxDevices) return 0;
  return oversubscribe_host_limit != 0 ? oversubscribe_host_limit : MemoryLimit(device);
}

uint64_t Config::HostSpillLimitAll() const {
  if (!oversubscribe) return 0;
  return oversubscribe_host_limit != 0 ? oversubscribe_host_limit : memory_limit_all;
}

uint64_t Config::MemoryHeadroom(uint64_t limit) const {
  if (limit == 0) return 0;
  constexpr uint64_t kDefaultHeadroom = 128ull << 20;
  const uint64_t headroom = memory_headroom_set ? memory_headroom : std::min(kDefaultHeadroom, limit / 8);
  return std::min(headroom, limit);
}

bool Config::HasAnyMemoryLimit() const {
  for (int i = 0; i < kMaxDevices; ++i) {
    if (MemoryLimit(i) != 0) return true;
  }
  return false;
}

bool Config::HasAnySmLimit() const {
  for (int i = 0; i < kMaxDevices; ++i) {
    if (SmLimit(i) != 0) return true;
  }
  return false;
}

namespace {

// "memory limit: ..." and one line per device override, for Describe().
template <typename T>
void DescribeLimits(std::string* out, const char* key, T all, const std::array<T, kMaxDevices>& device,
                    bool any, std::string (*show)(const T&)) {
  if (all != 0) {
    AppendLine(out, key, show(all) + " on every device");
  } else {
    AppendLine(out, key, any ? "only on the devices listed below" : "none");
  }
  for (int i = 0; i < kMaxDevices; ++i) {
    if (device[i] != 0) AppendLine(out, std::string(key) + " on device " + std::to_string(i), show(device[i]));
  }
}

std::string ShowBytesLong(const uint64_t& bytes) {
  return FormatSize(bytes) + " (" + std::to_string(bytes) + " bytes)";
}

}  // namespace

std::string Config::Describe() const {
  std::string out;
  if (disable_control) {
    AppendLine(&out, "control", "disabled by CUDA_DISABLE_CONTROL (calls pass through, no limits)");
    AppendLine(&out, "log level", LogLevelName(log_level));
    return out;
  }
  bool any_device_memory = false, any_device_sm = false, any_device_soft = false;
  for (int i = 0; i < kMaxDevices; ++i) {
    any_device_memory = any_device_memory || memory_limit_device[i] != 0;
    any_device_sm = any_device_sm || sm_limit_device[i] != 0;
    any_device_soft = any_device_soft || sm_soft_limit_device[i] != 0;
  }
  DescribeLimits(&out, "memory limit", memory_limit_all, memory_limit_device, any_device_memory,
                 ShowBytesLong);
  DescribeLimits(&out, "compute limit", sm_limit_all, sm_limit_device, any_device_sm, ShowHard);
  if (sm_soft_limit != 0 || any_device_soft) {
    DescribeLimits(&out, "soft compute limit", sm_soft_limit, sm_soft_limit_device, true, ShowPercent);
  }
  AppendLine(&out, "core policy", CorePolicyName(core_policy));
  AppendLine(&out, "task priority",
             std::to_string(task_priority) + (task_priority == 0 ? " (highest)" : ""));
  if (oversubscribe) {
    AppendLine(&out, "oversubscribe",
               "yes, spilling at most " +
                   (oversubscribe_host_limit != 0 ? ShowBytesLong(oversubscribe_host_limit)
                                                  : std::string("as much as the memory limit")) +
                   " of host memory per device");
  }
  if (!shared_cache_path.empty()) AppendLine(&out, "ledger", shared_cache_path);
  if (!board_path.empty()) AppendLine(&out, "board", board_path);
  if (memory_headroom_set) AppendLine(&out, "memory headroom", ShowBytesLong(memory_headroom));
  if (!compute_turns) AppendLine(&out, "compute turns", "off");
  if (!compute_light) AppendLine(&out, "light measurement", "off");
  if (!compute_run_hold) AppendLine(&out, "run hold", "off (a run holds the turn only while its work is claimed)");
  if (!compute_give_way) AppendLine(&out, "give way", "off (a run keeps its queue while a waiter below its limit waits)");
  if (compute_period_ms != kDefaultComputePeriodMs) {
    AppendLine(&out, "compute period",
               compute_period_ms != 0 ? std::to_string(compute_period_ms) + " ms (runs of share x period)"
                                      : std::string("off (bursts, launch by launch)"));
  }
  if (!compute_trace_path.empty()) AppendLine(&out, "compute trace", compute_trace_path);
  for (size_t i = 0; i < device_uuids.size(); ++i) {
    AppendLine(&out, "device " + std::to_string(i) + " uuid", device_uuids[i]);
  }
  AppendLine(&out, "log level", LogLevelName(log_level));
  return out;
}

std::string ConfigError::Message() const {
  std::string out = "vgpu: ";
  if (other_variable.empty()) {
    out += "invalid " + variable + "=" + Quote(value);
  } else {
    out += "conflicting " + variable + "=" + Quote(value) + " and " + other_variable + "=" +
           Quote(other_value);
  }
  out += ": ";
  out += reason;
  return out;
}

ConfigResult ParseConfig(const EnvLookup& env) { return ParseWith(env, nullptr); }

ConfigResult ParseEnviron(const char* const* envp) {
  static const char* const kEmpty[] = {nullptr};
  if (envp == nullptr) envp = kEmpty;
  const EnvLookup lookup = [envp](const char* name) { return EnvironLookup(envp, name); };
  return ParseWith(lookup, envp);
}

}  // namespace vgpu
