// TEST DOUBLE ONLY: shared helpers of the simulated CUDA driver (see sim_cuda_internal.h).
#include <pthread.h>

#include <algorithm>
#include <iterator>

#include "sim_cuda_internal.h"

namespace vgpusim::cuda {
namespace {

// Fake device addresses: never dereferenced, chosen away from typical host mappings.
constexpr uint64_t kDeviceBase = 0x200000000000ull;   // + physical index * kDeviceSpan
constexpr uint64_t kDeviceSpan = 1ull << 40;
constexpr uint64_t kVmmBase = 0x300000000000ull;
constexpr uint64_t kVmmSpan = 1ull << 42;
constexpr uint64_t kLowBase = 0x10000000ull;          // v1 (32-bit) allocations
constexpr uint64_t kLowEnd = 0xf0000000ull;

// Place `size` bytes in [lo, hi): after the highest range in use (cheap, the common case), else
// first fit over Runtime::address_space. Regions never overlap, so ranges never straddle lo.
CUdeviceptr FindGap(uint64_t lo, uint64_t hi, uint64_t size, uint64_t alignment) {
  auto& space = Rt().address_space;
  auto fits = [&](uint64_t start) { return start >= lo && start + size >= start && start + size <= hi; };
  auto last = space.lower_bound(hi);
  if (last == space.begin() || std::prev(last)->first < lo) {
    return fits(RoundUp(lo, alignment)) ? RoundUp(lo, alignment) : 0;
  }
  --last;
  const uint64_t after_last = RoundUp(last->first + last->second, alignment);
  if (fits(after_last)) return after_last;
  uint64_t candidate = RoundUp(lo, alignment);
  for (auto it = space.lower_bound(lo); it != space.end() && it->first < hi; ++it) {
    if (candidate + size <= it->first) break;
    candidate = RoundUp(std::max(candidate, it->first + it->second), alignment);
  }
  return fits(candidate) ? candidate : 0;
}

}  // namespace

namespace {

Runtime* g_runtime = nullptr;  // never destroyed: entry points may run during exit

// fork(): the child starts with a fresh, uninitialised runtime (the parent's contexts are not
// usable there, as with the real driver) and no lock copied in the held state.
void PrepareFork() { g_runtime->mu.lock(); }
void ParentAfterFork() { g_runtime->mu.unlock(); }
void ChildAfterFork() {
  const Core* core = g_runtime->core;
  g_runtime = new Runtime;  // the old copy (locked) is abandoned
  g_runtime->core = core;
  ContextStack().clear();
}

}  // namespace

Runtime& Rt() {
  static Runtime* runtime = [] {
    g_runtime = new Runtime;
    pthread_atfork(&PrepareFork, &ParentAfterFork, &ChildAfterFork);
    return g_runtime;
  }();
  (void)runtime;
  return *g_runtime;
}

CUresult Api::Check() const { return Rt().initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED; }

CUresult Api::Current(Context** out) const {
  if (const CUresult rc = Check(); rc != CUDA_SUCCESS) return rc;
  *out = CurrentContext();
  return *out != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

const Config& Cfg() { return Rt().core->config; }
SharedState& State() { return *Rt().core->state; }

uint64_t RoundUp(uint64_t value, uint64_t multiple) {
  if (multiple == 0) return value;
  const uint64_t rem = value % multiple;
  return rem == 0 ? value : value + (multiple - rem);
}

void DeleteHandle(const void* handle) {
  auto it = Rt().handles.find(handle);
  if (it == Rt().handles.end()) return;
  const HandleType type = it->second;
  Rt().handles.erase(it);
  void* p = const_cast<void*>(handle);
  switch (type) {
    case HandleType::kContext: delete static_cast<Context*>(p); break;
    case HandleType::kStream: delete static_cast<Stream*>(p); break;
    case HandleType::kEvent: delete static_cast<Event*>(p); break;
    case HandleType::kModule:
    case HandleType::kLibrary: delete static_cast<Module*>(p); break;
    case HandleType::kFunction: break;  // owned by its module
    case HandleType::kPool: delete static_cast<Pool*>(p); break;
    case HandleType::kArray:
    case HandleType::kMipmappedArray: delete static_cast<Array*>(p); break;
    case HandleType::kGraph: delete static_cast<Graph*>(p); break;
    case HandleType::kGraphNode: break;  // owned by its graph
    case HandleType::kGraphExec: delete static_cast<GraphExec*>(p); break;
  }
}

int Physical(CUdevice ordinal) {
  const auto& visible = Rt().visible;
  return (ordinal >= 0 && ordinal < static_cast<int>(visible.size())) ? visible[ordinal] : -1;
}

CUdevice Ordinal(int physical) {
  const auto& visible = Rt().visible;
  const auto it = std::find(visible.begin(), visible.end(), physical);
  return it == visible.end() ? -1 : static_cast<CUdevice>(it - visible.begin());
}

std::vector<Context*>& ContextStack() {
  thread_local std::vector<Context*> stack;
  return stack;
}

Context* CurrentContext() {
  auto& stack = ContextStack();
  if (stack.empty()) return nullptr;
  Context* ctx = Lookup<Context>(stack.back(), HandleType::kContext);
  return (ctx != nullptr && ctx->active) ? ctx : nullptr;
}

Stream* PerThreadStream(Context* ctx) {
  auto& slot = ctx->per_thread[std::this_thread::get_id()];
  if (!slot) {
    slot = std::make_unique<Stream>();
    slot->ctx = ctx;
    slot->kind = StreamKind::kPerThread;
  }
  return slot.get();
}

CUresult ResolveStream(CUstream handle, bool per_thread, Stream** out) {
  if (handle == nullptr || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD) {
    Context* ctx = CurrentContext();
    if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    const bool use_per_thread = handle == CU_STREAM_PER_THREAD || (handle == nullptr && per_thread);
    *out = use_per_thread ? PerThreadStream(ctx) : &ctx->legacy;
    return CUDA_SUCCESS;
  }
  Stream* stream = Lookup<Stream>(handle, HandleType::kStream);
  if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!stream->ctx->active) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = stream;
  return CUDA_SUCCESS;
}

uint64_t Enqueue(Stream* stream, uint64_t duration_ns) {
  const uint64_t earliest = std::max(NowNs(), stream->tail_ns);
  const uint64_t end = State().Schedule(stream->ctx->device, earliest, duration_ns);
  stream->tail_ns = end;
  stream->ctx->tail_ns = std::max(stream->ctx->tail_ns, end);
  return end;
}

uint64_t BlockingTail(Context* ctx) {
  uint64_t tail = ctx->legacy.tail_ns;
  for (const auto& [handle, type] : Rt().handles) {
    if (type != HandleType::kStream) continue;
    const auto* stream = static_cast<const Stream*>(handle);
    if (stream->ctx == ctx && (stream->flags & CU_STREAM_NON_BLOCKING) == 0) {
      tail = std::max(tail, stream->tail_ns);
    }
  }
  return tail;
}

CUdeviceptr ReserveAddress(int device, uint64_t size, uint64_t alignment, bool low32, bool vmm) {
  alignment = std::max<uint64_t>(alignment, 256);
  uint64_t lo = kDeviceBase + static_cast<uint64_t>(device) * kDeviceSpan;
  uint64_t hi = lo + kDeviceSpan;
  if (low32) {
    lo = kLowBase;
    hi = kLowEnd;
  } else if (vmm) {
    lo = kVmmBase;
    hi = kVmmBase + kVmmSpan;
  }
  const CUdeviceptr base = FindGap(lo, hi, std::max<uint64_t>(size, 1), alignment);
  if (base != 0) Rt().address_space[base] = std::max<uint64_t>(size, 1);
  return base;
}

void ReleaseAddress(CUdeviceptr base) { Rt().address_space.erase(base); }

namespace {

uint64_t PagesFor(uint64_t bytes) { return (bytes + Cfg().granularity - 1) / Cfg().granularity; }

// Charges the pages that small allocations of `bytes` more need.
bool ChargeSmall(int device, uint64_t bytes) {
  uint64_t& small = Rt().small_bytes[device];
  const uint64_t more = PagesFor(small + bytes) - PagesFor(small);
  if (more > 0 && !State().TryCharge(device, more * Cfg().granularity)) return false;
  small += bytes;
  return true;
}

// Returns small allocations' bytes; uncharges the pages no longer needed.
void ReleaseSmall(int device, uint64_t bytes) {
  uint64_t& small = Rt().small_bytes[device];
  const uint64_t before = PagesFor(small);
  small -= std::min(bytes, small);
  const uint64_t after = PagesFor(small);
  if (after < before) State().Uncharge(device, (before - after) * Cfg().granularity);
}

}  // namespace

void UnchargeAllocation(const Allocation& allocation) {
  if (allocation.packed) {
    ReleaseSmall(allocation.device, allocation.size);
  } else {
    State().Uncharge(allocation.device, DeviceBytes(allocation));
  }
}

CUresult AllocDevice(Context* ctx, uint64_t bytes, bool low32, CUdeviceptr* out) {
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const bool packed = bytes <= Cfg().granularity / 2;
  const uint64_t size = packed ? RoundUp(bytes, 512) : RoundUp(bytes, Cfg().granularity);
  if (size < bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  if (packed ? !ChargeSmall(ctx->device, size) : !State().TryCharge(ctx->device, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUdeviceptr base = ReserveAddress(ctx->device, size, packed ? 512 : Cfg().granularity, low32, false);
  if (base == 0) {
    if (packed) {
      ReleaseSmall(ctx->device, size);
    } else {
      State().Uncharge(ctx->device, size);
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Allocation allocation;
  allocation.requested = bytes;
  allocation.packed = packed;
  allocation.size = size;
  allocation.device = ctx->device;
  allocation.ctx = ctx;
  Rt().allocations[base] = allocation;
  *out = base;
  return CUDA_SUCCESS;
}

CUresult FreeDevice(CUdeviceptr dptr) {
  auto it = Rt().allocations.find(dptr);
  if (it == Rt().allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  if (it->second.kind == AllocKind::kPool) {
    PoolFree(dptr);
    return CUDA_SUCCESS;
  }
  UnchargeAllocation(it->second);
  Rt().allocations.erase(it);
  ReleaseAddress(dptr);
  return CUDA_SUCCESS;
}

}  // namespace vgpusim::cuda
