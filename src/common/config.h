// Canonical configuration of vgpu, read from every supported environment dialect.
//
// One model inside, many spellings outside. HAMi-core's names are canonical; aliases from
// vgpu-controller / vgpu-manager / vcuda deployments map onto the same fields:
//
//   field                 canonical variable(s)                         aliases
//   memory limit          CUDA_DEVICE_MEMORY_LIMIT, ..._LIMIT_<i>      CUDA_MEM_LIMIT, CUDA_MEM_LIMIT_<i>,
//                                                                       WRAPPER_MAX_MEMORY (plain bytes)
//   compute limit (%)     CUDA_DEVICE_SM_LIMIT, CUDA_DEVICE_SM_LIMIT_<i> CUDA_CORE_LIMIT, CUDA_CORE_LIMIT_<i>
//   soft compute limit    -                                             CUDA_CORE_SOFT_LIMIT, ..._SOFT_LIMIT_<i>
//   core policy           GPU_CORE_UTILIZATION_POLICY (force|disable|default, any case)
//   task priority         CUDA_TASK_PRIORITY (0 = high)
//   oversubscribe         CUDA_OVERSUBSCRIBE                            CUDA_MEMORY_OVERSUBSCRIBE
//   host spill limit      CUDA_OVERSUBSCRIBE_HOST_LIMIT (size; needs oversubscription)
//   ledger path           CUDA_DEVICE_MEMORY_SHARED_CACHE
//   node-wide board path  VGPU_BOARD (priorities; docs/compute.md)
//   compute turns         VGPU_COMPUTE_TURNS (boolean, default true; docs/compute.md, "Turns")
//   light measurement     VGPU_COMPUTE_LIGHT (boolean, default true; docs/compute.md, "Light measurement")
//   run hold              VGPU_COMPUTE_RUN_HOLD (boolean, default true; docs/compute.md, "Turns")
//   give way              VGPU_COMPUTE_GIVE_WAY (boolean, default true; docs/compute.md, "Turns")
//   compute period        VGPU_COMPUTE_PERIOD (duration 10ms..5s, or 0/off; docs/compute.md, "Slices")
//   compute trace         VGPU_COMPUTE_TRACE (absolute file path, %p = pid; docs/compute.md, "Tracing")
//   device UUIDs          -                                             GPU_DEVICES_UUID (comma-separated)
//   log level             LIBCUDA_LOG_LEVEL (0..5)                      LOGGER_LEVEL (0..5, vcuda scale)
//   pass-through          CUDA_DISABLE_CONTROL
//
// <i> is the CUDA device ordinal as the process sees it (after CUDA_VISIBLE_DEVICES), 0..kMaxDevices-1.
// The level scales of the two log variables differ; config.cc documents the mapping and why.
//
// Value syntax:
//   sizes      see ParseSize; a limit of 0 bytes is an error (it would silently mean "no limit").
//   percents   whole numbers 0..100, optional '%'. For hard limits 0 and 100 both mean "no limit"
//              (HAMi-core semantics); a soft limit of 0 means "none".
//   booleans   see ParseBool.
//   durations  see ParseDurationMs ("500ms", "1s"); VGPU_COMPUTE_PERIOD also takes 0 or off.
//   Empty values count as unset. Surrounding whitespace is ignored.
//
// Error policy: every malformed or out-of-range value, every out-of-range device index and every
// contradiction between two dialects (different values for the same field) is a ConfigError; the
// same value spelled in two dialects ("1g" and "1073741824") is fine. Nothing falls back to
// "unlimited" silently.
//
// CUDA_DISABLE_CONTROL=true takes precedence over everything: the result is then ok() with
// disable_control=true, no limits, and the problems found in the other variables moved to
// `warnings` (nothing is enforced, so they cannot make enforcement wrong). A malformed
// CUDA_DISABLE_CONTROL is itself an error and does not disable control.
//
// Thread safety: ParseConfig / ParseEnviron are pure functions of their input (they do not read
// the process environment themselves); Config is a plain value.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vgpu {

inline constexpr int kMaxDevices = 16;

// CUDA_TASK_PRIORITY accepts 0..kMaxTaskPriority; 0 is the highest priority.
inline constexpr int kMaxTaskPriority = 100;

enum class CorePolicy { kDefault, kForce, kDisable };

enum class LogLevel : int { kSilent = 0, kError = 1, kWarn = 2, kInfo = 3, kDebug = 4, kTrace = 5 };

// Lower-case names: "silent", "error", "warn", "info", "debug", "trace".
const char* LogLevelName(LogLevel level);
// "default", "force", "disable".
const char* CorePolicyName(CorePolicy policy);

inline constexpr int64_t kDefaultComputePeriodMs = 50;

struct Config {
  // CUDA_DISABLE_CONTROL=true: the library forwards every call untouched. When set, every limit
  // below is left at its default (no limit) and only log_level is meaningful.
  bool disable_control = false;

  // Memory limits in bytes. 0 = no limit. Per-device entries (when non-zero) override the
  // all-device one. Never 0 because a variable said "0": that is rejected.
  uint64_t memory_limit_all = 0;
  std::array<uint64_t, kMaxDevices> memory_limit_device{};

  // Compute limits in percent. sm_limit_all: 0 = no limit, else 1..99.
  // sm_limit_device[i]: 0 = not set (inherit sm_limit_all), 1..99 = limit,
  // 100 = explicitly no limit on this device (CUDA_DEVICE_SM_LIMIT_<i>=0 or =100), overriding
  // sm_limit_all. Read them through SmLimit().
  int sm_limit_all = 0;
  std::array<int, kMaxDevices> sm_limit_device{};

  // Soft compute limits (burst ceiling while the GPU is otherwise idle), percent 1..100,
  // 0 = none. Per-device entries override. Validated: where a device has both, soft >= hard; a
  // soft limit needs some hard limit, a device-specific one a hard limit on its device; none is
  // allowed with policy force. An all-device soft limit does not apply to an unlimited device.
  int sm_soft_limit = 0;  // CUDA_CORE_SOFT_LIMIT
  std::array<int, kMaxDevices> sm_soft_limit_device{};  // CUDA_CORE_SOFT_LIMIT_<i>

  CorePolicy core_policy = CorePolicy::kDefault;
  int task_priority = 1;  // CUDA_TASK_PRIORITY: 0 = high, larger = lower (HAMi-core default 1)
  bool task_priority_set = false;  // CUDA_TASK_PRIORITY was given: take part in priorities
  // Memory oversubscription: allocations beyond a device's memory limit spill into host memory,
  // at most oversubscribe_host_limit bytes per device (0 = as much as the device's memory limit).
  // oversubscribe_host_limit is non-zero only with oversubscribe (validated). Read them through
  // HostSpillLimit().
  bool oversubscribe = false;
  uint64_t oversubscribe_host_limit = 0;  // CUDA_OVERSUBSCRIBE_HOST_LIMIT
  std::string shared_cache_path;          // absolute; empty = default chosen by the ledger
  std::string board_path;                 // VGPU_BOARD, absolute; empty = ledger::kDefaultBoardPath
  // VGPU_MEMORY_HEADROOM: room the memory limit keeps for memory the driver adds without an
  // allocation call (lazily loaded modules, library workspaces, per-stream state). Unset: the
  // default, 128 MiB but at most an eighth of the limit. Read it through MemoryHeadroom().
  uint64_t memory_headroom = 0;
  bool memory_headroom_set = false;
  bool compute_turns = true;              // VGPU_COMPUTE_TURNS: limited containers take turns on a GPU
  // VGPU_COMPUTE_LIGHT: a container that NVML shows below its limit measures its launches
  // onto idle streams by samples (compute::BusyTracker::SetLight).
  bool compute_light = true;
  // VGPU_COMPUTE_RUN_HOLD: an open run holds the turn through its synchronisations and, once a
  // neighbour waited through it, to its end, charged its wall time (compute::ControllerOptions::
  // run_hold_ns and charge_held_runs); false: a run holds the turn only while its work is claimed.
  bool compute_run_hold = true;
  // VGPU_COMPUTE_GIVE_WAY: a run that fills its share gives way to a neighbour below its limit
  // that waits for the turn, and a waiter below its limit says so (compute::ControllerOptions::
  // light_waiter_queue_ns), unless its launches overlap (give_way_max_overlap). false: neither.
  bool compute_give_way = true;
  // VGPU_COMPUTE_PERIOD: a limited process runs share x period, then rests (docs/compute.md);
  // 0 = no runs, bursts launch by launch.
  int64_t compute_period_ms = kDefaultComputePeriodMs;
  // VGPU_COMPUTE_TRACE: the limiter's launches, sleeps, busy intervals and charges are written
  // there at exit (compute/trace.h); "%p" is the pid. Empty: no trace.
  std::string compute_trace_path;
  std::vector<std::string> device_uuids;  // GPU_DEVICES_UUID, in CUDA ordinal order, validated
  LogLevel log_level = LogLevel::kError;  // default: errors only

  // Effective limits for CUDA ordinal `device` (0 when unlimited or out of range).
  uint64_t MemoryLimit(int device) const;
  int SmLimit(int device) const;
  int SmSoftLimit(int device) const;
  // Host bytes CUDA ordinal `device` may spill (0 = no spilling): without oversubscription 0,
  // else oversubscribe_host_limit, else the device's memory limit. HostSpillLimitAll: the same
  // for devices without a per-device memory limit.
  uint64_t HostSpillLimit(int device) const;
  uint64_t HostSpillLimitAll() const;
  // Headroom kept free under a memory limit of `limit` bytes (0 when limit is 0).
  uint64_t MemoryHeadroom(uint64_t limit) const;
  bool HasAnyMemoryLimit() const;
  bool HasAnySmLimit() const;

  // Multi-line, human-readable dump of the effective configuration (for the verbose log and
  // `vgpu info`), one "key: value" per line, each ending in '\n'. Memory and compute limits,
  // policy, priority and log level are always listed ("none" when unlimited); the soft limit,
  // oversubscription, ledger path and UUIDs only when set. Log it line by line: it can be longer
  // than one log line.
  std::string Describe() const;
};

// One problem with the input: which variable, its raw value, and why it is rejected. For a
// contradiction between two variables, other_variable/other_value name the second one.
struct ConfigError {
  std::string variable;
  std::string value;
  std::string reason;
  std::string other_variable;  // empty unless this is a contradiction
  std::string other_value;

  // One line, no trailing newline. Values are quoted with C escapes for control bytes, quotes
  // and backslashes, and shortened when very long:
  //   vgpu: invalid CUDA_DEVICE_MEMORY_LIMIT="12x": <reason>
  //   vgpu: conflicting CUDA_DEVICE_SM_LIMIT="30" and CUDA_CORE_LIMIT="40": <reason>
  std::string Message() const;
};

struct ConfigResult {
  Config config;
  std::vector<ConfigError> errors;    // empty = config is valid
  std::vector<ConfigError> warnings;  // problems ignored because CUDA_DISABLE_CONTROL=true
  bool ok() const { return errors.empty(); }
};

// Returns the value of an environment variable or nullptr. Lets tests pass a fake environment.
using EnvLookup = std::function<const char*(const char* name)>;

// Reads every dialect through `env`. Malformed, out-of-range or contradictory input yields errors
// naming the variable(s); the returned config is then not to be used for enforcement.
// A lookup cannot list variables, so out-of-range device indices are found by probing indices
// kMaxDevices..kProbedDeviceIndices-1 only; ParseEnviron also catches "_016", "_x" and the like.
inline constexpr int kProbedDeviceIndices = 128;
ConfigResult ParseConfig(const EnvLookup& env);

// Same, from an environ-style array ("NAME=VALUE" strings, nullptr-terminated; the first entry
// of a name wins, as with getenv). Sees every variable name, so any per-device variable whose
// suffix is not an index 0..kMaxDevices-1 is reported. Production: ParseEnviron(environ).
// REQUIRES: envp is not modified concurrently (same rule as getenv).
ConfigResult ParseEnviron(const char* const* envp);

// Size strings: "1073741824", "1024m", "1g", "512k", "4GiB", "512MiB", "1Gi", "2G", "1.5GiB",
// "4 GiB". Units k, m, g, t, p, e with optional 'i' and optional 'B' (or 'B' alone), any case,
// all powers of 1024 (HAMi-core semantics: 1g = 1073741824); a bare "e" is refused as probable
// exponent notation (write "EiB"). A decimal fraction needs a unit and
// is rounded down to whole bytes. Surrounding whitespace and blanks before the unit are allowed.
// Returns nullopt when empty, negative, malformed (junk, exponent notation) or above 2^64-1;
// then *error (when given) says why, starting "expected a size such as 4GiB, ...".
// ParseSize("0") is 0: rejecting zero limits is the caller's business.
std::optional<uint64_t> ParseSize(std::string_view text, std::string* error = nullptr);

// Integer percent 0..100 ("30", "30%"). nullopt when malformed or out of range.
std::optional<int> ParsePercent(std::string_view text);

// true/false/1/0/yes/no/on/off/t/f (case-insensitive, surrounding whitespace ignored).
// nullopt when malformed.
std::optional<bool> ParseBool(std::string_view text);

// Milliseconds from "500ms", "2s", "10m" or "1h": whole numbers with a unit (required).
// nullopt when malformed, negative or above a year.
std::optional<int64_t> ParseDurationMs(std::string_view text);

// "4 GiB", "512 MiB", "1.50 GiB", "123 B" — for messages. Exact multiples print without a
// fraction; otherwise two decimals, rounded down (so 1 GiB - 1 prints "1023.99 MiB").
std::string FormatSize(uint64_t bytes);

}  // namespace vgpu
