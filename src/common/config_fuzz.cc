// libFuzzer target: arbitrary bytes as values of the configuration variables.
//
// Input layout: chunks separated by '\0'. The first byte of a chunk picks a variable name from
// kNames (modulo), the rest is its value. The whole input is also fed to the value parsers.
// Crashes, sanitizer reports and the invariants below (checked with __builtin_trap) are bugs.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"

namespace {

constexpr const char* kNames[] = {
    "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT_0", "CUDA_DEVICE_MEMORY_LIMIT_15",
    "CUDA_DEVICE_MEMORY_LIMIT_16", "CUDA_DEVICE_MEMORY_LIMIT_01", "CUDA_MEM_LIMIT",
    "CUDA_MEM_LIMIT_0", "CUDA_MEM_LIMIT_x", "WRAPPER_MAX_MEMORY", "CUDA_DEVICE_SM_LIMIT",
    "CUDA_DEVICE_SM_LIMIT_0", "CUDA_DEVICE_SM_LIMIT_1", "CUDA_CORE_LIMIT", "CUDA_CORE_LIMIT_1",
    "CUDA_CORE_SOFT_LIMIT", "CUDA_CORE_SOFT_LIMIT_0", "CUDA_DEVICE_MEMORY_SHARED_CACHE",
    "CUDA_OVERSUBSCRIBE", "CUDA_MEMORY_OVERSUBSCRIBE", "CUDA_OVERSUBSCRIBE_HOST_LIMIT", "GPU_CORE_UTILIZATION_POLICY",
    "CUDA_TASK_PRIORITY", "LIBCUDA_LOG_LEVEL", "LOGGER_LEVEL", "CUDA_DISABLE_CONTROL",
    "GPU_DEVICES_UUID",
};
constexpr size_t kNameCount = sizeof(kNames) / sizeof(kNames[0]);

void Check(bool condition) {
  if (!condition) __builtin_trap();
}

void CheckValueParsers(std::string_view text) {
  if (const auto size = vgpu::ParseSize(text)) {
    // Formatting then parsing never grows the value and loses less than 1% of a unit.
    const auto again = vgpu::ParseSize(vgpu::FormatSize(*size));
    Check(again.has_value() && *again <= *size);
  } else {
    std::string why;
    Check(!vgpu::ParseSize(text, &why) && !why.empty());
  }
  if (const auto percent = vgpu::ParsePercent(text)) Check(*percent >= 0 && *percent <= 100);
  (void)vgpu::ParseBool(text);
}

void CheckResult(const vgpu::ConfigResult& result) {
  for (const auto* list : {&result.errors, &result.warnings}) {
    for (const vgpu::ConfigError& error : *list) {
      const std::string message = error.Message();
      Check(message.rfind("vgpu: ", 0) == 0);
      for (char c : message) Check(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
    }
  }
  if (!result.ok()) return;
  const vgpu::Config& config = result.config;
  const std::string description = config.Describe();
  Check(!description.empty() && description.back() == '\n');
  for (int i = 0; i < vgpu::kMaxDevices; ++i) {
    Check(config.SmLimit(i) >= 0 && config.SmLimit(i) < 100);
    Check(config.SmSoftLimit(i) == 0 || config.SmLimit(i) == 0 ||
          config.SmSoftLimit(i) >= config.SmLimit(i));
  }
  if (config.disable_control) Check(!config.HasAnyMemoryLimit() && !config.HasAnySmLimit());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  CheckValueParsers(input);

  std::vector<std::string> entries;
  size_t start = 0;
  while (start < input.size()) {
    size_t end = input.find('\0', start);
    if (end == std::string_view::npos) end = input.size();
    const std::string_view chunk = input.substr(start, end - start);
    if (!chunk.empty()) {
      const auto pick = static_cast<unsigned char>(chunk[0]);
      entries.push_back(std::string(kNames[pick % kNameCount]) + "=" + std::string(chunk.substr(1)));
    }
    start = end + 1;
  }
  std::vector<const char*> envp;
  for (const std::string& entry : entries) envp.push_back(entry.c_str());
  envp.push_back(nullptr);
  CheckResult(vgpu::ParseEnviron(envp.data()));
  return 0;
}
