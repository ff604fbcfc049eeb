#include "interpose/memory_spill.h"

#include <pthread.h>

#include <atomic>
#include <cinttypes>
#include <map>
#include <mutex>
#include <new>
#include <string>

#include "common/config.h"
#include "common/log.h"
#include "interpose/driver_imports.h"
#include "interpose/handlers.h"
#include "interpose/loader.h"
#include "interpose/memory_accounting.h"

namespace vgpu::memory {
namespace {

// Per CUDA ordinal: whether its GPU can work on host-resident managed memory in place.
enum Support : int { kUnknown = 0, kSupported = 1, kUnsupported = 2 };
std::atomic<int> g_support[kMaxDevices];

// The live spilled allocations of this process, by address: base -> size. Spills and their
// frees are rare (each already costs a driver call), and the prefetch/advice hooks are off the
// hot path: one mutex. Never destroyed (frees may arrive during exit); rebuilt empty in a fork
// child, which owns none of its parent's allocations.
struct Ranges {
  std::mutex mu;
  std::map<CUdeviceptr, uint64_t> spans;  // guarded by mu
};
alignas(Ranges) unsigned char g_ranges_storage[sizeof(Ranges)];
Ranges* g_ranges = nullptr;
std::once_flag g_ranges_once;

Ranges& SpilledRanges() {
  std::call_once(g_ranges_once, [] {
    g_ranges = new (g_ranges_storage) Ranges();
    pthread_atfork(nullptr, nullptr, [] { g_ranges = new (g_ranges_storage) Ranges(); });
  });
  return *g_ranges;
}

bool CurrentOrdinal(CUdevice* ordinal) {
  return g_cuda.cuCtxGetDevice != nullptr && g_cuda.cuCtxGetDevice(ordinal) == CUDA_SUCCESS && *ordinal >= 0 &&
         *ordinal < kMaxDevices;
}

Support Probe(CUdevice ordinal) {
  if (g_cuda.cuMemAdvise_v2 == nullptr) {
    VGPU_LOG_UNLIMITED(LogLevel::kWarn,
                       "memory oversubscription is off on CUDA device %d: the driver has no cuMemAdvise_v2 "
                       "(CUDA 12.2 or newer is needed to keep spilled memory on the host); allocations beyond "
                       "the memory limit are refused",
                       ordinal);
    return kUnsupported;
  }
  int concurrent = 0;
  if (g_cuda.cuDeviceGetAttribute == nullptr ||
      g_cuda.cuDeviceGetAttribute(&concurrent, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, ordinal) != CUDA_SUCCESS ||
      concurrent == 0) {
    VGPU_LOG_UNLIMITED(LogLevel::kWarn,
                       "memory oversubscription is off on CUDA device %d: it cannot access managed memory "
                       "concurrently with the host, so spilled memory would migrate onto it; allocations beyond "
                       "the memory limit are refused",
                       ordinal);
    return kUnsupported;
  }
  return kSupported;
}

// The host keeps the pages; the device maps them where they are instead of migrating them.
CUresult PlaceOnHost(CUdeviceptr ptr, uint64_t bytes, CUdevice ordinal) {
  CUmemLocation host{};
  host.type = CU_MEM_LOCATION_TYPE_HOST;
  CUresult rc = g_cuda.cuMemAdvise_v2(ptr, bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host);
  if (rc != CUDA_SUCCESS) return rc;
  CUmemLocation device{};
  device.type = CU_MEM_LOCATION_TYPE_DEVICE;
  device.id = ordinal;
  return g_cuda.cuMemAdvise_v2(ptr, bytes, CU_MEM_ADVISE_SET_ACCESSED_BY, device);
}

void LogHostLimitReached(int device, CUdevice ordinal, uint64_t bytes) {
  const uint64_t limit = Limit(device);
  VGPU_ERROR("out of memory on CUDA device %d: %s did not fit the device (memory limit %s, %s in use by the "
             "container) and spilling it to host memory would pass the host spill limit (%s, %s already "
             "spilled); refused with CUDA_ERROR_OUT_OF_MEMORY (CUDA_OVERSUBSCRIBE_HOST_LIMIT sets the host "
             "spill limit)",
             ordinal, FormatSize(bytes).c_str(), limit == 0 ? "none" : FormatSize(limit).c_str(),
             FormatSize(Used(device)).c_str(), FormatSize(HostLimit(device)).c_str(),
             FormatSize(Spilled(device)).c_str());
}

}  // namespace

bool SpillAllowed(int device) {
  if (device < 0 || HostLimit(device) == 0) return false;
  CUdevice ordinal;
  if (!CurrentOrdinal(&ordinal)) return false;
  int support = g_support[ordinal].load(std::memory_order_acquire);
  if (support == kUnknown) {
    support = Probe(ordinal);
    g_support[ordinal].store(support, std::memory_order_release);
  }
  return support == kSupported;
}

CUresult SpillAllocate(int device, uint64_t bytes, CUdeviceptr* dptr) {
  CUdevice ordinal;
  if (!CurrentOrdinal(&ordinal)) return CUDA_ERROR_INVALID_CONTEXT;
  auto allocate = RealCudaAs<Pfn_cuMemAllocManaged>(kHook_cuMemAllocManaged);
  auto free = RealCudaAs<Pfn_cuMemFree_v2>(kHook_cuMemFree_v2);
  if (allocate == nullptr || free == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!ReserveHost(device, bytes)) {
    LogHostLimitReached(device, ordinal, bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUresult rc = allocate(dptr, bytes, CU_MEM_ATTACH_HOST);
  if (rc != CUDA_SUCCESS) {
    ReleaseHost(device, bytes);
    return rc;
  }
  if (const CUresult placed = PlaceOnHost(*dptr, bytes, ordinal); placed != CUDA_SUCCESS) {
    free(*dptr);
    ReleaseHost(device, bytes);
    VGPU_ERROR("out of memory on CUDA device %d: %s could not be spilled to host memory (cuMemAdvise returned "
               "%d); refused with CUDA_ERROR_OUT_OF_MEMORY",
               ordinal, FormatSize(bytes).c_str(), static_cast<int>(placed));
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  {
    Ranges& ranges = SpilledRanges();
    std::lock_guard<std::mutex> lock(ranges.mu);
    ranges.spans[*dptr] = bytes;
  }
  VGPU_DEBUG("spilled %" PRIu64 " bytes of CUDA device %d to host memory (%" PRIu64 " of %" PRIu64
             " bytes spilled by the container)",
             bytes, ordinal, Spilled(device), HostLimit(device));
  return CUDA_SUCCESS;
}

void ReleaseSpill(int device, CUdeviceptr ptr, uint64_t bytes) {
  {
    Ranges& ranges = SpilledRanges();
    std::lock_guard<std::mutex> lock(ranges.mu);
    ranges.spans.erase(ptr);
  }
  ReleaseHost(device, bytes);
}

bool TouchesSpilled(CUdeviceptr ptr, uint64_t count) {
  if (count == 0) return false;
  Ranges& ranges = SpilledRanges();
  std::lock_guard<std::mutex> lock(ranges.mu);
  if (ranges.spans.empty()) return false;
  const CUdeviceptr last = ptr + (count - 1) < ptr ? ~CUdeviceptr{0} : ptr + (count - 1);
  auto it = ranges.spans.upper_bound(last);  // first span starting after the range
  if (it == ranges.spans.begin()) return false;
  --it;  // the last span starting at or before its end: the only candidate left of it
  return it->first + it->second > ptr;
}

}  // namespace vgpu::memory
