// TEST DOUBLE ONLY: device/host allocations and copies of the simulated driver. Device memory is
// accounting only (fake addresses, never backed); copies and memsets validate their arguments,
// order themselves like the driver, and move no data.
#include <algorithm>
#include <cstdlib>

#include "sim_cuda_internal.h"

namespace vgpusim::cuda {
namespace {

constexpr uint64_t kUint32Max = 0xffffffffu;

void WaitUnlocked(Api& api, uint64_t deadline_ns) {
  api.lock().unlock();
  SleepUntil(deadline_ns);
  api.lock().lock();
}

CUresult MemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes) {
  Api api;
  Context* ctx = nullptr;
  if (const CUresult rc = api.Current(&ctx); rc != CUDA_SUCCESS) return rc;
  const uint64_t total = State().total_bytes(ctx->device);
  const uint64_t used = State().UsedBytes(ctx->device);
  *free_bytes = total - std::min(used, total);
  *total_bytes = total;
  return CUDA_SUCCESS;
}

CUresult Alloc(CUdeviceptr* dptr, uint64_t bytes, bool low32) {
  Api api;
  Context* ctx = nullptr;
  if (const CUresult rc = api.Current(&ctx); rc != CUDA_SUCCESS) return rc;
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AllocDevice(ctx, bytes, low32, dptr);
}

CUresult AllocPitch(CUdeviceptr* dptr, uint64_t* pitch, uint64_t width, uint64_t height,
                    unsigned element_size, bool low32) {
  if (pitch == nullptr || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element_size != 4 && element_size != 8 && element_size != 16) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t row = RoundUp(width, 512);
  if (height > UINT64_MAX / row) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult rc = Alloc(dptr, row * height, low32);
  if (rc == CUDA_SUCCESS) *pitch = row;
  return rc;
}

CUresult Free(CUdeviceptr dptr) {
  Api api;
  Context* ctx = nullptr;
  if (const CUresult rc = api.Current(&ctx); rc != CUDA_SUCCESS) return rc;
  return FreeDevice(dptr);
}

CUresult HostAlloc(void** pp, uint64_t bytes) {
  Api api;
  Context* ctx = nullptr;
  if (const CUresult rc = api.Current(&ctx); rc != CUDA_SUCCESS) return rc;
  if (pp == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = std::aligned_alloc(4096, RoundUp(bytes, 4096));
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  Rt().host_allocations.insert(p);
  *pp = p;
  return CUDA_SUCCESS;
}

CUresult AddressRange(uint64_t* base, uint64_t* size, CUdeviceptr dptr) {
  Api api;
  Context* ctx = nullptr;
  if (const CUresult rc = api.Current(&ctx); rc != CUDA_SUCCESS) return rc;
  auto& allocations = Rt().allocations;
  auto it = allocations.upper_bound(dptr);
  if (it != allocations.begin()) {
    --it;
    if (dptr < it->first + std::max(it->second.requested, it->second.size)) {
      *base = it->first;
      *size = it->second.requested;
      return CUDA_SUCCESS;
    }
  }
  auto& mappings = Rt().mappings;
  auto mapping = mappings.upper_bound(dptr);
  if (mapping != mappings.begin()) {
    --mapping;
    if (dptr < mapping->first + mapping->second.size) {
      *base = mapping->first;
      *size = mapping->second.size;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}

// Synchronous copy or memset: validates, then returns once the context's blocking work (and,
// for _ptds variants, the per-thread stream's) has completed.
CUresult SyncOp(bool ptds, bool args_ok) {
  Api api;
  Context* ctx = nullptr;
  if (const CUresult rc = api.Current(&ctx); rc != CUDA_SUCCESS) return rc;
  if (!args_ok) return CUDA_ERROR_INVALID_VALUE;
  uint64_t deadline = BlockingTail(ctx);
  if (ptds) deadline = std::max(deadline, PerThreadStream(ctx)->tail_ns);
  WaitUnlocked(api, deadline);
  return CUDA_SUCCESS;
}

// Asynchronous copy or memset: stream-ordered, zero modelled duration.
CUresult AsyncOp(CUstream handle, bool ptsz, bool args_ok) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  Stream* stream = nullptr;
  if (const CUresult rc = ResolveStream(handle, ptsz, &stream); rc != CUDA_SUCCESS) return rc;
  if (!args_ok) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

bool CopyArgs(uint64_t dst, uint64_t src, uint64_t count) { return count == 0 || (dst != 0 && src != 0); }
uint64_t HostArg(const void* p) { return reinterpret_cast<uintptr_t>(p); }

}  // namespace
}  // namespace vgpusim::cuda

using namespace vgpusim::cuda;

SIM_EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t f = 0, t = 0;
  const CUresult rc = Guarded([&] { return MemGetInfo(&f, &t); });
  if (rc == CUDA_SUCCESS) *free = f, *total = t;
  return rc;
}

SIM_EXPORT CUresult cuMemGetInfo(unsigned int* free, unsigned int* total) {
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t f = 0, t = 0;
  const CUresult rc = Guarded([&] { return MemGetInfo(&f, &t); });
  if (rc == CUDA_SUCCESS) {
    *free = static_cast<unsigned>(std::min(f, kUint32Max));
    *total = static_cast<unsigned>(std::min(t, kUint32Max));
  }
  return rc;
}

SIM_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  return Guarded([&] { return Alloc(dptr, bytesize, false); });
}

SIM_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr wide = 0;
  const CUresult rc = Guarded([&] { return Alloc(&wide, bytesize, true); });
  if (rc == CUDA_SUCCESS) *dptr = static_cast<CUdeviceptr_v1>(wide);
  return rc;
}

SIM_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                                       unsigned int ElementSizeBytes) {
  uint64_t pitch = 0;
  const CUresult rc = Guarded([&] {
    return AllocPitch(dptr, pPitch == nullptr ? nullptr : &pitch, WidthInBytes, Height, ElementSizeBytes, false);
  });
  if (rc == CUDA_SUCCESS) *pPitch = pitch;
  return rc;
}

SIM_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pPitch, unsigned int WidthInBytes,
                                    unsigned int Height, unsigned int ElementSizeBytes) {
  if (dptr == nullptr || pPitch == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr wide = 0;
  uint64_t pitch = 0;
  const CUresult rc = Guarded([&] { return AllocPitch(&wide, &pitch, WidthInBytes, Height, ElementSizeBytes, true); });
  if (rc == CUDA_SUCCESS) {
    *dptr = static_cast<CUdeviceptr_v1>(wide);
    *pPitch = static_cast<unsigned>(pitch);
  }
  return rc;
}

SIM_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  return Guarded([&] {
    Api api;
    Context* ctx = nullptr;
    if (const CUresult rc = api.Current(&ctx); rc != CUDA_SUCCESS) return rc;
    if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return AllocManaged(ctx, bytesize, flags, dptr);
  });
}

SIM_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) { return Guarded([&] { return Free(dptr); }); }
SIM_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr) { return Guarded([&] { return Free(dptr); }); }

SIM_EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) { return Guarded([&] { return HostAlloc(pp, bytesize); }); }
SIM_EXPORT CUresult cuMemAllocHost(void** pp, unsigned int bytesize) { return Guarded([&] { return HostAlloc(pp, bytesize); }); }
SIM_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  const unsigned known = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if ((Flags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;
  return Guarded([&] { return HostAlloc(pp, bytesize); });
}

SIM_EXPORT CUresult cuMemFreeHost(void* p) {
  return Guarded([&] {
    Api api;
    Context* ctx = nullptr;
    if (const CUresult rc = api.Current(&ctx); rc != CUDA_SUCCESS) return rc;
    if (Rt().host_allocations.erase(p) == 0) return CUDA_ERROR_INVALID_VALUE;
    std::free(p);
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  uint64_t base = 0, size = 0;
  const CUresult rc = Guarded([&] { return AddressRange(&base, &size, dptr); });
  if (rc == CUDA_SUCCESS) {
    if (pbase != nullptr) *pbase = base;
    if (psize != nullptr) *psize = size;
  }
  return rc;
}

SIM_EXPORT CUresult cuMemGetAddressRange(CUdeviceptr_v1* pbase, unsigned int* psize, CUdeviceptr_v1 dptr) {
  uint64_t base = 0, size = 0;
  const CUresult rc = Guarded([&] { return AddressRange(&base, &size, dptr); });
  if (rc == CUDA_SUCCESS) {
    if (pbase != nullptr) *pbase = static_cast<CUdeviceptr_v1>(base);
    if (psize != nullptr) *psize = static_cast<unsigned>(std::min(size, kUint32Max));
  }
  return rc;
}

// --- synchronous copies and memsets: v2, v2_ptds and v1 ABIs --------------------------------
SIM_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return Guarded([&] { return SyncOp(false, CopyArgs(dst, HostArg(src), n)); });
}
SIM_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  return Guarded([&] { return SyncOp(true, CopyArgs(dst, HostArg(src), n)); });
}
SIM_EXPORT CUresult cuMemcpyHtoD(CUdeviceptr_v1 dst, const void* src, unsigned int n) {
  return Guarded([&] { return SyncOp(false, CopyArgs(dst, HostArg(src), n)); });
}
SIM_EXPORT CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return Guarded([&] { return SyncOp(false, CopyArgs(HostArg(dst), src, n)); });
}
SIM_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n) {
  return Guarded([&] { return SyncOp(true, CopyArgs(HostArg(dst), src, n)); });
}
SIM_EXPORT CUresult cuMemcpyDtoH(void* dst, CUdeviceptr_v1 src, unsigned int n) {
  return Guarded([&] { return SyncOp(false, CopyArgs(HostArg(dst), src, n)); });
}
SIM_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return Guarded([&] { return SyncOp(false, CopyArgs(dst, src, n)); });
}
SIM_EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return Guarded([&] { return SyncOp(true, CopyArgs(dst, src, n)); });
}
SIM_EXPORT CUresult cuMemcpyDtoD(CUdeviceptr_v1 dst, CUdeviceptr_v1 src, unsigned int n) {
  return Guarded([&] { return SyncOp(false, CopyArgs(dst, src, n)); });
}
SIM_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char, size_t n) {
  return Guarded([&] { return SyncOp(false, n == 0 || dst != 0); });
}
SIM_EXPORT CUresult cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char, size_t n) {
  return Guarded([&] { return SyncOp(true, n == 0 || dst != 0); });
}
SIM_EXPORT CUresult cuMemsetD8(CUdeviceptr_v1 dst, unsigned char, unsigned int n) {
  return Guarded([&] { return SyncOp(false, n == 0 || dst != 0); });
}
SIM_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int, size_t n) {
  return Guarded([&] { return SyncOp(false, n == 0 || (dst != 0 && dst % 4 == 0)); });
}
SIM_EXPORT CUresult cuMemsetD32_v2_ptds(CUdeviceptr dst, unsigned int, size_t n) {
  return Guarded([&] { return SyncOp(true, n == 0 || (dst != 0 && dst % 4 == 0)); });
}
SIM_EXPORT CUresult cuMemsetD32(CUdeviceptr_v1 dst, unsigned int, unsigned int n) {
  return Guarded([&] { return SyncOp(false, n == 0 || (dst != 0 && dst % 4 == 0)); });
}

// --- asynchronous copies and memsets: v2, v2_ptsz and v1 ABIs -------------------------------
SIM_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return Guarded([&] { return AsyncOp(s, false, CopyArgs(dst, HostArg(src), n)); });
}
SIM_EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return Guarded([&] { return AsyncOp(s, true, CopyArgs(dst, HostArg(src), n)); });
}
SIM_EXPORT CUresult cuMemcpyHtoDAsync(CUdeviceptr_v1 dst, const void* src, unsigned int n, CUstream s) {
  return Guarded([&] { return AsyncOp(s, false, CopyArgs(dst, HostArg(src), n)); });
}
SIM_EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return Guarded([&] { return AsyncOp(s, false, CopyArgs(HostArg(dst), src, n)); });
}
SIM_EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return Guarded([&] { return AsyncOp(s, true, CopyArgs(HostArg(dst), src, n)); });
}
SIM_EXPORT CUresult cuMemcpyDtoHAsync(void* dst, CUdeviceptr_v1 src, unsigned int n, CUstream s) {
  return Guarded([&] { return AsyncOp(s, false, CopyArgs(HostArg(dst), src, n)); });
}
SIM_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return Guarded([&] { return AsyncOp(s, false, CopyArgs(dst, src, n)); });
}
SIM_EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return Guarded([&] { return AsyncOp(s, true, CopyArgs(dst, src, n)); });
}
SIM_EXPORT CUresult cuMemcpyDtoDAsync(CUdeviceptr_v1 dst, CUdeviceptr_v1 src, unsigned int n, CUstream s) {
  return Guarded([&] { return AsyncOp(s, false, CopyArgs(dst, src, n)); });
}
SIM_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char, size_t n, CUstream s) {
  return Guarded([&] { return AsyncOp(s, false, n == 0 || dst != 0); });
}
SIM_EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char, size_t n, CUstream s) {
  return Guarded([&] { return AsyncOp(s, true, n == 0 || dst != 0); });
}
SIM_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int, size_t n, CUstream s) {
  return Guarded([&] { return AsyncOp(s, false, n == 0 || (dst != 0 && dst % 4 == 0)); });
}
SIM_EXPORT CUresult cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned int, size_t n, CUstream s) {
  return Guarded([&] { return AsyncOp(s, true, n == 0 || (dst != 0 && dst % 4 == 0)); });
}
