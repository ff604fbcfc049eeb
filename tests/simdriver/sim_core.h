// Process-wide simulator core shared by the CUDA and NVML halves: configuration, shared state
// and the identity of each simulated device.
//
// TEST DOUBLE ONLY. Part of the simulated libcuda/libnvidia-ml used by CI; never deployed.
//
// Lives in libvgpu-sim-core.so so that libcuda.so.1 and libnvidia-ml.so.1 loaded into one
// process see one state even without VGPU_SIM_STATE.
#pragma once

#include <cstdint>
#include <string>

#include "sim_config.h"
#include "sim_state.h"

namespace vgpusim {

struct Core {
  Config config;
  SharedState* state = nullptr;  // null when initialisation failed
  std::string error;             // why it failed (already printed to stderr)
};

// Reads the environment and opens the shared state on the first call; later calls return the
// same object. Thread-safe; the object is never destroyed.
VGPU_SIM_API const Core& GetCore();

inline constexpr const char* kDeviceName = "Simulated GPU (vgpu test double)";

// "GPU-5151a000-0000-4000-8000-00000000000<N>" for physical index N.
VGPU_SIM_API std::string DeviceUuidString(int physical_index);
// The same UUID as 16 bytes.
VGPU_SIM_API void DeviceUuidBytes(int physical_index, unsigned char out[16]);
// PCI bus id "00000000:<bus>:00.0" with bus 0x18 + 0x10 * N (distinct per device).
VGPU_SIM_API std::string DevicePciBusId(int physical_index);
VGPU_SIM_API unsigned DevicePciBus(int physical_index);

}  // namespace vgpusim
