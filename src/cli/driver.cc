#include "cli/driver.h"

#include <dlfcn.h>
#include <link.h>

#include <string_view>

#include "cli/library_path.h"

namespace vgpu::cli {
namespace {

// The NVML subset used here, declared from NVIDIA's documented (stable) ABI: there is no
// nvml.h on the build machines.
using nvmlReturn_t = int;
constexpr nvmlReturn_t kNvmlSuccess = 0;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr unsigned kNvmlNameBufferSize = 96;    // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kNvmlUuidBufferSize = 96;    // NVML_DEVICE_UUID_V2_BUFFER_SIZE
constexpr unsigned kNvmlDriverBufferSize = 80;  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE

struct NvmlApi {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  const char* (*error_string)(nvmlReturn_t);
  nvmlReturn_t (*system_driver_version)(char*, unsigned);
  nvmlReturn_t (*device_count)(unsigned*);
  nvmlReturn_t (*device_by_index)(unsigned, nvmlDevice_t*);
  nvmlReturn_t (*device_name)(nvmlDevice_t, char*, unsigned);
  nvmlReturn_t (*device_uuid)(nvmlDevice_t, char*, unsigned);
  nvmlReturn_t (*device_memory)(nvmlDevice_t, nvmlMemory_t*);
};

template <typename F>
void Bind(void* handle, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(handle, name));
}

// Absolute path of the object behind a dlopen handle.
std::string LoadedPath(void* handle) {
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
      map->l_name[0] != '\0') {
    return AbsolutePath(map->l_name);
  }
  return "";
}

std::string NvmlError(const NvmlApi& api, const char* call, nvmlReturn_t rc) {
  std::string text = std::string(call) + " failed (" + std::to_string(rc);
  if (api.error_string != nullptr) {
    if (const char* what = api.error_string(rc)) text += ": " + std::string(what);
  }
  return text + ")";
}

NvmlDeviceInfo ProbeNvmlDevice(const NvmlApi& api, unsigned index) {
  NvmlDeviceInfo device;
  device.index = index;
  nvmlDevice_t handle = nullptr;
  nvmlReturn_t rc = api.device_by_index(index, &handle);
  if (rc != kNvmlSuccess) {
    device.error = NvmlError(api, "nvmlDeviceGetHandleByIndex_v2", rc);
    return device;
  }
  auto note = [&](const char* call, nvmlReturn_t code) {
    if (code != kNvmlSuccess && device.error.empty()) device.error = NvmlError(api, call, code);
  };
  if (api.device_name != nullptr) {
    char name[kNvmlNameBufferSize] = {};
    rc = api.device_name(handle, name, sizeof(name));
    if (rc == kNvmlSuccess) device.name = name;
    note("nvmlDeviceGetName", rc);
  }
  if (api.device_uuid != nullptr) {
    char uuid[kNvmlUuidBufferSize] = {};
    rc = api.device_uuid(handle, uuid, sizeof(uuid));
    if (rc == kNvmlSuccess) device.uuid = uuid;
    note("nvmlDeviceGetUUID", rc);
  }
  if (api.device_memory != nullptr) {
    nvmlMemory_t memory{};
    rc = api.device_memory(handle, &memory);
    if (rc == kNvmlSuccess) {
      device.memory_total = memory.total;
      device.memory_free = memory.free;
      device.memory_used = memory.used;
    }
    note("nvmlDeviceGetMemoryInfo", rc);
  }
  return device;
}

// dlerror() text without the library name that it starts with (the caller names it already).
std::string WithoutPrefix(const char* dl_error, std::string_view prefix) {
  std::string_view text = dl_error != nullptr ? dl_error : "not found";
  if (text.starts_with(prefix)) text.remove_prefix(prefix.size());
  return std::string(text);
}

}  // namespace

DriverInfo ProbeDriver() {
  DriverInfo info;
  dlerror();
  void* handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (handle == nullptr) {
    info.error = WithoutPrefix(dlerror(), "libcuda.so.1: ");
    return info;
  }
  info.found = true;
  info.path = LoadedPath(handle);
  if (info.path.empty()) info.path = "libcuda.so.1";
  info.simulated = dlsym(handle, "vgpu_sim_marker") != nullptr;
  using GetVersion = int (*)(int*);  // CUresult cuDriverGetVersion(int*); CUDA_SUCCESS = 0
  if (auto get_version = reinterpret_cast<GetVersion>(dlsym(handle, "cuDriverGetVersion"))) {
    int version = 0;
    if (get_version(&version) == 0) info.version = version;
  }
  return info;
}

std::string FormatCudaVersion(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

NvmlInfo ProbeNvml() {
  NvmlInfo info;
  dlerror();
  void* handle = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (handle == nullptr) {
    info.error = "libnvidia-ml.so.1: " + WithoutPrefix(dlerror(), "libnvidia-ml.so.1: ");
    return info;
  }
  info.path = LoadedPath(handle);
  NvmlApi api{};
  Bind(handle, "nvmlInit_v2", &api.init);
  Bind(handle, "nvmlShutdown", &api.shutdown);
  Bind(handle, "nvmlErrorString", &api.error_string);
  Bind(handle, "nvmlSystemGetDriverVersion", &api.system_driver_version);
  Bind(handle, "nvmlDeviceGetCount_v2", &api.device_count);
  Bind(handle, "nvmlDeviceGetHandleByIndex_v2", &api.device_by_index);
  Bind(handle, "nvmlDeviceGetName", &api.device_name);
  Bind(handle, "nvmlDeviceGetUUID", &api.device_uuid);
  Bind(handle, "nvmlDeviceGetMemoryInfo", &api.device_memory);
  if (api.init == nullptr || api.device_count == nullptr || api.device_by_index == nullptr) {
    info.error = "libnvidia-ml.so.1 lacks nvmlInit_v2 / nvmlDeviceGetCount_v2 / "
                 "nvmlDeviceGetHandleByIndex_v2";
    return info;
  }
  nvmlReturn_t rc = api.init();
  if (rc != kNvmlSuccess) {
    info.error = NvmlError(api, "nvmlInit_v2", rc);
    return info;
  }
  info.loaded = true;
  if (api.system_driver_version != nullptr) {
    char version[kNvmlDriverBufferSize] = {};
    if (api.system_driver_version(version, sizeof(version)) == kNvmlSuccess) info.driver_version = version;
  }
  unsigned count = 0;
  rc = api.device_count(&count);
  if (rc != kNvmlSuccess) {
    info.error = NvmlError(api, "nvmlDeviceGetCount_v2", rc);
  } else {
    for (unsigned i = 0; i < count; ++i) info.devices.push_back(ProbeNvmlDevice(api, i));
  }
  if (api.shutdown != nullptr) api.shutdown();
  return info;
}

}  // namespace vgpu::cli
