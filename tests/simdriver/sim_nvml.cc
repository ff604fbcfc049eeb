// TEST DOUBLE ONLY: the simulated libnvidia-ml. Reports the simulated devices from the shared
// state: memory used by all live processes, per-process usage (context overhead, allocations,
// pool reservations, VMM handles, arrays, graph memory) and utilization from the busy timeline.
// Like the real NVML it ignores CUDA_VISIBLE_DEVICES: indices are physical.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "sim_core.h"
#include "sim_nvml_types.h"

#define SIM_EXPORT extern "C" __attribute__((visibility("default")))

struct nvmlDevice_st {
  int index;
};

namespace vgpusim::nvml {
namespace {

constexpr char kDriverVersionString[] = "580.65.06";
constexpr uint64_t kUtilizationWindowNs = 1000000000ull;

nvmlDevice_st g_devices[kMaxDevices] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
std::mutex g_mu;
int g_init_count = 0;  // guarded by g_mu

nvmlReturn_t Init() {
  const Core& core = GetCore();
  if (!core.config.error.empty()) return NVML_ERROR_UNKNOWN;
  if (core.state == nullptr || core.config.fail_nvml) return NVML_ERROR_DRIVER_NOT_LOADED;
  std::lock_guard<std::mutex> lock(g_mu);
  ++g_init_count;
  return NVML_SUCCESS;
}

bool Initialized() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_init_count > 0;
}

SharedState& State() { return *GetCore().state; }

// Validates a handle; NVML_SUCCESS with *index set, or the error to return.
nvmlReturn_t DeviceIndex(nvmlDevice_t device, int* index) {
  if (!Initialized()) return NVML_ERROR_UNINITIALIZED;
  if (device < g_devices || device >= g_devices + kMaxDevices) return NVML_ERROR_INVALID_ARGUMENT;
  if (device->index >= State().device_count()) return NVML_ERROR_INVALID_ARGUMENT;
  *index = device->index;
  return NVML_SUCCESS;
}

nvmlReturn_t CopyString(const std::string& value, char* out, unsigned length) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (length < value.size() + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, value.c_str(), value.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t Count(unsigned* count) {
  if (!Initialized()) return NVML_ERROR_UNINITIALIZED;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = static_cast<unsigned>(State().device_count());
  return NVML_SUCCESS;
}

nvmlReturn_t HandleByIndex(unsigned index, nvmlDevice_t* device) {
  if (!Initialized()) return NVML_ERROR_UNINITIALIZED;
  if (device == nullptr || index >= static_cast<unsigned>(State().device_count())) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &g_devices[index];
  return NVML_SUCCESS;
}

nvmlReturn_t HandleByPciBusId(const char* bus_id, nvmlDevice_t* device) {
  if (!Initialized()) return NVML_ERROR_UNINITIALIZED;
  if (bus_id == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned domain = 0, bus = 0, dev = 0, function = 0;
  if (std::sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &function) != 4) {
    if (std::sscanf(bus_id, "%x:%x.%x", &bus, &dev, &function) != 3) return NVML_ERROR_INVALID_ARGUMENT;
  }
  for (int i = 0; i < State().device_count(); ++i) {
    if (domain == 0 && dev == 0 && function == 0 && DevicePciBus(i) == bus) {
      *device = &g_devices[i];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t MemoryInfo(nvmlDevice_t device, uint64_t* total, uint64_t* used) {
  int index = 0;
  if (const nvmlReturn_t rc = DeviceIndex(device, &index); rc != NVML_SUCCESS) return rc;
  *total = State().total_bytes(index);
  *used = std::min(State().UsedBytes(index), *total);
  return NVML_SUCCESS;
}

// Fills v1/v2/v3 process lists (they differ only in the instance-id fields).
template <class Info>
nvmlReturn_t RunningProcesses(nvmlDevice_t device, unsigned* count, Info* infos) {
  int index = 0;
  if (const nvmlReturn_t rc = DeviceIndex(device, &index); rc != NVML_SUCCESS) return rc;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const auto processes = State().Processes(index);
  if (*count < processes.size()) {
    *count = static_cast<unsigned>(processes.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  if (infos == nullptr && !processes.empty()) return NVML_ERROR_INVALID_ARGUMENT;
  for (size_t i = 0; i < processes.size(); ++i) {
    Info info{};
    info.pid = static_cast<unsigned>(processes[i].pid);
    info.usedGpuMemory = processes[i].used_bytes;
    if constexpr (sizeof(Info) > sizeof(nvmlProcessInfo_v1_t)) {
      info.gpuInstanceId = NVML_VALUE_NOT_AVAILABLE_UINT;
      info.computeInstanceId = NVML_VALUE_NOT_AVAILABLE_UINT;
    }
    infos[i] = info;
  }
  *count = static_cast<unsigned>(processes.size());
  return NVML_SUCCESS;
}

nvmlReturn_t CudaDriverVersion(int* version) {
  if (!Initialized()) return NVML_ERROR_UNINITIALIZED;
  if (version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *version = GetCore().config.driver_version;
  return NVML_SUCCESS;
}

}  // namespace
}  // namespace vgpusim::nvml

using namespace vgpusim::nvml;

SIM_EXPORT nvmlReturn_t nvmlInit(void) { return Init(); }
SIM_EXPORT nvmlReturn_t nvmlInit_v2(void) { return Init(); }
SIM_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int) { return Init(); }

SIM_EXPORT nvmlReturn_t nvmlShutdown(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  --g_init_count;
  return NVML_SUCCESS;
}

SIM_EXPORT const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_OPERATING_SYSTEM: return "Operating System Error";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error";
  }
}

SIM_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  if (!Initialized()) return NVML_ERROR_UNINITIALIZED;
  return CopyString(kDriverVersionString, version, length);
}

SIM_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* v) { return CudaDriverVersion(v); }
SIM_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* v) { return CudaDriverVersion(v); }
SIM_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) { return Count(count); }
SIM_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) { return Count(count); }
SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t* d) { return HandleByIndex(i, d); }
SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t* d) { return HandleByIndex(i, d); }
SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* id, nvmlDevice_t* d) { return HandleByPciBusId(id, d); }
SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* id, nvmlDevice_t* d) {
  return HandleByPciBusId(id, d);
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  if (!Initialized()) return NVML_ERROR_UNINITIALIZED;
  if (uuid == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < State().device_count(); ++i) {
    if (vgpusim::DeviceUuidString(i) == uuid) {
      *device = &g_devices[i];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  int i = 0;
  if (const nvmlReturn_t rc = DeviceIndex(device, &i); rc != NVML_SUCCESS) return rc;
  if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *index = static_cast<unsigned>(i);
  return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  int i = 0;
  if (const nvmlReturn_t rc = DeviceIndex(device, &i); rc != NVML_SUCCESS) return rc;
  return CopyString(vgpusim::DeviceUuidString(i), uuid, length);
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  int i = 0;
  if (const nvmlReturn_t rc = DeviceIndex(device, &i); rc != NVML_SUCCESS) return rc;
  return CopyString(vgpusim::kDeviceName, name, length);
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  int i = 0;
  if (const nvmlReturn_t rc = DeviceIndex(device, &i); rc != NVML_SUCCESS) return rc;
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *pci = nvmlPciInfo_t{};
  pci->domain = 0;
  pci->bus = vgpusim::DevicePciBus(i);
  pci->device = 0;
  pci->pciDeviceId = 0x233510DE;  // H200 device id, NVIDIA vendor id
  pci->pciSubSystemId = 0x18B010DE;
  std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", pci->bus);
  std::snprintf(pci->busId, sizeof pci->busId, "%s", vgpusim::DevicePciBusId(i).c_str());
  return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  if (memory == nullptr) return Initialized() ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
  uint64_t total = 0, used = 0;
  if (const nvmlReturn_t rc = MemoryInfo(device, &total, &used); rc != NVML_SUCCESS) return rc;
  memory->total = total;
  memory->used = used;
  memory->free = total - used;
  return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  if (memory == nullptr) return Initialized() ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
  if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  uint64_t total = 0, used = 0;
  if (const nvmlReturn_t rc = MemoryInfo(device, &total, &used); rc != NVML_SUCCESS) return rc;
  memory->total = total;
  memory->reserved = 0;
  memory->used = used;
  memory->free = total - used;
  return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int* n, nvmlProcessInfo_v1_t* p) {
  return RunningProcesses(d, n, p);
}
SIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int* n,
                                                                nvmlProcessInfo_v2_t* p) {
  return RunningProcesses(d, n, p);
}
SIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int* n,
                                                                nvmlProcessInfo_t* p) {
  return RunningProcesses(d, n, p);
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  int i = 0;
  if (const nvmlReturn_t rc = DeviceIndex(device, &i); rc != NVML_SUCCESS) return rc;
  if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const double busy = State().BusyFraction(i, vgpusim::NowNs(), kUtilizationWindowNs);
  utilization->gpu = static_cast<unsigned>(busy * 100.0 + 0.5);
  utilization->memory = 0;
  return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t*,
                                                        unsigned int*, unsigned long long) {
  int i = 0;
  if (const nvmlReturn_t rc = DeviceIndex(device, &i); rc != NVML_SUCCESS) return rc;
  return NVML_ERROR_NOT_SUPPORTED;
}

SIM_EXPORT int vgpu_sim_marker(void) { return 1; }

// Test-only: the most physical device `index` ever had in use at once (0 for an unknown index).
SIM_EXPORT unsigned long long vgpu_sim_memory_high_water(unsigned index) {
  if (static_cast<int>(index) >= State().device_count()) return 0;
  return State().HighWaterBytes(static_cast<int>(index));
}
