// Simulated driver configuration: the environment, read once.
//
// TEST DOUBLE ONLY. Part of the simulated libcuda/libnvidia-ml used by CI; never deployed.
//
// Every VGPU_SIM_* variable is documented in README.md. ReadConfig() is the only place that
// calls getenv for simulator settings (CUDA_VISIBLE_DEVICES is read by the CUDA side at cuInit).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#define VGPU_SIM_API __attribute__((visibility("default")))

namespace vgpusim {

inline constexpr int kMaxDevices = 8;

struct Config {
  int device_count = 1;
  uint64_t memory_bytes[kMaxDevices] = {};  // total per physical device
  uint64_t granularity = 2ull << 20;
  uint64_t context_overhead = 256ull << 20;
  uint64_t module_bytes = 0;       // charged per loaded module
  uint64_t pool_chunk = 32ull << 20;
  uint64_t pool_setup_bytes = 0;   // charged at a process's first stream-ordered allocation on a device
  uint64_t lazy_module_bytes = 0;  // charged at the first launch of each function (lazy loading)
  uint64_t teardown_ns = 0;        // a dead process's memory stays this long after it is found dead
  uint64_t context_create_ns = 0;  // a context's creation returns this long after its memory is charged
  uint64_t graph_instantiate_ns = 0;  // a graph's instantiation takes this long (its memory is charged at launch)
  uint64_t kernel_ns = 5000;
  int driver_version = 13000;
  bool fail_init = false;
  bool fail_nvml = false;  // nvmlInit fails as where NVML's library is not there to load
  std::string state_path;  // empty: private in-process state
  std::string error;       // non-empty: a variable was malformed (message names it)
};

// Parses "123", "4k", "4KiB", "2Mi", "16GiB", "1g" (powers of 1024). nullopt when malformed or
// when the value overflows 64 bits.
VGPU_SIM_API std::optional<uint64_t> ParseSize(std::string_view text);

// Reads VGPU_SIM_* from the environment. A malformed or out-of-range value is described in
// Config::error (naming the variable and the value); cuInit/nvmlInit then print it and fail, so a
// typo in a test never silently runs against defaults.
VGPU_SIM_API Config ReadConfig();

}  // namespace vgpusim
