// The node's GPUs as the device plugin needs them. The daemon (vgpu-node) fills these from NVML
// and pushes a new list whenever health changes (K8sPlugin::SetGpus); tests fill them by hand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vgpu::k8s {

struct GpuInfo {
  std::string uuid;           // "GPU-…" as NVML reports it
  int index = 0;              // NVML index (PCI bus order)
  uint64_t memory_bytes = 0;  // total device memory
  std::string name;           // product name, e.g. "NVIDIA H200"
  int numa_node = -1;         // -1 = unknown
  bool healthy = true;
  bool operator==(const GpuInfo&) const = default;
};

// The GPU with this uuid, or nullptr.
inline const GpuInfo* FindGpu(const std::vector<GpuInfo>& gpus, const std::string& uuid) {
  for (const GpuInfo& gpu : gpus) {
    if (gpu.uuid == uuid) return &gpu;
  }
  return nullptr;
}

}  // namespace vgpu::k8s
