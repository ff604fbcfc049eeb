// TEST DOUBLE ONLY: CUDA arrays and mipmapped arrays in the simulated driver. An array charges
// width x max(height,1) x max(depth,1) x channels x element bytes, rounded up to the granularity;
// a mipmapped array charges the sum over its levels (each level halves every extent, minimum 1).
#include <algorithm>

#include "sim_cuda_internal.h"

namespace vgpusim::cuda {
namespace {

// Bytes per channel of a format, 0 when the format is not simulated.
uint64_t FormatBytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
    case CU_AD_FORMAT_UNORM_INT8X1:
    case CU_AD_FORMAT_SNORM_INT8X1: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
    case CU_AD_FORMAT_UNORM_INT8X2:
    case CU_AD_FORMAT_SNORM_INT8X2:
    case CU_AD_FORMAT_UNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT16X1: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
    case CU_AD_FORMAT_UNORM_INT8X4:
    case CU_AD_FORMAT_SNORM_INT8X4:
    case CU_AD_FORMAT_UNORM_INT16X2:
    case CU_AD_FORMAT_SNORM_INT16X2: return 4;
    case CU_AD_FORMAT_UNORM_INT16X4:
    case CU_AD_FORMAT_SNORM_INT16X4: return 8;
    default: return 0;
  }
}

uint64_t LevelBytes(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned level) {
  auto extent = [level](size_t value, size_t minimum) {
    return std::max<uint64_t>(static_cast<uint64_t>(value) >> level, minimum);
  };
  const uint64_t height = d.Height == 0 ? 1 : extent(d.Height, 1);
  const uint64_t depth = d.Depth == 0 ? 1 : extent(d.Depth, 1);
  return extent(d.Width, 1) * height * depth * d.NumChannels * FormatBytes(d.Format);
}

CUresult Create(const CUDA_ARRAY3D_DESCRIPTOR& desc, unsigned levels, HandleType type, void** out) {
  Api api;
  Context* ctx = nullptr;
  if (const CUresult rc = api.Current(&ctx); rc != CUDA_SUCCESS) return rc;
  if (out == nullptr || desc.Width == 0 || FormatBytes(desc.Format) == 0) return CUDA_ERROR_INVALID_VALUE;
  if (desc.NumChannels != 1 && desc.NumChannels != 2 && desc.NumChannels != 4) return CUDA_ERROR_INVALID_VALUE;
  uint64_t bytes = 0;
  for (unsigned level = 0; level < std::max(levels, 1u); ++level) bytes += LevelBytes(desc, level);
  const uint64_t charged = RoundUp(bytes, Cfg().granularity);
  if (!State().TryCharge(ctx->device, charged)) return CUDA_ERROR_OUT_OF_MEMORY;
  auto* array = NewHandle<Array>(type);
  array->device = ctx->device;
  array->ctx = ctx;
  array->charged = charged;
  array->desc = desc;
  array->levels = levels;
  *out = array;
  return CUDA_SUCCESS;
}

CUresult Destroy(const void* handle, HandleType type) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  const Array* array = Lookup<Array>(handle, type);
  if (array == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  State().Uncharge(array->device, array->charged);
  DeleteHandle(handle);
  return CUDA_SUCCESS;
}

CUresult Describe(CUarray handle, CUDA_ARRAY3D_DESCRIPTOR* out) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  const Array* array = Lookup<Array>(handle, HandleType::kArray);
  if (array == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *out = array->desc;
  return CUDA_SUCCESS;
}

CUDA_ARRAY3D_DESCRIPTOR From2D(size_t width, size_t height, CUarray_format format, unsigned channels) {
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  desc.Width = width;
  desc.Height = height;
  desc.Format = format;
  desc.NumChannels = channels;
  return desc;
}

}  // namespace
}  // namespace vgpusim::cuda

using namespace vgpusim::cuda;

SIM_EXPORT CUresult cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* d) {
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guarded([&] {
    return Create(From2D(d->Width, d->Height, d->Format, d->NumChannels), 0, HandleType::kArray,
                  reinterpret_cast<void**>(pHandle));
  });
}

SIM_EXPORT CUresult cuArrayCreate(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR_v1* d) {
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guarded([&] {
    return Create(From2D(d->Width, d->Height, d->Format, d->NumChannels), 0, HandleType::kArray,
                  reinterpret_cast<void**>(pHandle));
  });
}

SIM_EXPORT CUresult cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guarded([&] { return Create(*d, 0, HandleType::kArray, reinterpret_cast<void**>(pHandle)); });
}

SIM_EXPORT CUresult cuArray3DCreate(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1* d) {
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR desc = From2D(d->Width, d->Height, d->Format, d->NumChannels);
  desc.Depth = d->Depth;
  desc.Flags = d->Flags;
  return Guarded([&] { return Create(desc, 0, HandleType::kArray, reinterpret_cast<void**>(pHandle)); });
}

SIM_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* d,
                                           unsigned int numMipmapLevels) {
  if (d == nullptr || numMipmapLevels == 0) return CUDA_ERROR_INVALID_VALUE;
  return Guarded([&] {
    return Create(*d, numMipmapLevels, HandleType::kMipmappedArray, reinterpret_cast<void**>(pHandle));
  });
}

SIM_EXPORT CUresult cuArrayDestroy(CUarray handle) {
  return Guarded([&] { return Destroy(handle, HandleType::kArray); });
}

SIM_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray handle) {
  return Guarded([&] { return Destroy(handle, HandleType::kMipmappedArray); });
}

SIM_EXPORT CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* out, CUarray handle) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  const CUresult rc = Guarded([&] { return Describe(handle, &desc); });
  if (rc == CUDA_SUCCESS) *out = CUDA_ARRAY_DESCRIPTOR{desc.Width, desc.Height, desc.Format, desc.NumChannels};
  return rc;
}

SIM_EXPORT CUresult cuArrayGetDescriptor(CUDA_ARRAY_DESCRIPTOR_v1* out, CUarray handle) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  const CUresult rc = Guarded([&] { return Describe(handle, &desc); });
  if (rc == CUDA_SUCCESS) {
    *out = CUDA_ARRAY_DESCRIPTOR_v1{static_cast<unsigned>(desc.Width), static_cast<unsigned>(desc.Height),
                                    desc.Format, desc.NumChannels};
  }
  return rc;
}

SIM_EXPORT CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* out, CUarray handle) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guarded([&] { return Describe(handle, out); });
}

SIM_EXPORT CUresult cuArray3DGetDescriptor(CUDA_ARRAY3D_DESCRIPTOR_v1* out, CUarray handle) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  const CUresult rc = Guarded([&] { return Describe(handle, &desc); });
  if (rc == CUDA_SUCCESS) {
    *out = CUDA_ARRAY3D_DESCRIPTOR_v1{static_cast<unsigned>(desc.Width), static_cast<unsigned>(desc.Height),
                                      static_cast<unsigned>(desc.Depth), desc.Format, desc.NumChannels, desc.Flags};
  }
  return rc;
}
