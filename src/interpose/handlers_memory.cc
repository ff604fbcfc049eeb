// Handlers for the device-memory allocation paths: reserve-then-allocate against the ledger,
// roll back when the driver fails, record what was charged so the free returns exactly that.
// Under oversubscription cuMemAlloc_v2 and cuMemAllocManaged spill what does not fit the device
// into host memory (memory_spill.h); the other paths are refused as before.
//
// When accounting is disabled (no memory limit, no ledger) each handler is one relaxed load
// away from the plain forwarder.
#include <cuda.h>

#include <algorithm>
#include <optional>
#include <type_traits>

#include "interpose/allocation_map.h"
#include "interpose/handlers.h"
#include "interpose/loader.h"
#include "interpose/memory_accounting.h"
#include "interpose/memory_pools.h"
#include "interpose/memory_spill.h"

namespace vgpu::hooks {
namespace {

using memory::AllocKind;
using memory::AllocRecord;
using memory::KeySpace;

// What a path does with an allocation that does not fit the device: NoSpill refuses it; a
// Spill serves it from host memory when the device may spill (memory_spill.h) and tracks it.
struct NoSpill {
  CUresult operator()(int /*device*/) const { return CUDA_ERROR_OUT_OF_MEMORY; }
};

struct Spill {
  uint64_t bytes;
  CUdeviceptr* dptr;
  CUresult operator()(int device) const {
    if (!memory::SpillAllowed(device)) return CUDA_ERROR_OUT_OF_MEMORY;
    const CUresult result = memory::SpillAllocate(device, bytes, dptr);
    if (result == CUDA_SUCCESS) {
      memory::Track(KeySpace::kPointer, static_cast<uint64_t>(*dptr), AllocRecord{device, AllocKind::kSpilled, bytes, 0});
    }
    return result;
  }
};

// Charges an allocation of `requested` bytes on the current device (what the driver will take:
// memory::ChargeSize), runs `allocate`, tracks the result under `key()`. `allocate` returns the
// driver's result; `key` is read only after success. What the limit refuses, or the driver
// refuses for lack of memory, goes to `spill`.
template <typename Allocate, typename KeyOf, typename SpillFn = NoSpill>
CUresult ChargeCurrent(uint64_t requested, AllocKind kind, KeySpace space, Allocate allocate, KeyOf key,
                       SpillFn spill = {}) {
  const int device = memory::CurrentDevice();
  if (device < 0) return allocate();  // no context: the driver answers as it would without us
  memory::MaybeReconcile(device);
  const uint64_t bytes = memory::ChargeSize(device, requested);
  constexpr bool kMaySpill = !std::is_same_v<SpillFn, NoSpill>;
  // A refusal that will spill is logged by the spill (a lock-free load decides).
  const bool may_spill = kMaySpill && memory::HostLimit(device) != 0;
  if (!memory::ReserveUnseen(device, bytes, !may_spill)) return spill(device);
  const CUresult result = allocate();
  if (result != CUDA_SUCCESS) {
    memory::Release(device, bytes);
  } else {
    memory::Track(space, key(), AllocRecord{device, kind, bytes, 0});
  }
  memory::NoteInflight(device, -static_cast<int64_t>(bytes));
  if (kMaySpill && result == CUDA_ERROR_OUT_OF_MEMORY) return spill(device);  // the GPU itself is full
  return result;
}

// Frees `key` with `free_fn`; returns exactly what was charged when the driver succeeded.
// Unknown keys are forwarded untouched.
template <typename Free>
CUresult FreeTracked(KeySpace space, uint64_t key, Free free_fn) {
  std::optional<AllocRecord> record = memory::Take(space, key);
  if (!record) return free_fn();
  // Device bytes being freed stay visible to NVML until the driver returns; spilled ones never
  // were, and a pool block's stay in its pool's reserve.
  const bool visible = record->kind != AllocKind::kSpilled && record->kind != AllocKind::kPoolBlock;
  const auto inflight = visible ? static_cast<int64_t>(record->bytes) : 0;
  memory::NoteInflight(record->device, inflight);
  const CUresult result = free_fn();
  if (result != CUDA_SUCCESS) {
    memory::Track(space, key, *record);  // still allocated
  } else if (record->kind == AllocKind::kPoolBlock) {
    const auto pool = reinterpret_cast<CUmemoryPool>(record->aux);
    memory::PoolBlockFreed(pool, static_cast<CUdeviceptr>(key), record->bytes);
    memory::RefreshPool(pool);
  } else if (record->kind == AllocKind::kSpilled) {
    memory::ReleaseSpill(record->device, static_cast<CUdeviceptr>(key), record->bytes);
  } else {
    memory::Release(record->device, record->bytes);
  }
  memory::NoteInflight(record->device, -inflight);
  return result;
}

}  // namespace

CUresult hook_cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  auto real = RealCudaAs<Pfn_cuMemAlloc_v2>(kHook_cuMemAlloc_v2);
  if (real == nullptr) return MissingCudaEntry(kHook_cuMemAlloc_v2);
  if (!memory::Enabled() || dptr == nullptr) return real(dptr, bytesize);
  return ChargeCurrent(bytesize, AllocKind::kDevice, KeySpace::kPointer,
                       [&] { return real(dptr, bytesize); }, [&] { return static_cast<uint64_t>(*dptr); },
                       Spill{bytesize, dptr});
}

// The v1 ABI returns 32-bit pointers, which managed memory cannot promise: it never spills.
CUresult hook_cuMemAlloc(DevicePtrV1* dptr, unsigned int bytesize) {
  auto real = RealCudaAs<Pfn_cuMemAlloc>(kHook_cuMemAlloc);
  if (real == nullptr) return MissingCudaEntry(kHook_cuMemAlloc);
  if (!memory::Enabled() || dptr == nullptr) return real(dptr, bytesize);
  return ChargeCurrent(bytesize, AllocKind::kDevice, KeySpace::kPointer,
                       [&] { return real(dptr, bytesize); }, [&] { return static_cast<uint64_t>(*dptr); });
}

namespace {

// The driver chooses the pitch; reserve for the widest alignment it uses (512 bytes), then
// correct the charge to pitch × height once the pitch is known.
template <typename Ptr, typename Size, typename Pfn>
CUresult AllocPitch(Pfn real, Ptr* dptr, Size* pitch, Size width, Size height, unsigned int element) {
  if (!memory::Enabled() || dptr == nullptr || pitch == nullptr) return real(dptr, pitch, width, height, element);
  const uint64_t estimate = ((static_cast<uint64_t>(width) + 511) / 512) * 512 * static_cast<uint64_t>(height);
  const CUresult result =
      ChargeCurrent(estimate, AllocKind::kDevice, KeySpace::kPointer,
                    [&] { return real(dptr, pitch, width, height, element); },
                    [&] { return static_cast<uint64_t>(*dptr); });
  if (result != CUDA_SUCCESS) return result;
  std::optional<AllocRecord> record = memory::Find(KeySpace::kPointer, static_cast<uint64_t>(*dptr));
  if (!record) return result;
  const uint64_t charged = record->bytes;
  const uint64_t actual = memory::ChargeSize(record->device, static_cast<uint64_t>(*pitch) * static_cast<uint64_t>(height));
  if (actual == charged) return result;
  if (actual < charged) {
    memory::Release(record->device, charged - actual);
  } else if (!memory::Reserve(record->device, actual - charged)) {
    hook_cuMemFree_v2(static_cast<CUdeviceptr>(*dptr));
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  memory::Adjust(KeySpace::kPointer, static_cast<uint64_t>(*dptr),
                 static_cast<int64_t>(actual) - static_cast<int64_t>(charged));
  return result;
}

}  // namespace

CUresult hook_cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                                 unsigned int ElementSizeBytes) {
  auto real = RealCudaAs<Pfn_cuMemAllocPitch_v2>(kHook_cuMemAllocPitch_v2);
  if (real == nullptr) return MissingCudaEntry(kHook_cuMemAllocPitch_v2);
  return AllocPitch(real, dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
}

CUresult hook_cuMemAllocPitch(DevicePtrV1* dptr, unsigned int* pPitch, unsigned int WidthInBytes,
                              unsigned int Height, unsigned int ElementSizeBytes) {
  auto real = RealCudaAs<Pfn_cuMemAllocPitch>(kHook_cuMemAllocPitch);
  if (real == nullptr) return MissingCudaEntry(kHook_cuMemAllocPitch);
  return AllocPitch(real, dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
}

CUresult hook_cuMemFree_v2(CUdeviceptr dptr) {
  auto real = RealCudaAs<Pfn_cuMemFree_v2>(kHook_cuMemFree_v2);
  if (real == nullptr) return MissingCudaEntry(kHook_cuMemFree_v2);
  if (!memory::Enabled()) return real(dptr);
  return FreeTracked(KeySpace::kPointer, static_cast<uint64_t>(dptr), [&] { return real(dptr); });
}

CUresult hook_cuMemFree(DevicePtrV1 dptr) {
  auto real = RealCudaAs<Pfn_cuMemFree>(kHook_cuMemFree);
  if (real == nullptr) return MissingCudaEntry(kHook_cuMemFree);
  if (!memory::Enabled()) return real(dptr);
  return FreeTracked(KeySpace::kPointer, static_cast<uint64_t>(dptr), [&] { return real(dptr); });
}

CUresult hook_cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  auto real = RealCudaAs<Pfn_cuMemAllocManaged>(kHook_cuMemAllocManaged);
  if (real == nullptr) return MissingCudaEntry(kHook_cuMemAllocManaged);
  if (!memory::Enabled() || dptr == nullptr) return real(dptr, bytesize, flags);
  // Managed memory can migrate to the device in full: it is charged to the current device.
  // Under oversubscription what does not fit is kept on the host instead (its attach flags
  // then do not matter: spilling devices have concurrent managed access).
  return ChargeCurrent(bytesize, AllocKind::kManaged, KeySpace::kPointer,
                       [&] { return real(dptr, bytesize, flags); },
                       [&] { return static_cast<uint64_t>(*dptr); }, Spill{bytesize, dptr});
}

// --- arrays -------------------------------------------------------------------------------------

namespace {

uint64_t FormatBytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    default:
      return 4;  // 32-bit formats; compressed and planar formats are at most this per element
  }
}

uint64_t ArrayBytes(uint64_t width, uint64_t height, uint64_t depth, unsigned int channels, CUarray_format format) {
  return std::max<uint64_t>(width, 1) * std::max<uint64_t>(height, 1) * std::max<uint64_t>(depth, 1) *
         std::max(channels, 1u) * FormatBytes(format);
}

// Charges `bytes` and creates the array; the handle (written by `create` through `out`) keys it.
template <typename Handle, typename Create>
CUresult ChargeArray(uint64_t bytes, KeySpace space, Handle* out, Create create) {
  return ChargeCurrent(bytes, AllocKind::kArray, space, create, [&] { return reinterpret_cast<uint64_t>(*out); });
}

// cuArrayCreate(_v2), cuArray3DCreate(_v2): the pre-3.2 descriptors differ only in their 32-bit
// extents; 2D descriptors have no depth.
template <typename Pfn, typename Descriptor>
CUresult CreateArray(HookId id, CUarray* pHandle, const Descriptor* desc) {
  auto real = RealCudaAs<Pfn>(id);
  if (real == nullptr) return MissingCudaEntry(id);
  if (!memory::Enabled() || pHandle == nullptr || desc == nullptr) return real(pHandle, desc);
  uint64_t depth = 1;
  if constexpr (requires { desc->Depth; }) depth = desc->Depth;
  const uint64_t bytes = ArrayBytes(desc->Width, desc->Height, depth, desc->NumChannels, desc->Format);
  return ChargeArray(bytes, KeySpace::kArray, pHandle, [&] { return real(pHandle, desc); });
}

}  // namespace

CUresult hook_cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  return CreateArray<Pfn_cuArrayCreate_v2>(kHook_cuArrayCreate_v2, pHandle, desc);
}

CUresult hook_cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  return CreateArray<Pfn_cuArray3DCreate_v2>(kHook_cuArray3DCreate_v2, pHandle, desc);
}

CUresult hook_cuArrayCreate(CUarray* pHandle, const ArrayDescriptorV1* desc) {
  return CreateArray<Pfn_cuArrayCreate>(kHook_cuArrayCreate, pHandle, desc);
}

CUresult hook_cuArray3DCreate(CUarray* pHandle, const Array3DDescriptorV1* desc) {
  return CreateArray<Pfn_cuArray3DCreate>(kHook_cuArray3DCreate, pHandle, desc);
}

CUresult hook_cuMipmappedArrayCreate(CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                     unsigned int numMipmapLevels) {
  auto real = RealCudaAs<Pfn_cuMipmappedArrayCreate>(kHook_cuMipmappedArrayCreate);
  if (real == nullptr) return MissingCudaEntry(kHook_cuMipmappedArrayCreate);
  if (!memory::Enabled() || pHandle == nullptr || desc == nullptr) return real(pHandle, desc, numMipmapLevels);
  uint64_t bytes = 0;
  for (unsigned int level = 0; level < std::max(numMipmapLevels, 1u); ++level) {
    bytes += ArrayBytes(std::max<uint64_t>(desc->Width >> level, 1), desc->Height ? std::max<uint64_t>(desc->Height >> level, 1) : 1,
                        desc->Depth ? std::max<uint64_t>(desc->Depth >> level, 1) : 1, desc->NumChannels, desc->Format);
  }
  return ChargeArray(bytes, KeySpace::kMipmappedArray, pHandle, [&] { return real(pHandle, desc, numMipmapLevels); });
}

CUresult hook_cuArrayDestroy(CUarray hArray) {
  auto real = RealCudaAs<Pfn_cuArrayDestroy>(kHook_cuArrayDestroy);
  if (real == nullptr) return MissingCudaEntry(kHook_cuArrayDestroy);
  if (!memory::Enabled()) return real(hArray);
  return FreeTracked(KeySpace::kArray, reinterpret_cast<uint64_t>(hArray), [&] { return real(hArray); });
}

CUresult hook_cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  auto real = RealCudaAs<Pfn_cuMipmappedArrayDestroy>(kHook_cuMipmappedArrayDestroy);
  if (real == nullptr) return MissingCudaEntry(kHook_cuMipmappedArrayDestroy);
  if (!memory::Enabled()) return real(hMipmappedArray);
  return FreeTracked(KeySpace::kMipmappedArray, reinterpret_cast<uint64_t>(hMipmappedArray),
                     [&] { return real(hMipmappedArray); });
}

}  // namespace vgpu::hooks
