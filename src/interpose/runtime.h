// Process-wide state of the library: the effective configuration, read once.
//
// The environment is read exactly once, on the first hook that needs it (never in an ELF
// constructor and never on a hot path). The result is immutable afterwards.
#pragma once

#include "common/config.h"

namespace vgpu {

struct Runtime {
  Config config;
  bool config_ok = true;  // false: the configuration was invalid; CUDA/NVML init are refused
  bool passthrough() const { return config.disable_control; }
};

// Reads the configuration on first use; thread-safe; never fails (errors are recorded).
const Runtime& GetRuntime();

}  // namespace vgpu
