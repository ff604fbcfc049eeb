// `vgpu run`: its option table, the validated RunSpec built from the options, and the job's
// environment built from a RunSpec.
//
// Everything here is a pure function of its arguments: the process environment, the library
// path and the ledger path are read at the edge (run.cc) and passed in as values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cli/args.h"
#include "ledger/ledger.h"

namespace vgpu::cli {

// The options of `vgpu run`, with their help text. The table outlives any ParsedArgs.
std::span<const OptionSpec> RunOptions();

// A value for every visible device and/or for individual ones ("4GiB", "0=4GiB,1=2GiB",
// "2GiB,1=8GiB"). Device keys are CUDA ordinals as the job sees them (after
// CUDA_VISIBLE_DEVICES), 0 .. kMaxDevices-1.
template <typename T>
struct PerDevice {
  std::optional<T> all;
  std::map<int, T> device;
  bool empty() const { return !all && device.empty(); }
};

struct RunSpec {
  PerDevice<uint64_t> memory;         // bytes, each >= 1 MiB
  PerDevice<int> compute;             // percent, 1..100 (100 = no limit)
  PerDevice<int> soft_compute;        // percent, 1..100, >= compute on the same device
  std::optional<int> priority;        // 0..kMaxTaskPriority, 0 = high
  std::vector<std::string> devices;   // indices or UUIDs; empty = inherit CUDA_VISIBLE_DEVICES
  bool oversubscribe = false;
  uint64_t oversubscribe_host_limit = 0;  // bytes, >= 1 MiB; 0 = as much as the memory limit
  std::string ledger_path;            // --ledger; empty = a fresh per-run directory
  std::string library_path;           // --library; empty = discover (library_path.h)
  bool verbose = false;
  bool help = false;                  // --help: print help, run nothing
  std::vector<std::string> command;   // argv of the job; non-empty unless help
};

struct RunSpecResult {
  RunSpec spec;
  std::string error;  // empty = valid; else one line naming the option and the value
  bool ok() const { return error.empty(); }
};

// Validates every option value with the config parsers (ParseSize, ParsePercent) and the
// cross-option rules (per-device index within --devices, soft >= hard compute).
// Repeated options merge; a later value for the same device wins.
// REQUIRES: `args` was parsed with RunOptions().
RunSpecResult BuildRunSpec(const ParsedArgs& args);

// The limits `vgpu run` writes into the job's ledger as its authority: defaults from the
// all-device values, one DeviceLimit per ordinal named in a per-device value, holding that
// ordinal's effective limits (compute 100 = unlimited = 0). They equal, in effect, what the
// library derives from the job's environment (ledger::LimitSetFromConfig of
// BuildRunEnvironment), so a job's processes report no disagreement. UUIDs from --devices are
// not recorded: CUDA accepts UUID prefixes there, and the library binds the full UUID itself.
// REQUIRES: spec is valid (BuildRunSpec).
ledger::LimitSet RunLimits(const RunSpec& spec);

using EnvMap = std::map<std::string, std::string>;

struct EnvChange {
  std::string name;
  std::optional<std::string> value;  // nullopt = removed
};

struct RunEnvironment {
  EnvMap env;                       // the job's complete environment
  std::vector<EnvChange> changes;   // removals first, then assignments, for --verbose
};

// The job's environment: `inherited`, minus every inherited limit variable of every dialect
// (IsInheritedLimitVariable), plus the RunSpec's limits in the canonical variables, LD_PRELOAD
// with `library_path` first, and CUDA_DEVICE_MEMORY_SHARED_CACHE = `ledger_path`.
// REQUIRES: library_path is absolute; spec is valid (BuildRunSpec).
RunEnvironment BuildRunEnvironment(const RunSpec& spec, const EnvMap& inherited,
                                   std::string_view library_path, std::string_view ledger_path);

// True for a variable that sets or disables limits in any dialect vgpu reads: the canonical
// CUDA_DEVICE_MEMORY_LIMIT(_*), CUDA_DEVICE_SM_LIMIT(_*), any CUDA_DEVICE_<X>_LIMIT(_*),
// CUDA_MEM_LIMIT(_*), CUDA_CORE_LIMIT(_*), CUDA_CORE_SOFT_LIMIT(_*), WRAPPER_MAX_MEMORY(_*),
// CUDA_OVERSUBSCRIBE, CUDA_MEMORY_OVERSUBSCRIBE, CUDA_OVERSUBSCRIBE_HOST_LIMIT, CUDA_TASK_PRIORITY,
// CUDA_DEVICE_MEMORY_SHARED_CACHE, GPU_CORE_UTILIZATION_POLICY, CUDA_DISABLE_CONTROL.
bool IsInheritedLimitVariable(std::string_view name);

// Why `path` cannot be an LD_PRELOAD entry (ld.so splits the list at ':' and blanks, and
// ignores relative entries for set-uid programs), or "" when it can.
std::string PreloadProblem(std::string_view path);

// `library` followed by the entries of `existing` (separated by ':' or spaces, as ld.so reads
// them) that are neither `library` itself nor another copy of libvgpu.so (two interposers would
// each count the same allocations). Joined with ':'.
std::string PrependPreload(std::string_view existing, std::string_view library);

}  // namespace vgpu::cli
