// Probes for the NVIDIA driver (libcuda.so.1) and NVML (libnvidia-ml.so.1) with dlopen.
//
// This is an edge: it loads shared libraries into the vgpu process. The results are plain values
// so the commands that use them (run, info) format and decide without touching the system.
// Neither probe initialises CUDA (no cuInit); ProbeNvml calls nvmlInit_v2 / nvmlShutdown.
// Libraries stay loaded for the life of the process (never dlclose'd: a driver's destructors
// are not worth the risk in a short-lived CLI).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vgpu::cli {

struct DriverInfo {
  bool found = false;
  std::string path;            // absolute path the library was loaded from, when found
  bool simulated = false;      // exports vgpu_sim_marker: the project's test double
  std::string error;           // dlerror() text when not found
  std::optional<int> version;  // cuDriverGetVersion, e.g. 13000; nullopt when unavailable
};

// dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL), as the CUDA runtime would find it.
DriverInfo ProbeDriver();

// 13000 -> "13.0", 12040 -> "12.4".
std::string FormatCudaVersion(int version);

struct NvmlDeviceInfo {
  unsigned index = 0;   // NVML index (PCI order; not necessarily the CUDA ordinal)
  std::string name;
  std::string uuid;
  std::optional<uint64_t> memory_total, memory_free, memory_used;  // bytes
  std::string error;    // first NVML error met for this device, empty if none
};

struct NvmlInfo {
  bool loaded = false;          // libnvidia-ml.so.1 was found and nvmlInit_v2 succeeded
  std::string path;
  std::string error;            // why not loaded / why the device list is missing
  std::string driver_version;   // nvmlSystemGetDriverVersion, e.g. "580.65.06"
  std::vector<NvmlDeviceInfo> devices;
};

NvmlInfo ProbeNvml();

}  // namespace vgpu::cli
