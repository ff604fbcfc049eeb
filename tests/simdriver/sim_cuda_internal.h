// Process-local model of the simulated CUDA driver: contexts, streams, events, allocations,
// pools, VMM handles, arrays and graphs, plus helpers shared by the sim_cuda_*.cc entry points.
//
// TEST DOUBLE ONLY. Part of the simulated libcuda used by CI; never deployed.
//
// Thread safety: every object below is guarded by Runtime::mu. Entry points take it through
// `Api` and release it before sleeping (synchronize calls). Lock order: Runtime::mu, then the
// shared-state mutex inside SharedState.
//
// Device numbering: the API takes CUDA ordinals (after CUDA_VISIBLE_DEVICES); every object
// stores the physical index, which is what the shared state and NVML use.
#pragma once

// Literal declarations of every versioned name (cuMemAlloc = v1 ABI, cuMemAlloc_v2, ..._ptsz).
// Entry points get default visibility; the version script generated from sim_cuda_exports.def
// decides what is exported.
#define __CUDA_API_VERSION_INTERNAL 1
#define __CUDA_API_PUSH_VISIBILITY_DEFAULT 1
#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "sim_core.h"

#define SIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace vgpusim::cuda {

struct Context;
struct Graph;
struct Pool;

enum class StreamKind { kCreated, kLegacy, kPerThread };

struct Stream {
  Context* ctx = nullptr;
  StreamKind kind = StreamKind::kCreated;
  unsigned flags = 0;
  int priority = 0;
  uint64_t tail_ns = 0;        // modelled completion time of the last work enqueued
  Graph* capture = nullptr;    // non-null while capturing
};

struct Context {
  int device = 0;              // physical index
  bool primary = false;
  bool active = true;          // a primary context is inactive while its retain count is 0
  int retains = 0;             // primary contexts only
  unsigned flags = 0;
  unsigned long long id = 0;
  uint64_t tail_ns = 0;        // latest end of any work in this context
  Stream legacy;
  std::map<std::thread::id, std::unique_ptr<Stream>> per_thread;
};

struct Event {
  Context* ctx = nullptr;
  unsigned flags = 0;
  bool recorded = false;
  uint64_t time_ns = 0;        // modelled time at which the event completes
};

struct Function {              // also what a CUkernel handle points to
  std::string name;
  bool sleep = false;          // name starts with "sim_sleep"
  // VGPU_SIM_LAZY_MODULE_MEMORY charged at the first launch (lazy loading), on lazy_device.
  uint64_t lazy_charged = 0;
  int lazy_device = 0;
};

struct Module {
  Context* ctx = nullptr;      // null for libraries (context independent)
  uint64_t charged = 0;        // VGPU_SIM_MODULE_MEMORY charged on ctx->device
  std::map<std::string, std::unique_ptr<Function>> functions;
};

enum class AllocKind { kDevice, kPool };

// Where managed memory's pages are, as the simulation models it (sim_cuda_managed.cc).
inline constexpr int kNoLocation = -2;  // no preferred location; CU_DEVICE_CPU (-1) = the host

struct Allocation {
  uint64_t requested = 0;
  uint64_t size = 0;           // bytes charged (kDevice) or the block size (kPool)
  int device = 0;
  Context* ctx = nullptr;      // kDevice: freed with its context
  AllocKind kind = AllocKind::kDevice;
  Pool* pool = nullptr;
  // Managed memory (cuMemAllocManaged): charged to `device` only while resident there.
  bool managed = false;
  bool resident = true;            // false: the pages are on the host (not charged)
  bool packed = false;             // small: shares pages with others (Runtime::small_bytes)
  int preferred = kNoLocation;     // CU_MEM_ADVISE_SET_PREFERRED_LOCATION (CU_DEVICE_CPU or a physical device)
  std::set<int> accessed_by;       // CU_MEM_ADVISE_SET_ACCESSED_BY (physical devices)
  int last_prefetch = kNoLocation; // cuMemPrefetchAsync target (CU_DEVICE_CPU or a physical device)
};

// Device bytes an allocation holds (0 for managed memory on the host).
inline uint64_t DeviceBytes(const Allocation& allocation) { return allocation.resident ? allocation.size : 0; }

struct Pool {
  int device = 0;
  bool is_default = false;
  uint64_t reserved = 0;       // charged to the device: the backed chunks times the pool chunk
  uint64_t used = 0;
  CUdeviceptr base = 0;                 // the pool's address range (reserved at its first block)
  std::map<uint64_t, uint64_t> blocks;  // live blocks: offset in the range -> size
  std::vector<bool> backed;             // per chunk of the range: holds reserved memory
  uint64_t reserved_high = 0;
  uint64_t used_high = 0;
  uint64_t release_threshold = 0;
  int reuse[3] = {1, 1, 1};    // CU_MEMPOOL_ATTR_REUSE_* (stored, not modelled)
  CUmemPoolProps props{};
};

struct VmmHandle {
  int device = 0;
  uint64_t size = 0;
  uint64_t refs = 1;           // creation/import + retains + mappings
  uint64_t share_id = 0;       // exported or imported: the shared-state share record
  CUmemAllocationProp prop{};
};

struct Mapping {
  uint64_t size = 0;
  CUmemGenericAllocationHandle handle = 0;
};

struct Array {
  int device = 0;
  Context* ctx = nullptr;
  uint64_t charged = 0;
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  unsigned levels = 0;         // mipmapped arrays: number of levels; 0 for plain arrays
};

struct GraphNode {
  enum class Type { kKernel, kMemAlloc, kMemFree } type = Type::kKernel;
  uint64_t duration_ns = 0;
  uint64_t bytes = 0;          // kMemAlloc: granularity-rounded size
  CUdeviceptr dptr = 0;
  CUDA_MEM_ALLOC_NODE_PARAMS alloc{};  // kMemAlloc: creation params, dptr filled, accessDescs -> access
  std::vector<CUmemAccessDesc> access;
};

struct Graph {
  int device = -1;             // physical device of its first memory node, -1 if none
  std::vector<std::unique_ptr<GraphNode>> nodes;
};

struct GraphExec {
  int device = -1;
  std::vector<uint64_t> kernels;  // durations, launched back to back
  uint64_t mem_bytes = 0;         // sum of mem-alloc nodes, charged at first launch
  bool charged = false;
  uint64_t last_end_ns = 0;
};

enum class HandleType { kContext, kStream, kEvent, kModule, kLibrary, kFunction, kPool, kArray,
                        kMipmappedArray, kGraph, kGraphNode, kGraphExec };

struct Runtime {
  std::mutex mu;
  // Guarded by mu.
  bool initialized = false;
  const Core* core = nullptr;
  std::vector<int> visible;          // CUDA ordinal -> physical index
  std::vector<Context*> primary;     // per physical device, created lazily
  std::unordered_map<const void*, HandleType> handles;
  std::map<CUdeviceptr, Allocation> allocations;  // by base address
  std::set<void*> host_allocations;
  std::vector<Pool*> current_pool;   // per physical device
  std::vector<Pool*> default_pool;   // per physical device
  std::vector<bool> pool_setup;      // per physical device: VGPU_SIM_POOL_SETUP_MEMORY charged
  // Small allocations (at most half the granularity) share pages, as the driver packs them (an
  // H200 put 64 x 4 KiB in one 2 MiB page, two 1 MiB in one): per physical device, the bytes of
  // live small allocations; the pages charged for them are enough to hold them, no gaps.
  std::vector<uint64_t> small_bytes;
  std::map<CUmemGenericAllocationHandle, VmmHandle> vmm_handles;
  CUmemGenericAllocationHandle next_vmm_handle = 0x1000;
  std::map<CUdeviceptr, uint64_t> reservations;   // VMM address reservations
  std::map<CUdeviceptr, Mapping> mappings;        // by mapped address
  std::vector<uint64_t> graph_mem_used;           // per physical device
  std::vector<uint64_t> graph_mem_high;
  std::map<uint64_t, uint64_t> address_space;     // every fake range in use: base -> size
  unsigned long long next_context_id = 1;
};

Runtime& Rt();

// Holds Runtime::mu for one entry point.
class Api {
 public:
  Api() : lock_(Rt().mu) {}
  // CUDA_ERROR_NOT_INITIALIZED before a successful cuInit.
  CUresult Check() const;
  // Check() plus the calling thread's current context (CUDA_ERROR_INVALID_CONTEXT if none).
  CUresult Current(Context** out) const;
  std::unique_lock<std::mutex>& lock() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

// Runs an entry point body, turning any C++ exception into an error code.
template <class F>
CUresult Guarded(F&& body) noexcept {
  try {
    return body();
  } catch (...) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
}

// --- helpers (REQUIRES: Runtime::mu held) ---------------------------------------------------
const Config& Cfg();
SharedState& State();
uint64_t RoundUp(uint64_t value, uint64_t multiple);

// Handles are the addresses of heap objects registered in Runtime::handles; DeleteHandle
// unregisters and deletes one (by its registered type).
template <class T>
T* NewHandle(HandleType type) {
  T* object = new T();
  Rt().handles[object] = type;
  return object;
}
void DeleteHandle(const void* handle);
template <class T>
T* Lookup(const void* handle, HandleType type) {
  auto it = Rt().handles.find(handle);
  return (handle != nullptr && it != Rt().handles.end() && it->second == type)
             ? static_cast<T*>(const_cast<void*>(handle)) : nullptr;
}

// CUDA ordinal -> physical index; -1 when out of range.
int Physical(CUdevice ordinal);
CUdevice Ordinal(int physical);
std::vector<Context*>& ContextStack();  // this thread's; back() is current
Context* CurrentContext();              // null if none or no longer live

// Resolves a stream handle. `per_thread`: the call is a _ptsz/_ptds variant, so 0 means the
// per-thread default stream.
CUresult ResolveStream(CUstream handle, bool per_thread, Stream** out);
Stream* PerThreadStream(Context* ctx);
// Enqueues `duration_ns` of device work on `stream`; returns its modelled end.
uint64_t Enqueue(Stream* stream, uint64_t duration_ns);
// Latest end among the legacy stream and every blocking stream of ctx.
uint64_t BlockingTail(Context* ctx);

// Address space of fake device pointers. `low32`: below 4 GiB (v1 ABI). `vmm`: VMM range.
CUdeviceptr ReserveAddress(int device, uint64_t size, uint64_t alignment, bool low32, bool vmm);
void ReleaseAddress(CUdeviceptr base);

// Device allocations charged to the device (cuMemAlloc, pitch, managed).
CUresult AllocDevice(Context* ctx, uint64_t bytes, bool low32, CUdeviceptr* out);
// Managed memory (sim_cuda_managed.cc): CU_MEM_ATTACH_GLOBAL memory is resident on the context's
// device (charged like device memory); CU_MEM_ATTACH_HOST memory starts on the host (not charged).
CUresult AllocManaged(Context* ctx, uint64_t bytes, unsigned flags, CUdeviceptr* out);
CUresult FreeDevice(CUdeviceptr dptr);
// Returns a device allocation's memory (a packed one's pages once no small allocation needs them).
void UnchargeAllocation(const Allocation& allocation);
// Unloading a module or a library (or its context's teardown): returns its memory and what its
// functions' first launches charged, and drops its functions' handles; the caller deletes the
// module's own handle. REQUIRES: Runtime::mu held.
void ReleaseModule(const Module* module);

// Pools (sim_cuda_pool.cc).
Pool* DefaultPool(int device);
CUresult PoolAlloc(Pool* pool, uint64_t bytes, CUdeviceptr* out);
void PoolFree(CUdeviceptr base);  // REQUIRES: base is a kPool allocation
void TrimPools(int device);  // releases reserved-but-unused memory above each release threshold

// Contexts (sim_cuda_context.cc): frees everything a context owns and releases its overhead.
void TeardownContext(Context* ctx);

// Synchronisation (sim_cuda_stream.cc): waits (lock released) until `deadline_ns`, then trims
// the device's pools as the driver does at synchronisation points.
void WaitAndTrim(Api& api, int device, uint64_t deadline_ns);

// Kernel duration (sim_cuda_module.cc).
uint64_t KernelDuration(const Function* function, void** params, void** extra);
// Graph memory (sim_cuda_graph.cc).
void DestroyGraphExec(GraphExec* exec);
CUresult CaptureMemAlloc(Stream* stream, uint64_t bytes, CUdeviceptr* out);
CUresult CaptureMemFree(Stream* stream, CUdeviceptr dptr);
CUresult CaptureKernel(Stream* stream, uint64_t duration_ns);

// VMM (sim_cuda_vmm.cc): drops one reference to a handle.
void UnrefVmmHandle(CUmemGenericAllocationHandle handle);

}  // namespace vgpusim::cuda
