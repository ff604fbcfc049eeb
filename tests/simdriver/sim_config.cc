// TEST DOUBLE ONLY: configuration of the simulated driver (see README.md).
#include "sim_config.h"

#include <cctype>
#include <cstdlib>
#include <limits>

namespace vgpusim {
namespace {

std::optional<uint64_t> ParseUnsigned(std::string_view text) {
  if (text.empty()) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

// Appends "NAME=value: why" to config.error.
void Complain(Config& config, const char* name, std::string_view value, const char* why) {
  if (!config.error.empty()) config.error += "; ";
  config.error += std::string(name) + "='" + std::string(value) + "': " + why;
}

const char* Env(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : nullptr;
}

void ReadSize(Config& config, const char* name, uint64_t& out, uint64_t min_value) {
  const char* text = Env(name);
  if (text == nullptr) return;
  const auto size = ParseSize(text);
  if (!size || *size < min_value) {
    Complain(config, name, text, "expected a size such as 2MiB (bytes, k/m/g, Ki/Mi/Gi, KiB/MiB/GiB)");
    return;
  }
  out = *size;
}

// A duration of 0..60000 ms, stored in ns.
void ReadMilliseconds(Config& config, const char* name, uint64_t& out_ns) {
  const char* text = Env(name);
  if (text == nullptr) return;
  const auto ms = ParseUnsigned(text);
  if (!ms || *ms > 60'000) {
    Complain(config, name, text, "expected milliseconds 0..60000");
    return;
  }
  out_ns = *ms * 1'000'000;
}

void ReadMemory(Config& config) {
  const uint64_t default_total = 16ull << 30;
  for (auto& bytes : config.memory_bytes) bytes = default_total;
  const char* text = Env("VGPU_SIM_MEMORY");
  if (text == nullptr) return;
  std::string_view rest(text);
  int index = 0;
  uint64_t last = default_total;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const auto size = ParseSize(item);
    if (!size || *size == 0 || index >= kMaxDevices) {
      Complain(config, "VGPU_SIM_MEMORY", text, "expected a size or a comma list of at most 8 sizes");
      return;
    }
    config.memory_bytes[index++] = last = *size;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  // A shorter list than the device count repeats its last value.
  for (int i = index; i < kMaxDevices; ++i) config.memory_bytes[i] = last;
}

}  // namespace

std::optional<uint64_t> ParseSize(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const auto number = ParseUnsigned(text.substr(0, digits));
  if (!number) return std::nullopt;
  std::string suffix(text.substr(digits));
  for (auto& c : suffix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  int shift = 0;
  if (suffix.empty() || suffix == "b") {
    shift = 0;
  } else if (suffix == "k" || suffix == "ki" || suffix == "kib") {
    shift = 10;
  } else if (suffix == "m" || suffix == "mi" || suffix == "mib") {
    shift = 20;
  } else if (suffix == "g" || suffix == "gi" || suffix == "gib") {
    shift = 30;
  } else {
    return std::nullopt;
  }
  if (shift > 0 && *number > (std::numeric_limits<uint64_t>::max() >> shift)) return std::nullopt;
  return *number << shift;
}

Config ReadConfig() {
  Config config;
  ReadMemory(config);
  if (const char* text = Env("VGPU_SIM_DEVICE_COUNT")) {
    const auto count = ParseUnsigned(text);
    if (!count || *count < 1 || *count > kMaxDevices) {
      Complain(config, "VGPU_SIM_DEVICE_COUNT", text, "expected 1..8");
    } else {
      config.device_count = static_cast<int>(*count);
    }
  }
  ReadSize(config, "VGPU_SIM_GRANULARITY", config.granularity, 1);
  if ((config.granularity & (config.granularity - 1)) != 0) {
    Complain(config, "VGPU_SIM_GRANULARITY", Env("VGPU_SIM_GRANULARITY"), "must be a power of two");
    config.granularity = 2ull << 20;
  }
  ReadSize(config, "VGPU_SIM_CONTEXT_OVERHEAD", config.context_overhead, 0);
  ReadSize(config, "VGPU_SIM_MODULE_MEMORY", config.module_bytes, 0);
  ReadSize(config, "VGPU_SIM_POOL_CHUNK", config.pool_chunk, 1);
  ReadSize(config, "VGPU_SIM_POOL_SETUP_MEMORY", config.pool_setup_bytes, 0);
  ReadSize(config, "VGPU_SIM_LAZY_MODULE_MEMORY", config.lazy_module_bytes, 0);
  ReadMilliseconds(config, "VGPU_SIM_TEARDOWN_MS", config.teardown_ns);
  ReadMilliseconds(config, "VGPU_SIM_CONTEXT_CREATE_MS", config.context_create_ns);
  ReadMilliseconds(config, "VGPU_SIM_GRAPH_INSTANTIATE_MS", config.graph_instantiate_ns);
  // Pool chunks are reserved from the device, so they follow the device granularity.
  config.pool_chunk = (config.pool_chunk + config.granularity - 1) / config.granularity * config.granularity;
  if (const char* text = Env("VGPU_SIM_KERNEL_NS")) {
    const auto ns = ParseUnsigned(text);
    if (!ns) {
      Complain(config, "VGPU_SIM_KERNEL_NS", text, "expected nanoseconds (an unsigned integer)");
    } else {
      config.kernel_ns = *ns;
    }
  }
  if (const char* text = Env("VGPU_SIM_DRIVER_VERSION")) {
    const auto version = ParseUnsigned(text);
    if (!version || *version < 1000 || *version > 99990) {
      Complain(config, "VGPU_SIM_DRIVER_VERSION", text, "expected a CUDA version number such as 13000");
    } else {
      config.driver_version = static_cast<int>(*version);
    }
  }
  config.fail_init = std::getenv("VGPU_SIM_FAIL_INIT") != nullptr;
  config.fail_nvml = std::getenv("VGPU_SIM_FAIL_NVML") != nullptr;
  if (const char* text = Env("VGPU_SIM_STATE")) config.state_path = text;
  return config;
}

}  // namespace vgpusim
