// TEST DOUBLE ONLY: virtual memory management (cuMemCreate/cuMemMap ...) in the simulated driver.
//
// A physical handle charges its size to the device when created and is freed when its last
// reference goes (cuMemRelease, cuMemUnmap of each mapping, retains). Exporting as a POSIX fd
// registers the allocation in the shared state and hands out a memfd whose contents name it;
// the importer (any process on the same VGPU_SIM_STATE) looks it up there. The exporter carries
// the charge until the last handle in any process is released (or the exporter dies).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "sim_cuda_internal.h"

namespace vgpusim::cuda {
namespace {

constexpr uint64_t kShareMagic = 0x4552414853534756ull;  // "VGSSHARE"

struct ShareFile {
  uint64_t magic;
  uint64_t share_id;
};

CUresult PropDevice(const CUmemAllocationProp* prop, int* physical) {
  if (prop == nullptr || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  *physical = Physical(prop->location.id);
  return *physical < 0 ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

VmmHandle* FindHandle(CUmemGenericAllocationHandle handle) {
  auto it = Rt().vmm_handles.find(handle);
  return it == Rt().vmm_handles.end() ? nullptr : &it->second;
}

CUmemGenericAllocationHandle AddHandle(const VmmHandle& handle) {
  const CUmemGenericAllocationHandle id = Rt().next_vmm_handle++;
  Rt().vmm_handles[id] = handle;
  return id;
}

// The mapping containing addr, or end().
std::map<CUdeviceptr, Mapping>::iterator MappingAt(CUdeviceptr addr) {
  auto& mappings = Rt().mappings;
  auto it = mappings.upper_bound(addr);
  if (it == mappings.begin()) return mappings.end();
  --it;
  return addr < it->first + it->second.size ? it : mappings.end();
}

}  // namespace

void UnrefVmmHandle(CUmemGenericAllocationHandle id) {
  VmmHandle* handle = FindHandle(id);
  if (handle == nullptr || --handle->refs > 0) return;
  if (handle->share_id != 0) {
    State().DropShareRef(handle->share_id);
  } else {
    State().Uncharge(handle->device, handle->size);
  }
  Rt().vmm_handles.erase(id);
}

}  // namespace vgpusim::cuda

using namespace vgpusim::cuda;

SIM_EXPORT CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                                  CUmemAllocationGranularity_flags option) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    int physical = 0;
    if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (const CUresult rc = PropDevice(prop, &physical); rc != CUDA_SUCCESS) return rc;
    *granularity = Cfg().granularity;
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                                unsigned long long flags) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    int physical = 0;
    if (handle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (const CUresult rc = PropDevice(prop, &physical); rc != CUDA_SUCCESS) return rc;
    if (size == 0 || size % Cfg().granularity != 0) return CUDA_ERROR_INVALID_VALUE;
    if (!State().TryCharge(physical, size)) return CUDA_ERROR_OUT_OF_MEMORY;
    VmmHandle created;
    created.device = physical;
    created.size = size;
    created.prop = *prop;
    *handle = AddHandle(created);
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    if (FindHandle(handle) == nullptr) return CUDA_ERROR_INVALID_VALUE;
    UnrefVmmHandle(handle);
    return CUDA_SUCCESS;
  });
}

// The address hint is ignored, as the driver may do.
SIM_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr /*addr*/,
                                        unsigned long long flags) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    if (ptr == nullptr || flags != 0 || size == 0 || size % Cfg().granularity != 0) return CUDA_ERROR_INVALID_VALUE;
    if (alignment != 0 && (alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
    const CUdeviceptr base = ReserveAddress(0, size, std::max<uint64_t>(alignment, Cfg().granularity), false, true);
    if (base == 0) return CUDA_ERROR_OUT_OF_MEMORY;
    Rt().reservations[base] = size;
    *ptr = base;
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    auto it = Rt().reservations.find(ptr);
    if (it == Rt().reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
    auto first = Rt().mappings.lower_bound(ptr);
    if (first != Rt().mappings.end() && first->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;  // still mapped
    Rt().reservations.erase(it);
    ReleaseAddress(ptr);
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                             unsigned long long flags) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    VmmHandle* physical = FindHandle(handle);
    if (physical == nullptr || flags != 0 || size == 0 || size % Cfg().granularity != 0) return CUDA_ERROR_INVALID_VALUE;
    if (offset % Cfg().granularity != 0 || offset + size > physical->size) return CUDA_ERROR_INVALID_VALUE;
    auto reservation = Rt().reservations.upper_bound(ptr);
    if (reservation == Rt().reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
    --reservation;
    if (ptr + size > reservation->first + reservation->second) return CUDA_ERROR_INVALID_VALUE;
    auto next = Rt().mappings.lower_bound(ptr);
    if (MappingAt(ptr) != Rt().mappings.end() || (next != Rt().mappings.end() && next->first < ptr + size)) {
      return CUDA_ERROR_INVALID_VALUE;  // overlaps a mapping
    }
    Rt().mappings[ptr] = Mapping{size, handle};
    ++physical->refs;
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    if (size == 0) return CUDA_ERROR_INVALID_VALUE;
    auto& mappings = Rt().mappings;
    auto it = mappings.lower_bound(ptr);
    if (it == mappings.end() || it->first != ptr) return CUDA_ERROR_INVALID_VALUE;
    while (it != mappings.end() && it->first + it->second.size <= ptr + size) {
      const CUmemGenericAllocationHandle handle = it->second.handle;
      it = mappings.erase(it);
      UnrefVmmHandle(handle);
    }
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    if (desc == nullptr || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; ++i) {
      if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || Physical(desc[i].location.id) < 0) {
        return CUDA_ERROR_INVALID_DEVICE;
      }
    }
    return MappingAt(ptr) == Rt().mappings.end() ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
    auto it = MappingAt(reinterpret_cast<CUdeviceptr>(addr));
    if (it == Rt().mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    ++FindHandle(it->second.handle)->refs;
    *handle = it->second.handle;
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                           CUmemGenericAllocationHandle handle) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    const VmmHandle* physical = FindHandle(handle);
    if (prop == nullptr || physical == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *prop = physical->prop;
    prop->location.id = Ordinal(physical->device);
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                                 CUmemAllocationHandleType type, unsigned long long flags) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    VmmHandle* physical = FindHandle(handle);
    if (shareable == nullptr || physical == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
    if ((physical->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (physical->share_id == 0) {
      physical->share_id = State().CreateShare(physical->device, physical->size);
      if (physical->share_id == 0) return CUDA_ERROR_OUT_OF_MEMORY;
    }
    const int fd = memfd_create("vgpu-sim-share", MFD_CLOEXEC);
    if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
    const ShareFile record{kShareMagic, physical->share_id};
    if (pwrite(fd, &record, sizeof record, 0) != static_cast<ssize_t>(sizeof record)) {
      close(fd);
      return CUDA_ERROR_OPERATING_SYSTEM;
    }
    *static_cast<int*>(shareable) = fd;
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle,
                                                   CUmemAllocationHandleType type) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
    const int fd = static_cast<int>(reinterpret_cast<intptr_t>(os_handle));
    ShareFile record{};
    if (pread(fd, &record, sizeof record, 0) != static_cast<ssize_t>(sizeof record) || record.magic != kShareMagic) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    VmmHandle imported;
    uint64_t size = 0;
    if (!State().AddShareRef(record.share_id, &imported.device, &size)) return CUDA_ERROR_INVALID_VALUE;
    imported.size = size;
    imported.share_id = record.share_id;
    imported.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    imported.prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    imported.prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    *handle = AddHandle(imported);
    return CUDA_SUCCESS;
  });
}
