// Real-GPU check of every device-allocation path under a memory limit (run under
// LD_PRELOAD=libvgpu.so CUDA_DEVICE_MEMORY_LIMIT=...). One path per process:
//
//   paths_check --list                       the path names, one per line
//   paths_check <path> [--limit-mib 1024] [--step-mib 64] [--cap-mib 4096] [--hold-ms 300]
//       allocates with <path> in steps until a call fails (or --cap-mib is reached), keeps it
//       --hold-ms (so an outside observer sees it), frees everything and prints one line:
//         result path=<path> refused=yes|no code=<n> code_name=<name> stage=<call|instantiate|
//         launch|capture|build|cap> obtained_bytes=<n> obtained_mib=<x> limit_bytes=<n>
//         verdict=PASS|FAIL
//       PASS: refused with out-of-memory (CUDA_ERROR_OUT_OF_MEMORY / cudaErrorMemoryAllocation,
//       both 2), obtained <= limit, and, for graphs, refused at instantiate or launch.
//       "_huge" paths try one graph whose mem-alloc node asks for 2 x limit.
//   paths_check pinned [--limit-mib 1024]
//       pinned host memory (cudaMallocHost and cuMemHostAlloc, 1 GiB each) must succeed beyond the
//       limit; then cudaMalloc steps until refused: "result path=pinned ... host_ok=yes|no".
//   paths_check context [--hold-ms 300]
//       creates the runtime's context, prints "context_ready", waits, exits (run natively under
//       nvml_peak.py to measure the context's own memory).
//
// Every CUDA call's result is checked; setup failures exit 1. Managed memory is never touched
// and never requested beyond --cap-mib (far below the card's free memory).
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../cuda_check.h"

extern "C" {
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream);
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                              CUstream hStream);
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
}

namespace {

constexpr uint64_t kMiB = 1ull << 20;

struct Settings {
  uint64_t limit = 1024 * kMiB;
  uint64_t step = 64 * kMiB;
  uint64_t cap = 4096 * kMiB;
  int hold_ms = 300;  // what is obtained stays allocated this long, for the outside observer
};

// Result of one allocation attempt: code 0 = success; `stage` says where a refusal came from.
struct Attempt {
  int code = 0;
  bool driver = true;  // which API's code (for the name)
  const char* stage = "call";
};

Attempt Drv(CUresult rc, const char* stage = "call") { return {static_cast<int>(rc), true, stage}; }
Attempt Rt(cudaError_t rc, const char* stage = "call") {
  if (rc != cudaSuccess) cudaGetLastError();  // clear the runtime's last error
  return {static_cast<int>(rc), false, stage};
}

std::string CodeName(const Attempt& a) {
  if (a.code == 0) return "success";
  if (a.driver) {
    const char* name = nullptr;
    cuGetErrorName(static_cast<CUresult>(a.code), &name);
    return name != nullptr ? name : "unknown";
  }
  return cudaGetErrorName(static_cast<cudaError_t>(a.code));
}

// One path: Step() makes one allocation of `bytes` (returns its attempt), ReleaseAll() frees all.
struct Path {
  std::function<Attempt(uint64_t bytes)> step;
  std::function<void()> release;
  bool graph = false;
  bool huge = false;   // a single attempt of 2 x limit instead of steps
  double scale = 1.0;  // bytes one step really asks for, per step size (mipmapped arrays: 1.25)
};

CUstream g_stream = nullptr;  // non-blocking stream of the primary context
CUdevice g_dev = 0;

CUmemoryPool NewDriverPool() {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = g_dev;
  CUmemoryPool pool = nullptr;
  DRV(cuMemPoolCreate(&pool, &props));
  return pool;
}

// Frees pool blocks on the stream, waits, and gives the pool's reserve back.
void FreePoolBlocks(std::vector<CUdeviceptr>* ptrs, CUmemoryPool pool, bool ptsz) {
  for (CUdeviceptr p : *ptrs) DRV(ptsz ? cuMemFreeAsync_ptsz(p, nullptr) : cuMemFreeAsync(p, g_stream));
  ptrs->clear();
  DRV(cuCtxSynchronize());
  DRV(cuMemPoolTrimTo(pool, 0));
}

// A driver graph with one mem-alloc node of `bytes` (plus a free node when `with_free`),
// instantiated and launched; the executable graph is returned through *exec when it ran.
Attempt DriverGraph(uint64_t bytes, bool with_free, bool ptsz, CUgraphExec* exec_out, CUdeviceptr* dptr) {
  CUgraph graph = nullptr;
  DRV(cuGraphCreate(&graph, 0));
  CUDA_MEM_ALLOC_NODE_PARAMS params{};
  params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  params.poolProps.location.id = g_dev;
  params.bytesize = bytes;
  CUgraphNode alloc_node = nullptr;
  CUresult rc = cuGraphAddMemAllocNode(&alloc_node, graph, nullptr, 0, &params);
  if (rc != CUDA_SUCCESS) {
    DRV(cuGraphDestroy(graph));
    return Drv(rc, "build");
  }
  if (with_free) {
    CUgraphNode free_node = nullptr;
    DRV(cuGraphAddMemFreeNode(&free_node, graph, &alloc_node, 1, params.dptr));
  }
  CUgraphExec exec = nullptr;
  rc = cuGraphInstantiateWithFlags(&exec, graph, 0);
  DRV(cuGraphDestroy(graph));
  if (rc != CUDA_SUCCESS) return Drv(rc, "instantiate");
  rc = ptsz ? cuGraphLaunch_ptsz(exec, nullptr) : cuGraphLaunch(exec, g_stream);
  if (rc != CUDA_SUCCESS) {
    DRV(cuGraphExecDestroy(exec));
    return Drv(rc, "launch");
  }
  rc = cuCtxSynchronize();
  if (rc != CUDA_SUCCESS) {
    std::fprintf(stderr, "graph execution failed: %d\n", rc);
    std::exit(1);
  }
  *exec_out = exec;
  *dptr = params.dptr;
  return Drv(CUDA_SUCCESS);
}

Attempt RuntimeGraph(uint64_t bytes, bool with_free, cudaGraphExec_t* exec_out, void** dptr, cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  RT(cudaGraphCreate(&graph, 0));
  cudaMemAllocNodeParams params{};
  params.poolProps.allocType = cudaMemAllocationTypePinned;
  params.poolProps.location.type = cudaMemLocationTypeDevice;
  params.poolProps.location.id = 0;
  params.bytesize = bytes;
  cudaGraphNode_t alloc_node = nullptr;
  cudaError_t rc = cudaGraphAddMemAllocNode(&alloc_node, graph, nullptr, 0, &params);
  if (rc != cudaSuccess) {
    RT(cudaGraphDestroy(graph));
    return Rt(rc, "build");
  }
  if (with_free) {
    cudaGraphNode_t free_node = nullptr;
    RT(cudaGraphAddMemFreeNode(&free_node, graph, &alloc_node, 1, params.dptr));
  }
  cudaGraphExec_t exec = nullptr;
  rc = InstantiateGraph(&exec, graph);
  RT(cudaGraphDestroy(graph));
  if (rc != cudaSuccess) return Rt(rc, "instantiate");
  rc = cudaGraphLaunch(exec, stream);
  if (rc != cudaSuccess) {
    RT(cudaGraphExecDestroy(exec));
    return Rt(rc, "launch");
  }
  RT(cudaStreamSynchronize(stream));
  *exec_out = exec;
  *dptr = params.dptr;
  return Rt(cudaSuccess);
}

// Captures cudaMallocAsync(bytes) + cudaFreeAsync on `stream`, then instantiates and launches.
Attempt CapturedGraph(uint64_t bytes, cudaStream_t stream) {
  RT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  void* p = nullptr;
  const cudaError_t alloc_rc = cudaMallocAsync(&p, bytes, stream);
  if (alloc_rc == cudaSuccess) RT(cudaFreeAsync(p, stream));
  cudaGraph_t graph = nullptr;
  const cudaError_t end_rc = cudaStreamEndCapture(stream, &graph);
  if (alloc_rc != cudaSuccess || end_rc != cudaSuccess) {
    if (graph != nullptr) RT(cudaGraphDestroy(graph));
    cudaGetLastError();
    return Rt(alloc_rc != cudaSuccess ? alloc_rc : end_rc, "capture");
  }
  cudaGraphExec_t exec = nullptr;
  cudaError_t rc = InstantiateGraph(&exec, graph);
  RT(cudaGraphDestroy(graph));
  if (rc != cudaSuccess) return Rt(rc, "instantiate");
  rc = cudaGraphLaunch(exec, stream);
  if (rc == cudaSuccess) RT(cudaStreamSynchronize(stream));
  RT(cudaGraphExecDestroy(exec));
  return Rt(rc, rc == cudaSuccess ? "call" : "launch");
}

std::map<std::string, Path> MakePaths() {
  std::map<std::string, Path> paths;
  // --- driver API ---
  {
    auto ptrs = std::make_shared<std::vector<CUdeviceptr>>();
    paths["cuMemAlloc_v2"] = {[ptrs](uint64_t n) {
                                CUdeviceptr p = 0;
                                const CUresult rc = cuMemAlloc_v2(&p, n);
                                if (rc == CUDA_SUCCESS) ptrs->push_back(p);
                                return Drv(rc);
                              },
                              [ptrs] {
                                for (CUdeviceptr p : *ptrs) DRV(cuMemFree_v2(p));
                                ptrs->clear();
                              }};
    auto pitched = std::make_shared<std::vector<CUdeviceptr>>();
    paths["cuMemAllocPitch_v2"] = {[pitched](uint64_t n) {
                                     CUdeviceptr p = 0;
                                     size_t pitch = 0;
                                     const CUresult rc = cuMemAllocPitch_v2(&p, &pitch, kMiB, n / kMiB, 4);
                                     if (rc == CUDA_SUCCESS) pitched->push_back(p);
                                     return Drv(rc);
                                   },
                                   [pitched] {
                                     for (CUdeviceptr p : *pitched) DRV(cuMemFree_v2(p));
                                     pitched->clear();
                                   }};
    auto managed = std::make_shared<std::vector<CUdeviceptr>>();
    paths["cuMemAllocManaged"] = {[managed](uint64_t n) {
                                    CUdeviceptr p = 0;
                                    const CUresult rc = cuMemAllocManaged(&p, n, CU_MEM_ATTACH_GLOBAL);
                                    if (rc == CUDA_SUCCESS) managed->push_back(p);
                                    return Drv(rc);
                                  },
                                  [managed] {
                                    for (CUdeviceptr p : *managed) DRV(cuMemFree_v2(p));
                                    managed->clear();
                                  }};
  }
  for (const bool ptsz : {false, true}) {
    auto ptrs = std::make_shared<std::vector<CUdeviceptr>>();
    paths[ptsz ? "cuMemAllocAsync_ptsz" : "cuMemAllocAsync"] = {
        [ptrs, ptsz](uint64_t n) {
          CUdeviceptr p = 0;
          const CUresult rc = ptsz ? cuMemAllocAsync_ptsz(&p, n, nullptr) : cuMemAllocAsync(&p, n, g_stream);
          if (rc == CUDA_SUCCESS) {
            ptrs->push_back(p);
            DRV(cuCtxSynchronize());
          }
          return Drv(rc);
        },
        [ptrs, ptsz] {
          CUmemoryPool pool = nullptr;
          DRV(cuDeviceGetDefaultMemPool(&pool, g_dev));
          FreePoolBlocks(ptrs.get(), pool, ptsz);
        }};
    auto pool = std::make_shared<CUmemoryPool>(nullptr);
    auto blocks = std::make_shared<std::vector<CUdeviceptr>>();
    paths[ptsz ? "cuMemAllocFromPoolAsync_ptsz" : "cuMemAllocFromPoolAsync"] = {
        [pool, blocks, ptsz](uint64_t n) {
          if (*pool == nullptr) *pool = NewDriverPool();
          CUdeviceptr p = 0;
          const CUresult rc = ptsz ? cuMemAllocFromPoolAsync_ptsz(&p, n, *pool, nullptr)
                                   : cuMemAllocFromPoolAsync(&p, n, *pool, g_stream);
          if (rc == CUDA_SUCCESS) {
            blocks->push_back(p);
            DRV(cuCtxSynchronize());
          }
          return Drv(rc);
        },
        [pool, blocks, ptsz] {
          if (*pool == nullptr) return;
          FreePoolBlocks(blocks.get(), *pool, ptsz);
          DRV(cuMemPoolDestroy(*pool));
          *pool = nullptr;
        }};
  }
  {
    auto handles = std::make_shared<std::vector<CUmemGenericAllocationHandle>>();
    paths["cuMemCreate"] = {[handles](uint64_t n) {
                              CUmemAllocationProp prop{};
                              prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
                              prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
                              prop.location.id = g_dev;
                              size_t granularity = 0;
                              DRV(cuMemGetAllocationGranularity(&granularity, &prop,
                                                                CU_MEM_ALLOC_GRANULARITY_MINIMUM));
                              if (n % granularity != 0) {
                                std::fprintf(stderr, "step %llu is not a multiple of the granularity %zu\n",
                                             static_cast<unsigned long long>(n), granularity);
                                std::exit(1);
                              }
                              CUmemGenericAllocationHandle h = 0;
                              const CUresult rc = cuMemCreate(&h, n, &prop, 0);
                              if (rc == CUDA_SUCCESS) handles->push_back(h);
                              return Drv(rc);
                            },
                            [handles] {
                              for (auto h : *handles) DRV(cuMemRelease(h));
                              handles->clear();
                            }};
    auto arrays = std::make_shared<std::vector<CUarray>>();
    auto release_arrays = [arrays] {
      for (CUarray a : *arrays) DRV(cuArrayDestroy(a));
      arrays->clear();
    };
    // 2D: 4096 x (n / 16 KiB) floats; 3D: 256 x 256 x (n / 256 KiB) floats.
    paths["cuArrayCreate_v2"] = {[arrays](uint64_t n) {
                                   CUDA_ARRAY_DESCRIPTOR d{};
                                   d.Width = 4096;
                                   d.Height = n / (4096 * 4);
                                   d.Format = CU_AD_FORMAT_FLOAT;
                                   d.NumChannels = 1;
                                   CUarray a = nullptr;
                                   const CUresult rc = cuArrayCreate_v2(&a, &d);
                                   if (rc == CUDA_SUCCESS) arrays->push_back(a);
                                   return Drv(rc);
                                 },
                                 release_arrays};
    paths["cuArray3DCreate_v2"] = {[arrays](uint64_t n) {
                                     CUDA_ARRAY3D_DESCRIPTOR d{};
                                     d.Width = 256;
                                     d.Height = 256;
                                     d.Depth = n / (256 * 256 * 4);
                                     d.Format = CU_AD_FORMAT_FLOAT;
                                     d.NumChannels = 1;
                                     CUarray a = nullptr;
                                     const CUresult rc = cuArray3DCreate_v2(&a, &d);
                                     if (rc == CUDA_SUCCESS) arrays->push_back(a);
                                     return Drv(rc);
                                   },
                                   release_arrays};
    auto mipmaps = std::make_shared<std::vector<CUmipmappedArray>>();
    // 2 levels of 4096 x (n / 16 KiB) floats: 1.25 steps each.
    paths["cuMipmappedArrayCreate"] = {[mipmaps](uint64_t n) {
                                         CUDA_ARRAY3D_DESCRIPTOR d{};
                                         d.Width = 4096;
                                         d.Height = n / (4096 * 4);
                                         d.Format = CU_AD_FORMAT_FLOAT;
                                         d.NumChannels = 1;
                                         CUmipmappedArray m = nullptr;
                                         const CUresult rc = cuMipmappedArrayCreate(&m, &d, 2);
                                         if (rc == CUDA_SUCCESS) mipmaps->push_back(m);
                                         return Drv(rc);
                                       },
                                       [mipmaps] {
                                         for (auto m : *mipmaps) DRV(cuMipmappedArrayDestroy(m));
                                         mipmaps->clear();
                                       },
                                       false, false, 1.25};
  }
  for (const bool ptsz : {false, true}) {
    // Each step: a new graph whose allocation is not freed inside it, so it stays allocated.
    struct Held {
      std::vector<CUgraphExec> execs;
      std::vector<CUdeviceptr> ptrs;
    };
    auto held = std::make_shared<Held>();
    paths[ptsz ? "cuGraphLaunch_ptsz" : "cuGraphAddMemAllocNode"] = {
        [held, ptsz](uint64_t n) {
          CUgraphExec exec = nullptr;
          CUdeviceptr p = 0;
          const Attempt a = DriverGraph(n, false, ptsz, &exec, &p);
          if (a.code == 0) held->execs.push_back(exec), held->ptrs.push_back(p);
          return a;
        },
        [held] {
          for (CUdeviceptr p : held->ptrs) DRV(cuMemFreeAsync(p, g_stream));
          DRV(cuCtxSynchronize());
          for (CUgraphExec e : held->execs) DRV(cuGraphExecDestroy(e));
          held->execs.clear();
          held->ptrs.clear();
          DRV(cuDeviceGraphMemTrim(g_dev));
        },
        true};
  }
  paths["cuGraphAddMemAllocNode_huge"] = {[](uint64_t n) {
                                            CUgraphExec exec = nullptr;
                                            CUdeviceptr p = 0;
                                            const Attempt a = DriverGraph(n, true, false, &exec, &p);
                                            if (a.code == 0) DRV(cuGraphExecDestroy(exec));
                                            return a;
                                          },
                                          [] { DRV(cuDeviceGraphMemTrim(g_dev)); }, true, true};

  // --- runtime API ---
  {
    auto ptrs = std::make_shared<std::vector<void*>>();
    auto release = [ptrs] {
      for (void* p : *ptrs) RT(cudaFree(p));
      ptrs->clear();
    };
    paths["cudaMalloc"] = {[ptrs](uint64_t n) {
                             void* p = nullptr;
                             const cudaError_t rc = cudaMalloc(&p, n);
                             if (rc == cudaSuccess) ptrs->push_back(p);
                             return Rt(rc);
                           },
                           release};
    paths["cudaMallocPitch"] = {[ptrs](uint64_t n) {
                                  void* p = nullptr;
                                  size_t pitch = 0;
                                  const cudaError_t rc = cudaMallocPitch(&p, &pitch, kMiB, n / kMiB);
                                  if (rc == cudaSuccess) ptrs->push_back(p);
                                  return Rt(rc);
                                },
                                release};
    paths["cudaMalloc3D"] = {[ptrs](uint64_t n) {
                               cudaPitchedPtr pp{};
                               const cudaError_t rc = cudaMalloc3D(&pp, make_cudaExtent(kMiB, 8, n / (8 * kMiB)));
                               if (rc == cudaSuccess) ptrs->push_back(pp.ptr);
                               return Rt(rc);
                             },
                             release};
    paths["cudaMallocManaged"] = {[ptrs](uint64_t n) {
                                    void* p = nullptr;
                                    const cudaError_t rc = cudaMallocManaged(&p, n, cudaMemAttachGlobal);
                                    if (rc == cudaSuccess) ptrs->push_back(p);
                                    return Rt(rc);
                                  },
                                  release};
  }
  {
    auto ptrs = std::make_shared<std::vector<void*>>();
    paths["cudaMallocAsync"] = {[ptrs](uint64_t n) {
                                  void* p = nullptr;
                                  const cudaError_t rc = cudaMallocAsync(&p, n, reinterpret_cast<cudaStream_t>(g_stream));
                                  if (rc == cudaSuccess) {
            ptrs->push_back(p);
            RT(cudaDeviceSynchronize());
          }
                                  return Rt(rc);
                                },
                                [ptrs] {
                                  for (void* p : *ptrs) RT(cudaFreeAsync(p, reinterpret_cast<cudaStream_t>(g_stream)));
                                  ptrs->clear();
                                  RT(cudaDeviceSynchronize());
                                  cudaMemPool_t pool = nullptr;
                                  RT(cudaDeviceGetDefaultMemPool(&pool, 0));
                                  RT(cudaMemPoolTrimTo(pool, 0));
                                }};
    auto pool = std::make_shared<cudaMemPool_t>(nullptr);
    auto blocks = std::make_shared<std::vector<void*>>();
    paths["cudaMallocFromPoolAsync"] = {
        [pool, blocks](uint64_t n) {
          if (*pool == nullptr) {
            cudaMemPoolProps props{};
            props.allocType = cudaMemAllocationTypePinned;
            props.handleTypes = cudaMemHandleTypeNone;
            props.location.type = cudaMemLocationTypeDevice;
            props.location.id = 0;
            RT(cudaMemPoolCreate(pool.get(), &props));
          }
          void* p = nullptr;
          const cudaError_t rc = cudaMallocFromPoolAsync(&p, n, *pool, reinterpret_cast<cudaStream_t>(g_stream));
          if (rc == cudaSuccess) {
            blocks->push_back(p);
            RT(cudaDeviceSynchronize());
          }
          return Rt(rc);
        },
        [pool, blocks] {
          if (*pool == nullptr) return;
          for (void* p : *blocks) RT(cudaFreeAsync(p, reinterpret_cast<cudaStream_t>(g_stream)));
          blocks->clear();
          RT(cudaDeviceSynchronize());
          RT(cudaMemPoolTrimTo(*pool, 0));
          RT(cudaMemPoolDestroy(*pool));
          *pool = nullptr;
        }};
  }
  {
    struct Held {
      std::vector<cudaGraphExec_t> execs;
      std::vector<void*> ptrs;
    };
    auto held = std::make_shared<Held>();
    paths["cudaGraphAddMemAllocNode"] = {
        [held](uint64_t n) {
          cudaGraphExec_t exec = nullptr;
          void* p = nullptr;
          const Attempt a = RuntimeGraph(n, false, &exec, &p, reinterpret_cast<cudaStream_t>(g_stream));
          if (a.code == 0) held->execs.push_back(exec), held->ptrs.push_back(p);
          return a;
        },
        [held] {
          for (void* p : held->ptrs) RT(cudaFreeAsync(p, reinterpret_cast<cudaStream_t>(g_stream)));
          RT(cudaDeviceSynchronize());
          for (cudaGraphExec_t e : held->execs) RT(cudaGraphExecDestroy(e));
          held->execs.clear();
          held->ptrs.clear();
          RT(cudaDeviceGraphMemTrim(0));
        },
        true};
    paths["cudaGraphAddMemAllocNode_huge"] = {[](uint64_t n) {
                                                cudaGraphExec_t exec = nullptr;
                                                void* p = nullptr;
                                                const Attempt a = RuntimeGraph(
                                                    n, true, &exec, &p, reinterpret_cast<cudaStream_t>(g_stream));
                                                if (a.code == 0) RT(cudaGraphExecDestroy(exec));
                                                return a;
                                              },
                                              [] { RT(cudaDeviceGraphMemTrim(0)); }, true, true};
    paths["cudaStreamCapture_huge"] = {[](uint64_t n) {
                                         return CapturedGraph(n, reinterpret_cast<cudaStream_t>(g_stream));
                                       },
                                       [] { RT(cudaDeviceGraphMemTrim(0)); }, true, true};
  }
  return paths;
}

void Init() {
  RT(cudaSetDevice(0));
  RT(cudaFree(nullptr));  // creates the primary context and makes it current
  DRV(cuCtxGetDevice(&g_dev));
  DRV(cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING));
}

int RunPath(const std::string& name, Path& path, const Settings& s) {
  Init();
  Attempt last;
  uint64_t obtained = 0;
  bool refused = false;
  const char* stage = "cap";
  if (path.huge) {
    last = path.step(2 * s.limit);
    refused = last.code != 0;
    if (!refused) obtained = 2 * s.limit;
    stage = refused ? last.stage : "cap";
  } else {
    while (obtained + s.step <= s.cap) {
      last = path.step(s.step);
      if (last.code != 0) {
        refused = true;
        stage = last.stage;
        break;
      }
      obtained += static_cast<uint64_t>(s.step * path.scale);
    }
  }
  usleep(s.hold_ms * 1000);
  path.release();
  const bool oom = refused && last.code == 2;  // CUDA_ERROR_OUT_OF_MEMORY == cudaErrorMemoryAllocation == 2
  const bool graph_stage_ok = !path.graph || std::strcmp(stage, "instantiate") == 0 || std::strcmp(stage, "launch") == 0;
  const bool pass = oom && obtained <= s.limit && graph_stage_ok;
  std::printf("result path=%s refused=%s code=%d code_name=%s stage=%s obtained_bytes=%llu obtained_mib=%.0f "
              "limit_bytes=%llu verdict=%s\n",
              name.c_str(), refused ? "yes" : "no", last.code, CodeName(last).c_str(), stage,
              static_cast<unsigned long long>(obtained), obtained / double(kMiB),
              static_cast<unsigned long long>(s.limit), pass ? "PASS" : "FAIL");
  DRV(cuStreamDestroy(g_stream));
  return 0;
}

int RunPinned(const Settings& s) {
  Init();
  void* host1 = nullptr;
  void* host2 = nullptr;
  const cudaError_t rc1 = cudaMallocHost(&host1, 1024 * kMiB);
  const CUresult rc2 = cuMemHostAlloc(&host2, 1024 * kMiB, CU_MEMHOSTALLOC_PORTABLE);
  const bool host_ok = rc1 == cudaSuccess && rc2 == CUDA_SUCCESS;
  std::vector<void*> device;
  cudaError_t rc = cudaSuccess;
  uint64_t obtained = 0;
  while (obtained + s.step <= s.cap) {
    void* p = nullptr;
    rc = cudaMalloc(&p, s.step);
    if (rc != cudaSuccess) {
      cudaGetLastError();
      break;
    }
    device.push_back(p);
    obtained += s.step;
  }
  usleep(s.hold_ms * 1000);
  for (void* p : device) RT(cudaFree(p));
  if (host1 != nullptr) RT(cudaFreeHost(host1));
  if (host2 != nullptr) DRV(cuMemFreeHost(host2));
  const bool pass = host_ok && rc == cudaErrorMemoryAllocation && obtained <= s.limit;
  std::printf("result path=pinned host_ok=%s host_codes=%d,%d refused=%s code=%d code_name=%s obtained_bytes=%llu "
              "obtained_mib=%.0f limit_bytes=%llu verdict=%s\n",
              host_ok ? "yes" : "no", rc1, rc2, rc != cudaSuccess ? "yes" : "no", rc, cudaGetErrorName(rc),
              static_cast<unsigned long long>(obtained), obtained / double(kMiB),
              static_cast<unsigned long long>(s.limit), pass ? "PASS" : "FAIL");
  return 0;
}

int RunContext(const Settings& s) {
  RT(cudaSetDevice(0));
  RT(cudaFree(nullptr));
  std::printf("context_ready\n");
  std::fflush(stdout);
  usleep(s.hold_ms * 1000);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: paths_check --list | <path> [--limit-mib N] [--step-mib N] [--cap-mib N] | "
                         "pinned | context [--hold-ms N]\n");
    return 2;
  }
  const std::string what = argv[1];
  Settings s;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const uint64_t v = std::strtoull(argv[i + 1], nullptr, 10);
    if (flag == "--limit-mib") s.limit = v * kMiB;
    else if (flag == "--step-mib") s.step = v * kMiB;
    else if (flag == "--cap-mib") s.cap = v * kMiB;
    else if (flag == "--hold-ms") s.hold_ms = static_cast<int>(v);
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  std::map<std::string, Path> paths = MakePaths();
  if (what == "--list") {
    for (const auto& [name, path] : paths) std::printf("%s\n", name.c_str());
    return 0;
  }
  if (what == "pinned") return RunPinned(s);
  if (what == "context") return RunContext(s);
  auto it = paths.find(what);
  if (it == paths.end()) {
    std::fprintf(stderr, "unknown path %s (see --list)\n", what.c_str());
    return 2;
  }
  return RunPath(what, it->second, s);
}
