// TEST DOUBLE ONLY: initialisation, device queries and error strings of the simulated driver.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "sim_cuda_internal.h"

namespace vgpusim::cuda {
namespace {

// CUDA_VISIBLE_DEVICES as the driver reads it: indices or (prefixes of) GPU-UUIDs; the list
// ends at the first entry that names no device or repeats one.
std::vector<int> VisibleDevices(int count) {
  std::vector<int> visible;
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (env == nullptr) {
    for (int i = 0; i < count; ++i) visible.push_back(i);
    return visible;
  }
  std::string list(env);
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    std::string item = list.substr(pos, comma - pos);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    int physical = -1;
    if (item.rfind("GPU-", 0) == 0 && item.size() > 4) {
      for (int i = 0; i < count && physical < 0; ++i) {
        if (DeviceUuidString(i).rfind(item, 0) == 0) physical = i;
      }
    } else if (!item.empty() && item.find_first_not_of("0123456789") == std::string::npos) {
      const long index = std::strtol(item.c_str(), nullptr, 10);
      if (index < count) physical = static_cast<int>(index);
    }
    if (physical < 0 || std::find(visible.begin(), visible.end(), physical) != visible.end()) break;
    visible.push_back(physical);
    pos = comma + 1;
  }
  return visible;
}

CUresult DeviceArg(CUdevice dev, int* physical) {
  *physical = Physical(dev);
  return *physical < 0 ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

int AttributeValue(CUdevice_attribute attrib, int physical) {
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return static_cast<int>(DevicePciBus(physical));
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return 0;
    default: return 0;
  }
}

}  // namespace

CUresult Init(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  const Core& core = GetCore();  // outside Runtime::mu: it may print and open files
  Api api;
  if (Rt().initialized) return CUDA_SUCCESS;
  if (core.config.fail_init) return CUDA_ERROR_NO_DEVICE;
  if (!core.config.error.empty()) return CUDA_ERROR_INVALID_VALUE;
  if (core.state == nullptr) return CUDA_ERROR_OPERATING_SYSTEM;
  Rt().core = &core;
  const int count = core.state->device_count();
  Rt().visible = VisibleDevices(count);
  if (Rt().visible.empty()) return CUDA_ERROR_NO_DEVICE;
  Rt().primary.assign(count, nullptr);
  Rt().current_pool.assign(count, nullptr);
  Rt().default_pool.assign(count, nullptr);
  Rt().pool_setup.assign(count, false);
  Rt().small_bytes.assign(count, 0);
  Rt().graph_mem_used.assign(count, 0);
  Rt().graph_mem_high.assign(count, 0);
  Rt().initialized = true;
  return CUDA_SUCCESS;
}

CUresult DriverVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = GetCore().config.driver_version;
  return CUDA_SUCCESS;
}

CUresult TotalMem(uint64_t* bytes, CUdevice dev) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int physical = 0;
  if (const CUresult rc = DeviceArg(dev, &physical); rc != CUDA_SUCCESS) return rc;
  *bytes = State().total_bytes(physical);
  return CUDA_SUCCESS;
}

CUresult Uuid(CUuuid* uuid, CUdevice dev) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int physical = 0;
  if (const CUresult rc = DeviceArg(dev, &physical); rc != CUDA_SUCCESS) return rc;
  unsigned char bytes[16];
  DeviceUuidBytes(physical, bytes);
  std::memcpy(uuid->bytes, bytes, sizeof bytes);
  return CUDA_SUCCESS;
}

}  // namespace vgpusim::cuda

using namespace vgpusim::cuda;

SIM_EXPORT CUresult cuInit(unsigned int flags) { return Guarded([&] { return Init(flags); }); }

SIM_EXPORT CUresult cuDriverGetVersion(int* version) { return DriverVersion(version); }

SIM_EXPORT CUresult cuDeviceGetCount(int* count) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(Rt().visible.size());
  return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Physical(ordinal) < 0) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (Physical(dev) < 0) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<size_t>(len), "%s", vgpusim::kDeviceName);
  return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return Uuid(uuid, dev); }
SIM_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) { return Uuid(uuid, dev); }

SIM_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  uint64_t total = 0;
  const CUresult rc = TotalMem(bytes == nullptr ? nullptr : &total, dev);
  if (rc == CUDA_SUCCESS) *bytes = total;
  return rc;
}

SIM_EXPORT CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  uint64_t total = 0;
  const CUresult rc = TotalMem(bytes == nullptr ? nullptr : &total, dev);
  if (rc == CUDA_SUCCESS) *bytes = static_cast<unsigned int>(std::min<uint64_t>(total, 0xffffffffu));
  return rc;
}

SIM_EXPORT CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  if (pi == nullptr || attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  int physical = 0;
  if (const CUresult rc = DeviceArg(dev, &physical); rc != CUDA_SUCCESS) return rc;
  *pi = AttributeValue(attrib, physical);
  return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  if (pciBusId == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  const int physical = Physical(dev);
  if (physical < 0) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(pciBusId, static_cast<size_t>(len), "0000:%02X:00.0", vgpusim::DevicePciBus(physical));
  return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice* dev, const char* pciBusId) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  if (dev == nullptr || pciBusId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  if (std::sscanf(pciBusId, "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4) {
    domain = 0;
    if (std::sscanf(pciBusId, "%x:%x.%x", &bus, &device, &function) != 3) return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t ordinal = 0; ordinal < Rt().visible.size(); ++ordinal) {
    if (domain == 0 && device == 0 && vgpusim::DevicePciBus(Rt().visible[ordinal]) == bus) {
      *dev = static_cast<CUdevice>(ordinal);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

namespace {

struct ErrorRow {
  CUresult code;
  const char* name;
  const char* description;
};

constexpr ErrorRow kErrors[] = {
#define SIM_CUDA_ERROR(name, description) {name, #name, description},
#include "sim_cuda_errors.inc"
#undef SIM_CUDA_ERROR
};

const ErrorRow* FindError(CUresult code) {
  for (const auto& row : kErrors) {
    if (row.code == code) return &row;
  }
  return nullptr;
}

}  // namespace

SIM_EXPORT CUresult cuGetErrorString(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorRow* row = FindError(error);
  *pStr = row == nullptr ? nullptr : row->description;
  return row == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGetErrorName(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorRow* row = FindError(error);
  *pStr = row == nullptr ? nullptr : row->name;
  return row == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

// The runtime's private interfaces are not simulated: programs must use the driver API.
SIM_EXPORT CUresult cuGetExportTable(const void** ppExportTable, const CUuuid* pExportTableId) {
  if (ppExportTable == nullptr || pExportTableId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ppExportTable = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}

SIM_EXPORT int vgpu_sim_marker(void) { return 1; }
