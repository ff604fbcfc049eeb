#include "cli/run_spec.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <set>

#include "common/config.h"

namespace vgpu::cli {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

constexpr std::array kRunOptions = {
    OptionSpec{"memory", 0, "SIZE",
               "Device-memory limit of the job, per GPU. SIZE is a byte count or a number with a\n"
               "suffix k/m/g or KiB/MiB/GiB (all powers of 1024, case-insensitive; fractions\n"
               "allowed). A bare SIZE applies to every visible GPU; I=SIZE to visible GPU I.\n"
               "Minimum 1 MiB. Allocations beyond the limit fail with CUDA_ERROR_OUT_OF_MEMORY.\n"
               "Examples: --memory 4GiB   --memory 512m   --memory 0=4GiB,1=2GiB\n"
               "          --memory 2GiB,1=8GiB (8 GiB on GPU 1, 2 GiB on the others)"},
    OptionSpec{"compute", 0, "PCT",
               "Compute limit: the share of GPU time the job's kernels may occupy, in percent\n"
               "(1..100, as nvidia-smi's GPU-Util shows it; 100 = no limit). PCT applies to\n"
               "every visible GPU; I=PCT to visible GPU I.\n"
               "Examples: --compute 30   --compute 0=30,1=60"},
    OptionSpec{"soft-compute", 0, "PCT",
               "Soft compute limit in percent (1..100, at least the --compute value of the same\n"
               "GPU): while the GPU is otherwise idle the job may burst up to PCT. Needs\n"
               "--compute. Per-device syntax as for --compute.\n"
               "Examples: --compute 30 --soft-compute 80   --soft-compute 0=50,1=90"},
    OptionSpec{"priority", 0, "N",
               "Task priority, a whole number from 0 to 100; 0 is the highest. Lower-priority\n"
               "jobs yield to higher-priority ones on the same GPU. Default: the library's (1).\n"
               "Example: --priority 0"},
    OptionSpec{"devices", 0, "LIST",
               "GPUs the job may see, as a comma-separated list of indices or GPU UUIDs\n"
               "(sets CUDA_VISIBLE_DEVICES). Per-device limits (I=...) then number the listed\n"
               "GPUs 0, 1, ... in list order. Replaces an inherited CUDA_VISIBLE_DEVICES:\n"
               "indices are the driver's own, not positions in the inherited list.\n"
               "Default: the inherited CUDA_VISIBLE_DEVICES.\n"
               "Examples: --devices 0,1   --devices GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"},
    OptionSpec{"oversubscribe", 0, "",
               "Let allocations that do not fit the memory limit spill into host memory\n"
               "(slower, never counted on the GPU), up to as much host memory as the limit,\n"
               "per GPU (sets CUDA_OVERSUBSCRIBE=true)."},
    OptionSpec{"oversubscribe-host-limit", 0, "SIZE",
               "With --oversubscribe (implied): the most host memory each GPU's allocations\n"
               "may spill into (sets CUDA_OVERSUBSCRIBE_HOST_LIMIT). Example: 16GiB"},
    OptionSpec{"ledger", 0, "PATH",
               "Use PATH as the job's shared ledger file instead of a fresh per-run one. Jobs\n"
               "given the same PATH share one budget. vgpu does not remove PATH afterwards.\n"
               "Default: <run dir>/ledger, where the run dir is\n"
               "$XDG_RUNTIME_DIR/vgpu/run-<pid>-<time> (else /tmp/vgpu-<uid>/run-<pid>-<time>),\n"
               "created with mode 0700 and removed when the job ends."},
    OptionSpec{"library", 0, "PATH",
               "Preload PATH instead of the installed libvgpu.so. Default, first found:\n"
               "$VGPU_LIBRARY, libvgpu.so next to the vgpu executable,\n"
               "<vgpu dir>/../lib/vgpu/libvgpu.so."},
    OptionSpec{"verbose", 'v', "",
               "Print the environment changes to stderr before running, and run the job with\n"
               "LIBCUDA_LOG_LEVEL=4 (the library's debug log)."},
    OptionSpec{"help", 'h', "", "Show this help."},
};

bool IsDigits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string Quote(std::string_view value) { return "\"" + std::string(value) + "\""; }

std::string BadValue(std::string_view option, std::string_view value, std::string_view why) {
  return "invalid --" + std::string(option) + " value " + Quote(value) + ": " + std::string(why);
}

// Strict non-negative decimal integer (no sign, no spaces), at most `max`.
std::optional<int> ParseIndex(std::string_view text, int max) {
  if (text.empty() || text.size() > 9) return std::nullopt;
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0 || value > max) {
    return std::nullopt;
  }
  return value;
}

std::vector<std::string_view> Split(std::string_view text, char separator) {
  std::vector<std::string_view> items;
  while (true) {
    const size_t pos = text.find(separator);
    items.push_back(text.substr(0, pos));
    if (pos == std::string_view::npos) return items;
    text.remove_prefix(pos + 1);
  }
}

// Parses one scalar of a per-device option: returns the value or sets *why.
using ScalarParser = std::optional<uint64_t> (*)(std::string_view, std::string* why);

std::optional<uint64_t> ParseMemoryValue(std::string_view text, std::string* why) {
  const std::optional<uint64_t> bytes = ParseSize(text, why);
  if (!bytes) return std::nullopt;
  if (*bytes < kMiB) {
    *why = "the limit is " + FormatSize(*bytes) + ", below the 1 MiB minimum";
    if (IsDigits(text)) *why += " (a number without a suffix is bytes; did you mean " + std::string(text) + "MiB?)";
    return std::nullopt;
  }
  return bytes;
}

std::optional<uint64_t> ParseComputeValue(std::string_view text, std::string* why) {
  const std::optional<int> percent = ParsePercent(text);
  if (!percent || *percent < 1) {
    *why = "expected a whole percentage from 1 to 100, such as 30";
    return std::nullopt;
  }
  return static_cast<uint64_t>(*percent);
}

// Merges one occurrence of a per-device option ("V", "I=V,J=W", "V,I=W") into `out`.
template <typename T>
std::string MergePerDevice(std::string_view option, std::string_view text, ScalarParser parse,
                           PerDevice<T>* out) {
  std::optional<T> all;
  std::map<int, T> device;
  for (const std::string_view item : Split(text, ',')) {
    if (item.empty()) return BadValue(option, text, "empty entry in the list");
    std::string why;
    const size_t eq = item.find('=');
    const std::string_view value_text = eq == std::string_view::npos ? item : item.substr(eq + 1);
    const std::optional<uint64_t> value = parse(value_text, &why);
    if (!value) return BadValue(option, text, (item != text ? Quote(value_text) + ": " : "") + why);
    if (eq == std::string_view::npos) {
      if (all) return BadValue(option, text, "more than one value for all devices");
      all = static_cast<T>(*value);
      continue;
    }
    const std::optional<int> index = ParseIndex(item.substr(0, eq), kMaxDevices - 1);
    if (!index) {
      return BadValue(option, text,
                      "device " + Quote(item.substr(0, eq)) + " is not an index from 0 to " +
                          std::to_string(kMaxDevices - 1));
    }
    if (device.count(*index) != 0) {
      return BadValue(option, text, "device " + std::to_string(*index) + " is given twice");
    }
    device[*index] = static_cast<T>(*value);
  }
  if (all) out->all = all;
  for (const auto& [index, value] : device) out->device[index] = value;
  return "";
}

std::string ParseDevices(std::string_view text, std::vector<std::string>* out) {
  std::vector<std::string> devices;
  std::set<std::string_view> seen;
  for (const std::string_view item : Split(text, ',')) {
    if (item.empty()) return BadValue("devices", text, "empty entry in the list");
    const bool is_uuid = item.starts_with("GPU-") || item.starts_with("MIG-");
    if (!is_uuid && !ParseIndex(item, 1023)) {
      return BadValue("devices", text,
                      Quote(item) + " is neither a device index nor a UUID (GPU-... or MIG-...)");
    }
    if (is_uuid && item.find_first_of(" \t\n=") != std::string_view::npos) {
      return BadValue("devices", text, Quote(item) + " is not a valid UUID");
    }
    if (!seen.insert(item).second) {
      return BadValue("devices", text, Quote(item) + " is listed twice");
    }
    devices.emplace_back(item);
  }
  if (devices.size() > static_cast<size_t>(kMaxDevices)) {
    return BadValue("devices", text, "more than " + std::to_string(kMaxDevices) + " devices");
  }
  *out = std::move(devices);
  return "";
}

template <typename T>
std::string CheckDeviceIndices(std::string_view option, const PerDevice<T>& values,
                               const std::vector<std::string>& devices) {
  if (devices.empty() || values.device.empty()) return "";
  const int last = values.device.rbegin()->first;
  if (last < static_cast<int>(devices.size())) return "";
  return "--" + std::string(option) + " sets a limit for device " + std::to_string(last) +
         ", but --devices makes only " + std::to_string(devices.size()) +
         " visible (numbered 0.." + std::to_string(devices.size() - 1) + " in list order)";
}

template <typename T>
std::optional<T> ValueFor(const PerDevice<T>& values, int device) {
  const auto it = values.device.find(device);
  return it != values.device.end() ? std::optional<T>(it->second) : values.all;
}

std::string CheckSoftCompute(const RunSpec& spec) {
  if (spec.soft_compute.empty()) return "";
  if (spec.compute.empty()) {
    return "--soft-compute needs --compute (the soft limit is how far the job may burst above it)";
  }
  for (int device = 0; device < kMaxDevices; ++device) {
    const std::optional<int> hard = ValueFor(spec.compute, device);
    const std::optional<int> soft = ValueFor(spec.soft_compute, device);
    if (hard && soft && *soft < *hard) {
      return "--soft-compute " + std::to_string(*soft) + " is below --compute " + std::to_string(*hard) +
             " for device " + std::to_string(device) + ": the soft limit must be at least the compute limit";
    }
  }
  return "";
}

// Applies one parsed option to `spec`; returns an error message or "".
std::string ApplyOption(const ParsedOption& option, RunSpec* spec) {
  const std::string_view name = option.spec->long_name;
  const std::string& value = option.value;
  if (name == "memory") return MergePerDevice(name, value, ParseMemoryValue, &spec->memory);
  if (name == "compute") return MergePerDevice(name, value, ParseComputeValue, &spec->compute);
  if (name == "soft-compute") return MergePerDevice(name, value, ParseComputeValue, &spec->soft_compute);
  if (name == "priority") {
    const std::optional<int> priority = ParseIndex(value, kMaxTaskPriority);
    if (!priority) {
      return BadValue(name, value,
                      "expected a whole number from 0 to " + std::to_string(kMaxTaskPriority) +
                          " (0 is the highest priority)");
    }
    spec->priority = priority;
    return "";
  }
  if (name == "devices") return ParseDevices(value, &spec->devices);
  if (name == "ledger" || name == "library") {
    if (value.empty()) return BadValue(name, value, "expected a path");
    (name == "ledger" ? spec->ledger_path : spec->library_path) = value;
    return "";
  }
  if (name == "oversubscribe-host-limit") {
    std::string why;
    const std::optional<uint64_t> bytes = ParseMemoryValue(value, &why);
    if (!bytes) return BadValue(name, value, why);
    spec->oversubscribe = true;
    spec->oversubscribe_host_limit = *bytes;
    return "";
  }
  if (name == "oversubscribe") spec->oversubscribe = true;
  if (name == "verbose") spec->verbose = true;
  if (name == "help") spec->help = true;
  return "";
}

// `name` is `base` or `base_<suffix>`. Any suffix, not only an index: a malformed per-device
// variable ("..._LIMIT_x") would otherwise survive and make the library reject the job.
bool IsBaseOrIndexed(std::string_view name, std::string_view base) {
  if (!name.starts_with(base)) return false;
  const std::string_view rest = name.substr(base.size());
  return rest.empty() || (rest.size() > 1 && rest[0] == '_');
}

bool IsVgpuLibrary(std::string_view path) {
  const size_t slash = path.rfind('/');
  return (slash == std::string_view::npos ? path : path.substr(slash + 1)) == "libvgpu.so";
}

}  // namespace

std::span<const OptionSpec> RunOptions() { return kRunOptions; }

RunSpecResult BuildRunSpec(const ParsedArgs& args) {
  RunSpecResult result;
  RunSpec& spec = result.spec;
  for (const ParsedOption& option : args.options) {
    result.error = ApplyOption(option, &spec);
    if (!result.ok()) return result;
  }
  spec.command = args.operands;
  if (spec.help) return result;
  for (const std::string& error :
       {CheckDeviceIndices("memory", spec.memory, spec.devices),
        CheckDeviceIndices("compute", spec.compute, spec.devices),
        CheckDeviceIndices("soft-compute", spec.soft_compute, spec.devices), CheckSoftCompute(spec)}) {
    if (!error.empty()) {
      result.error = error;
      return result;
    }
  }
  if (spec.command.empty()) result.error = "no command given (usage: vgpu run [options] -- command [args...])";
  return result;
}

bool IsInheritedLimitVariable(std::string_view name) {
  static constexpr std::string_view kIndexed[] = {
      "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT", "CUDA_MEM_LIMIT",
      "CUDA_CORE_LIMIT",          "CUDA_CORE_SOFT_LIMIT", "WRAPPER_MAX_MEMORY",
  };
  static constexpr std::string_view kExact[] = {
      "CUDA_OVERSUBSCRIBE",          "CUDA_MEMORY_OVERSUBSCRIBE",  "CUDA_OVERSUBSCRIBE_HOST_LIMIT", "CUDA_TASK_PRIORITY",
      "CUDA_DEVICE_MEMORY_SHARED_CACHE", "GPU_CORE_UTILIZATION_POLICY", "CUDA_DISABLE_CONTROL",
  };
  for (const std::string_view base : kIndexed) {
    if (IsBaseOrIndexed(name, base)) return true;
  }
  for (const std::string_view exact : kExact) {
    if (name == exact) return true;
  }
  // Any other CUDA_DEVICE_<X>_LIMIT(_<i>) spelling.
  constexpr std::string_view kPrefix = "CUDA_DEVICE_";
  if (!name.starts_with(kPrefix)) return false;
  const size_t limit = name.rfind("_LIMIT");
  if (limit == std::string_view::npos || limit < kPrefix.size()) return false;
  return IsBaseOrIndexed(name, name.substr(0, limit + 6));
}

std::string PreloadProblem(std::string_view path) {
  if (path.empty() || path[0] != '/') return "LD_PRELOAD needs an absolute path";
  if (path.find_first_of(": \t\n") != std::string_view::npos) {
    return "LD_PRELOAD cannot hold a path containing ':' or blanks";
  }
  return "";
}

std::string PrependPreload(std::string_view existing, std::string_view library) {
  std::string result(library);
  size_t start = 0;
  while (start <= existing.size()) {
    size_t end = existing.find_first_of(": ", start);
    if (end == std::string_view::npos) end = existing.size();
    const std::string_view entry = existing.substr(start, end - start);
    if (!entry.empty() && entry != library && !IsVgpuLibrary(entry)) {
      result.append(":").append(entry);
    }
    start = end + 1;
  }
  return result;
}

ledger::LimitSet RunLimits(const RunSpec& spec) {
  const auto sm = [](std::optional<int> percent) { return percent && *percent < 100 ? *percent : 0; };
  ledger::LimitSet limits;
  limits.authority = ledger::Authority::kVgpuRun;
  limits.task_priority = spec.priority.value_or(1);  // the library's default when none is set
  limits.default_memory_limit = spec.memory.all.value_or(0);
  limits.default_sm_limit = sm(spec.compute.all);
  limits.default_sm_soft_limit = spec.soft_compute.all.value_or(0);
  // Oversubscription: as much host memory as the device limit, unless a host limit is given.
  const auto host = [&](uint64_t memory) {
    return !spec.oversubscribe ? 0 : spec.oversubscribe_host_limit != 0 ? spec.oversubscribe_host_limit : memory;
  };
  limits.default_host_limit = host(limits.default_memory_limit);
  std::set<int> ordinals;
  for (const auto& [index, value] : spec.memory.device) ordinals.insert(index);
  for (const auto& [index, value] : spec.compute.device) ordinals.insert(index);
  for (const auto& [index, value] : spec.soft_compute.device) ordinals.insert(index);
  for (const int ordinal : ordinals) {
    const uint64_t memory = ValueFor(spec.memory, ordinal).value_or(0);
    limits.devices.push_back({ordinal, "", memory, sm(ValueFor(spec.compute, ordinal)),
                              ValueFor(spec.soft_compute, ordinal).value_or(0), host(memory)});
  }
  return limits;
}

RunEnvironment BuildRunEnvironment(const RunSpec& spec, const EnvMap& inherited,
                                   std::string_view library_path, std::string_view ledger_path) {
  RunEnvironment out;
  out.env = inherited;
  auto remove = [&](const std::string& name) {
    if (out.env.erase(name) != 0) out.changes.push_back({name, std::nullopt});
  };
  for (const auto& [name, value] : inherited) {
    if (IsInheritedLimitVariable(name)) remove(name);
  }
  // GPU_DEVICES_UUID lists the visible devices in order; a new device list makes it stale.
  if (!spec.devices.empty()) remove("GPU_DEVICES_UUID");

  auto set = [&](const std::string& name, std::string value) {
    out.env[name] = value;
    out.changes.push_back({name, std::move(value)});
  };
  const auto preload = inherited.find("LD_PRELOAD");
  set("LD_PRELOAD", PrependPreload(preload == inherited.end() ? "" : preload->second, library_path));
  if (!spec.devices.empty()) {
    std::string list;
    for (const std::string& device : spec.devices) list += (list.empty() ? "" : ",") + device;
    set("CUDA_VISIBLE_DEVICES", list);
  }
  // Memory is written in bytes: exact, and read the same way by every dialect's parser.
  if (spec.memory.all) set("CUDA_DEVICE_MEMORY_LIMIT", std::to_string(*spec.memory.all));
  for (const auto& [index, bytes] : spec.memory.device) {
    set("CUDA_DEVICE_MEMORY_LIMIT_" + std::to_string(index), std::to_string(bytes));
  }
  if (spec.compute.all) set("CUDA_DEVICE_SM_LIMIT", std::to_string(*spec.compute.all));
  for (const auto& [index, percent] : spec.compute.device) {
    set("CUDA_DEVICE_SM_LIMIT_" + std::to_string(index), std::to_string(percent));
  }
  if (spec.soft_compute.all) set("CUDA_CORE_SOFT_LIMIT", std::to_string(*spec.soft_compute.all));
  for (const auto& [index, percent] : spec.soft_compute.device) {
    set("CUDA_CORE_SOFT_LIMIT_" + std::to_string(index), std::to_string(percent));
  }
  if (spec.priority) set("CUDA_TASK_PRIORITY", std::to_string(*spec.priority));
  if (spec.oversubscribe) set("CUDA_OVERSUBSCRIBE", "true");
  if (spec.oversubscribe_host_limit != 0) {
    set("CUDA_OVERSUBSCRIBE_HOST_LIMIT", std::to_string(spec.oversubscribe_host_limit));
  }
  set("CUDA_DEVICE_MEMORY_SHARED_CACHE", std::string(ledger_path));
  if (spec.verbose) set("LIBCUDA_LOG_LEVEL", "4");
  return out;
}

}  // namespace vgpu::cli
