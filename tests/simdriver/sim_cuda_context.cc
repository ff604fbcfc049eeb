// TEST DOUBLE ONLY: contexts of the simulated driver. The first context a process has on a device
// charges VGPU_SIM_CONTEXT_OVERHEAD there; the last one to go releases it.
#include <algorithm>

#include "sim_cuda_internal.h"

namespace vgpusim::cuda {
namespace {

// Deletes the handles of `type` for which pred (which may release what they hold) is true.
template <class Pred>
void DeleteHandlesIf(HandleType type, Pred pred) {
  std::vector<const void*> candidates;
  for (const auto& [handle, t] : Rt().handles) {
    if (t == type) candidates.push_back(handle);
  }
  for (const void* handle : candidates) {
    if (pred(handle)) DeleteHandle(handle);
  }
}

// A context's creation takes VGPU_SIM_CONTEXT_CREATE_MS once its memory is charged (as a real
// one takes its time while NVML already shows it).
void CreationTime() {
  if (const uint64_t ns = Cfg().context_create_ns) SleepUntil(NowNs() + ns);
}

// Creates an active, non-primary context and makes it current (as cuCtxCreate does).
CUresult CreateContext(CUcontext* pctx, unsigned flags, CUdevice dev) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const int physical = Physical(dev);
  if (physical < 0) return CUDA_ERROR_INVALID_DEVICE;
  if (!State().OpenContext(physical, Cfg().context_overhead)) return CUDA_ERROR_OUT_OF_MEMORY;
  CreationTime();
  auto* ctx = NewHandle<Context>(HandleType::kContext);
  ctx->device = physical;
  ctx->flags = flags;
  ctx->id = Rt().next_context_id++;
  ctx->legacy.ctx = ctx;
  ctx->legacy.kind = StreamKind::kLegacy;
  ContextStack().push_back(ctx);
  *pctx = reinterpret_cast<CUcontext>(ctx);
  return CUDA_SUCCESS;
}

Context* PrimaryOf(int physical) {
  auto& slot = Rt().primary[physical];
  if (slot == nullptr) {
    slot = NewHandle<Context>(HandleType::kContext);
    slot->device = physical;
    slot->primary = true;
    slot->active = false;
    slot->id = Rt().next_context_id++;
    slot->legacy.ctx = slot;
    slot->legacy.kind = StreamKind::kLegacy;
  }
  return slot;
}

CUresult PrimaryRelease(CUdevice dev) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  const int physical = Physical(dev);
  if (physical < 0) return CUDA_ERROR_INVALID_DEVICE;
  Context* ctx = PrimaryOf(physical);
  if (ctx->retains == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--ctx->retains == 0 && ctx->active) TeardownContext(ctx);
  return CUDA_SUCCESS;
}

CUresult PrimaryReset(CUdevice dev) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  const int physical = Physical(dev);
  if (physical < 0) return CUDA_ERROR_INVALID_DEVICE;
  Context* ctx = PrimaryOf(physical);
  if (ctx->active) TeardownContext(ctx);
  return CUDA_SUCCESS;
}

CUresult PrimarySetFlags(CUdevice dev, unsigned flags) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  const int physical = Physical(dev);
  if (physical < 0) return CUDA_ERROR_INVALID_DEVICE;
  PrimaryOf(physical)->flags = flags;
  return CUDA_SUCCESS;
}

CUresult Destroy(CUcontext handle) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  Context* ctx = Lookup<Context>(handle, HandleType::kContext);
  if (ctx == nullptr || ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
  TeardownContext(ctx);
  auto& stack = ContextStack();
  stack.erase(std::remove(stack.begin(), stack.end(), ctx), stack.end());
  DeleteHandle(ctx);
  return CUDA_SUCCESS;
}

CUresult Push(CUcontext handle) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  Context* ctx = Lookup<Context>(handle, HandleType::kContext);
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  ContextStack().push_back(ctx);
  return CUDA_SUCCESS;
}

CUresult Pop(CUcontext* pctx) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  auto& stack = ContextStack();
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = reinterpret_cast<CUcontext>(stack.back());
  stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult GetDevice(CUdevice* device, CUcontext handle) {
  Api api;
  Context* ctx = nullptr;
  if (handle == nullptr) {
    if (const CUresult rc = api.Current(&ctx); rc != CUDA_SUCCESS) return rc;
  } else {
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    ctx = Lookup<Context>(handle, HandleType::kContext);
    if (ctx == nullptr || !ctx->active) return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *device = Ordinal(ctx->device);
  return CUDA_SUCCESS;
}

CUresult Synchronize(CUcontext handle) {
  Api api;
  Context* ctx = nullptr;
  if (handle == nullptr) {
    if (const CUresult rc = api.Current(&ctx); rc != CUDA_SUCCESS) return rc;
  } else {
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    ctx = Lookup<Context>(handle, HandleType::kContext);
    if (ctx == nullptr || !ctx->active) return CUDA_ERROR_INVALID_CONTEXT;
  }
  WaitAndTrim(api, ctx->device, ctx->tail_ns);
  return CUDA_SUCCESS;
}

}  // namespace

void TeardownContext(Context* ctx) {
  auto& allocations = Rt().allocations;
  for (auto it = allocations.begin(); it != allocations.end();) {
    if (it->second.kind == AllocKind::kDevice && it->second.ctx == ctx) {
      UnchargeAllocation(it->second);
      ReleaseAddress(it->first);
      it = allocations.erase(it);
    } else {
      ++it;
    }
  }
  DeleteHandlesIf(HandleType::kStream, [&](const void* h) { return static_cast<const Stream*>(h)->ctx == ctx; });
  DeleteHandlesIf(HandleType::kEvent, [&](const void* h) { return static_cast<const Event*>(h)->ctx == ctx; });
  DeleteHandlesIf(HandleType::kModule, [&](const void* h) {
    const auto* module = static_cast<const Module*>(h);
    if (module->ctx != ctx) return false;
    ReleaseModule(module);
    return true;
  });
  for (auto kind : {HandleType::kArray, HandleType::kMipmappedArray}) {
    DeleteHandlesIf(kind, [&](const void* h) {
      const auto* array = static_cast<const Array*>(h);
      if (array->ctx != ctx) return false;
      State().Uncharge(array->device, array->charged);
      return true;
    });
  }
  ctx->per_thread.clear();
  ctx->legacy.tail_ns = 0;
  ctx->legacy.capture = nullptr;
  ctx->tail_ns = 0;
  ctx->active = false;
  State().CloseContext(ctx->device, Cfg().context_overhead);
}

}  // namespace vgpusim::cuda

using namespace vgpusim::cuda;

SIM_EXPORT CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return Guarded([&] { return CreateContext(pctx, flags, dev); });
}
SIM_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return Guarded([&] { return CreateContext(pctx, flags, dev); });
}
SIM_EXPORT CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams,
                                   unsigned int flags, CUdevice dev) {
  if (numParams < 0 || (numParams > 0 && paramsArray == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return Guarded([&] { return CreateContext(pctx, flags, dev); });
}
SIM_EXPORT CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                   CUdevice dev) {
  if (params != nullptr && params->numExecAffinityParams < 0) return CUDA_ERROR_INVALID_VALUE;
  return Guarded([&] { return CreateContext(pctx, flags, dev); });
}

SIM_EXPORT CUresult cuCtxDestroy(CUcontext ctx) { return Guarded([&] { return Destroy(ctx); }); }
SIM_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) { return Guarded([&] { return Destroy(ctx); }); }

SIM_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const int physical = Physical(dev);
    if (physical < 0) return CUDA_ERROR_INVALID_DEVICE;
    Context* ctx = PrimaryOf(physical);
    if (!ctx->active) {
      if (!State().OpenContext(physical, Cfg().context_overhead)) return CUDA_ERROR_OUT_OF_MEMORY;
      CreationTime();
      ctx->active = true;
    }
    ++ctx->retains;
    *pctx = reinterpret_cast<CUcontext>(ctx);
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return Guarded([&] { return PrimaryRelease(dev); }); }
SIM_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return Guarded([&] { return PrimaryRelease(dev); }); }
SIM_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return Guarded([&] { return PrimaryReset(dev); }); }
SIM_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return Guarded([&] { return PrimaryReset(dev); }); }
SIM_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return Guarded([&] { return PrimarySetFlags(dev, flags); });
}
SIM_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  return Guarded([&] { return PrimarySetFlags(dev, flags); });
}

SIM_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const int physical = Physical(dev);
    if (physical < 0) return CUDA_ERROR_INVALID_DEVICE;
    const Context* ctx = PrimaryOf(physical);
    *flags = ctx->flags;
    *active = ctx->active ? 1 : 0;
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuCtxSetCurrent(CUcontext handle) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    auto& stack = ContextStack();
    if (handle == nullptr) {
      if (!stack.empty()) stack.pop_back();
      return CUDA_SUCCESS;
    }
    Context* ctx = Lookup<Context>(handle, HandleType::kContext);
    if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    if (stack.empty()) {
      stack.push_back(ctx);
    } else {
      stack.back() = ctx;
    }
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuCtxGetCurrent(CUcontext* pctx) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto& stack = ContextStack();
  const bool live = !stack.empty() && Lookup<Context>(stack.back(), HandleType::kContext) != nullptr;
  *pctx = live ? reinterpret_cast<CUcontext>(stack.back()) : nullptr;
  return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx) { return Guarded([&] { return Push(ctx); }); }
SIM_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) { return Guarded([&] { return Push(ctx); }); }
SIM_EXPORT CUresult cuCtxPopCurrent(CUcontext* pctx) { return Guarded([&] { return Pop(pctx); }); }
SIM_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* pctx) { return Guarded([&] { return Pop(pctx); }); }

SIM_EXPORT CUresult cuCtxGetDevice(CUdevice* device) { return Guarded([&] { return GetDevice(device, nullptr); }); }
SIM_EXPORT CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  return Guarded([&] { return GetDevice(device, ctx); });
}

SIM_EXPORT CUresult cuCtxSynchronize(void) { return Guarded([&] { return Synchronize(nullptr); }); }
SIM_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) { return Guarded([&] { return Synchronize(ctx); }); }
