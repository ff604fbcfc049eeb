// Canonical configuration of vgpu, read from every supported environment dialect.
//
// One model inside, many spellings outside. HAMi-core's names are canonical; aliases from
// vgpu-controller / vcuda / Alnair-era deployments map onto the same fields:
//
//   field                 canonical variable(s)                         aliases
//   memory limit          CUDA_DEVICE_MEMORY_LIMIT, ..._LIMIT_<i>      CUDA_MEM_LIMIT_<i>, WRAPPER_MAX_MEMORY (bytes)
//   compute limit (%)     CUDA_DEVICE_SM_LIMIT, CUDA_DEVICE_SM_LIMIT_<i> CUDA_CORE_LIMIT
//   soft compute limit    -                                             CUDA_CORE_SOFT_LIMIT
//   core policy           GPU_CORE_UTILIZATION_POLICY (force|disable|default)
//   task priority         CUDA_TASK_PRIORITY (0 = high)
//   oversubscribe         CUDA_OVERSUBSCRIBE                            CUDA_MEMORY_OVERSUBSCRIBE
//   ledger path           CUDA_DEVICE_MEMORY_SHARED_CACHE
//   device UUIDs          -                                             GPU_DEVICES_UUID
//   log level             LIBCUDA_LOG_LEVEL                             LOGGER_LEVEL (0..5)
//   pass-through          CUDA_DISABLE_CONTROL
//
// <i> is the CUDA device ordinal as the process sees it (after CUDA_VISIBLE_DEVICES).
//
// Thread safety: ParseConfig is a pure function of its input; Config is a plain value.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace vgpu {

inline constexpr int kMaxDevices = 16;

enum class CorePolicy { kDefault, kForce, kDisable };

enum class LogLevel : int { kSilent = 0, kError = 1, kWarn = 2, kInfo = 3, kDebug = 4, kTrace = 5 };

struct Config {
  // CUDA_DISABLE_CONTROL=true: the library forwards every call untouched.
  bool disable_control = false;

  // Memory limits in bytes. 0 = no limit. Per-device entries override the all-device one.
  uint64_t memory_limit_all = 0;
  std::array<uint64_t, kMaxDevices> memory_limit_device{};

  // Compute limits in percent (1..100). 0 = no limit. Per-device entries override.
  int sm_limit_all = 0;
  std::array<int, kMaxDevices> sm_limit_device{};
  int sm_soft_limit = 0;  // CUDA_CORE_SOFT_LIMIT, 0 = none; >= sm limit when set

  CorePolicy core_policy = CorePolicy::kDefault;
  int task_priority = 1;  // CUDA_TASK_PRIORITY: 0 = high, larger = lower
  bool oversubscribe = false;
  std::string shared_cache_path;          // empty = default chosen by the ledger
  std::vector<std::string> device_uuids;  // GPU_DEVICES_UUID, in CUDA ordinal order
  LogLevel log_level = LogLevel::kError;

  // Effective limits for CUDA ordinal `device` (0 when unlimited or out of range).
  uint64_t MemoryLimit(int device) const;
  int SmLimit(int device) const;
  bool HasAnyMemoryLimit() const;
  bool HasAnySmLimit() const;

  // Multi-line, human-readable dump of the effective configuration (for the verbose log and
  // `vgpu info`). Only set fields are listed.
  std::string Describe() const;
};

// One problem with the input: which variable, its raw value, and why it is rejected.
struct ConfigError {
  std::string variable;
  std::string value;
  std::string reason;
  // "vgpu: invalid CUDA_DEVICE_MEMORY_LIMIT=\"12x\": <reason>"
  std::string Message() const;
};

struct ConfigResult {
  Config config;
  std::vector<ConfigError> errors;  // empty = config is valid
  bool ok() const { return errors.empty(); }
};

// Returns the value of an environment variable or nullptr. Lets tests pass a fake environment.
using EnvLookup = std::function<const char*(const char* name)>;

// Reads every dialect. Malformed, out-of-range or contradictory input yields errors naming the
// variable(s); the returned config is then not to be used for enforcement.
ConfigResult ParseConfig(const EnvLookup& env);

// Size strings: "1073741824", "1024m", "1g", "512k", "4GiB", "512MiB", "1Gi", "2G", "1.5GiB".
// All suffixes are powers of 1024, case-insensitive, optional 'B'. Returns nullopt when malformed
// or when the value overflows 64 bits.
std::optional<uint64_t> ParseSize(std::string_view text);

// Integer percent 0..100 ("30", "30%"). nullopt when malformed or out of range.
std::optional<int> ParsePercent(std::string_view text);

// true/false/1/0/yes/no/on/off (case-insensitive). nullopt when malformed.
std::optional<bool> ParseBool(std::string_view text);

// "4 GiB", "512 MiB", "1.50 GiB", "123 B" — for messages.
std::string FormatSize(uint64_t bytes);

}  // namespace vgpu
