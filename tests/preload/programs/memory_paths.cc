// One device-allocation path of the driver API, filled until refused, twice.
//
//   memory_paths <mode> [--huge-mib N]
//
// mode: alloc alloc_v1 alloc_gpa alloc_dlsym pitch managed async async_ptsz pool pool_ptsz vmm
//       array array3d mipmap graph graph_ptsz graph_v10000 graph_v11000 capture
//
// Round 1 allocates with the path until a call fails, then reports what the failing call
// returned and what the driver holds for the path ("charged": pool and graph reservations are
// read from the driver, the rest are sizes). The process then stops at hold point "round1"
// (memory_common.h), releases everything, fills again (round 2, which must get as far) and
// releases again. cuMemGetInfo's free figure is reported at each step.
// Graph modes first try one graph whose mem-alloc node asks for --huge-mib (default 4096).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <memory>
#include <string>
#include <vector>

#include "memory_common.h"

// The per-thread-stream entry points are declared by cuda.h only when the whole translation unit
// uses the per-thread default stream; declare the ones used here directly (driver ABI).
extern "C" {
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream);
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                              CUstream hStream);
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams);
}

namespace {

// The v1 ABI device pointer (cuda.h declares CUdeviceptr_v1 only for internal builds).
using DevicePtrV1 = unsigned int;

using memtest::kMiB;
using memtest::Report;

constexpr uint64_t kChunk = 64 * kMiB;

// One allocation path: Allocate() makes one allocation of AllocationSize() bytes and returns
// the driver's result; ReleaseAll() frees everything allocated so far and waits until the
// driver has given the memory back (stream/pool/graph semantics included).
class Path {
 public:
  virtual ~Path() = default;
  virtual uint64_t AllocationSize() const { return kChunk; }
  virtual CUresult Allocate() = 0;
  virtual void ReleaseAll() = 0;
  // Bytes the driver holds for this path right now.
  virtual uint64_t Charged() const { return count_ * AllocationSize(); }
  // Refusals are expected at one stage only for most paths; graphs report theirs.
  virtual const char* RefusedAt() const { return "call"; }
  int count() const { return count_; }

 protected:
  int count_ = 0;  // live allocations
};

class PlainAlloc : public Path {
 public:
  enum class Via { kExported, kV1, kProcAddress, kDlsym };
  explicit PlainAlloc(Via via) : via_(via) {
    if (via == Via::kV1) {
      void* alloc = nullptr;
      void* free = nullptr;
      CHECK_CU(cuGetProcAddress("cuMemAlloc", &alloc, 2000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr));
      CHECK_CU(cuGetProcAddress("cuMemFree", &free, 2000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr));
      alloc_v1_ = reinterpret_cast<AllocV1>(alloc);
      free_v1_ = reinterpret_cast<FreeV1>(free);
    } else if (via == Via::kProcAddress) {
      void* alloc = nullptr;
      void* free = nullptr;
      CHECK_CU(cuGetProcAddress("cuMemAlloc", &alloc, 13000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr));
      CHECK_CU(cuGetProcAddress("cuMemFree", &free, 13000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr));
      alloc_ = reinterpret_cast<PFN_cuMemAlloc_v3020>(alloc);
      free_ = reinterpret_cast<PFN_cuMemFree_v3020>(free);
    } else if (via == Via::kDlsym) {
      void* lib = dlopen("libcuda.so.1", RTLD_NOW);
      CHECK(lib != nullptr);
      alloc_ = reinterpret_cast<PFN_cuMemAlloc_v3020>(dlsym(lib, "cuMemAlloc_v2"));
      free_ = reinterpret_cast<PFN_cuMemFree_v3020>(dlsym(lib, "cuMemFree_v2"));
      CHECK(alloc_ != nullptr && free_ != nullptr);
    }
  }
  CUresult Allocate() override {
    CUresult rc;
    if (via_ == Via::kV1) {
      DevicePtrV1 p = 0;
      rc = alloc_v1_(&p, static_cast<unsigned int>(kChunk));
      if (rc == CUDA_SUCCESS) ptrs_v1_.push_back(p);
    } else {
      CUdeviceptr p = 0;
      rc = alloc_(&p, kChunk);
      if (rc == CUDA_SUCCESS) ptrs_.push_back(p);
    }
    if (rc == CUDA_SUCCESS) ++count_;
    return rc;
  }
  void ReleaseAll() override {
    for (CUdeviceptr p : ptrs_) CHECK_CU(free_(p));
    for (DevicePtrV1 p : ptrs_v1_) CHECK_CU(free_v1_(p));
    ptrs_.clear();
    ptrs_v1_.clear();
    count_ = 0;
  }

 private:
  using AllocV1 = CUresult(CUDAAPI*)(DevicePtrV1*, unsigned int);
  using FreeV1 = CUresult(CUDAAPI*)(DevicePtrV1);
  Via via_;
  PFN_cuMemAlloc_v3020 alloc_ = &cuMemAlloc_v2;
  PFN_cuMemFree_v3020 free_ = &cuMemFree_v2;
  AllocV1 alloc_v1_ = nullptr;
  FreeV1 free_v1_ = nullptr;
  std::vector<CUdeviceptr> ptrs_;
  std::vector<DevicePtrV1> ptrs_v1_;
};

class PitchAlloc : public Path {
 public:
  CUresult Allocate() override {
    CUdeviceptr p = 0;
    size_t pitch = 0;
    const CUresult rc = cuMemAllocPitch(&p, &pitch, kRowBytes, kRows, 4);
    if (rc == CUDA_SUCCESS) {
      ptrs_.push_back(p);
      charged_ += static_cast<uint64_t>(pitch) * kRows;
      ++count_;
    }
    return rc;
  }
  void ReleaseAll() override {
    for (CUdeviceptr p : ptrs_) CHECK_CU(cuMemFree(p));
    ptrs_.clear();
    charged_ = 0;
    count_ = 0;
  }
  uint64_t Charged() const override { return charged_; }

 private:
  static constexpr size_t kRowBytes = 1 * kMiB;
  static constexpr size_t kRows = kChunk / kRowBytes;
  std::vector<CUdeviceptr> ptrs_;
  uint64_t charged_ = 0;
};

class ManagedAlloc : public Path {
 public:
  CUresult Allocate() override {
    CUdeviceptr p = 0;
    const CUresult rc = cuMemAllocManaged(&p, kChunk, CU_MEM_ATTACH_GLOBAL);
    if (rc == CUDA_SUCCESS) ptrs_.push_back(p), ++count_;
    return rc;
  }
  void ReleaseAll() override {
    for (CUdeviceptr p : ptrs_) CHECK_CU(cuMemFree(p));
    ptrs_.clear();
    count_ = 0;
  }

 private:
  std::vector<CUdeviceptr> ptrs_;
};

// cuMemAllocAsync (default pool) or cuMemAllocFromPoolAsync (a pool of our own), each with or
// without the per-thread-stream entry points. Pools keep the default release threshold (0), so
// a synchronize gives the freed reservation back to the device.
class PoolAlloc : public Path {
 public:
  PoolAlloc(bool custom_pool, bool ptsz) : ptsz_(ptsz) {
    CUdevice dev;
    CHECK_CU(cuCtxGetDevice(&dev));
    if (custom_pool) {
      CUmemPoolProps props{};
      props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
      props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      props.location.id = dev;
      CHECK_CU(cuMemPoolCreate(&pool_, &props));
      custom_ = true;
    } else {
      CHECK_CU(cuDeviceGetDefaultMemPool(&pool_, dev));
    }
    if (!ptsz_) CHECK_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
  }
  ~PoolAlloc() override {
    if (custom_) CHECK_CU(cuMemPoolDestroy(pool_));
    if (stream_ != nullptr) CHECK_CU(cuStreamDestroy(stream_));
  }
  CUresult Allocate() override {
    CUdeviceptr p = 0;
    CUresult rc;
    if (custom_) {
      rc = ptsz_ ? cuMemAllocFromPoolAsync_ptsz(&p, kChunk, pool_, nullptr)
                 : cuMemAllocFromPoolAsync(&p, kChunk, pool_, stream_);
    } else {
      rc = ptsz_ ? cuMemAllocAsync_ptsz(&p, kChunk, nullptr) : cuMemAllocAsync(&p, kChunk, stream_);
    }
    if (rc == CUDA_SUCCESS) ptrs_.push_back(p), ++count_;
    return rc;
  }
  void ReleaseAll() override {
    for (CUdeviceptr p : ptrs_) CHECK_CU(ptsz_ ? cuMemFreeAsync_ptsz(p, nullptr) : cuMemFreeAsync(p, stream_));
    ptrs_.clear();
    count_ = 0;
    CHECK_CU(cuCtxSynchronize());
  }
  uint64_t Charged() const override {
    cuuint64_t reserved = 0;
    CHECK_CU(cuMemPoolGetAttribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
    return reserved;
  }

 private:
  bool ptsz_;
  bool custom_ = false;
  CUmemoryPool pool_ = nullptr;
  CUstream stream_ = nullptr;
  std::vector<CUdeviceptr> ptrs_;
};

class VmmAlloc : public Path {
 public:
  VmmAlloc() {
    CUdevice dev;
    CHECK_CU(cuCtxGetDevice(&dev));
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop_.location.id = dev;
    size_t granularity = 0;
    CHECK_CU(cuMemGetAllocationGranularity(&granularity, &prop_, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CHECK(granularity > 0 && kChunk % granularity == 0);
  }
  CUresult Allocate() override {
    CUmemGenericAllocationHandle h = 0;
    const CUresult rc = cuMemCreate(&h, kChunk, &prop_, 0);
    if (rc == CUDA_SUCCESS) handles_.push_back(h), ++count_;
    return rc;
  }
  void ReleaseAll() override {
    for (CUmemGenericAllocationHandle h : handles_) CHECK_CU(cuMemRelease(h));
    handles_.clear();
    count_ = 0;
  }

 private:
  CUmemAllocationProp prop_{};
  std::vector<CUmemGenericAllocationHandle> handles_;
};

// 2D float array 4096x4096 (64 MiB), 3D float array 256^3 (64 MiB), or a mipmapped 4096x4096
// float array of 2 levels (64 + 16 MiB).
class ArrayAlloc : public Path {
 public:
  enum class Kind { k2D, k3D, kMipmapped };
  explicit ArrayAlloc(Kind kind) : kind_(kind) {}
  uint64_t AllocationSize() const override { return kind_ == Kind::kMipmapped ? 80 * kMiB : kChunk; }
  CUresult Allocate() override {
    CUresult rc;
    if (kind_ == Kind::k2D) {
      CUDA_ARRAY_DESCRIPTOR d{};
      d.Width = 4096;
      d.Height = 4096;
      d.Format = CU_AD_FORMAT_FLOAT;
      d.NumChannels = 1;
      CUarray a = nullptr;
      rc = cuArrayCreate(&a, &d);
      if (rc == CUDA_SUCCESS) arrays_.push_back(a);
    } else {
      CUDA_ARRAY3D_DESCRIPTOR d{};
      d.Format = CU_AD_FORMAT_FLOAT;
      d.NumChannels = 1;
      if (kind_ == Kind::k3D) {
        d.Width = d.Height = d.Depth = 256;
        CUarray a = nullptr;
        rc = cuArray3DCreate(&a, &d);
        if (rc == CUDA_SUCCESS) arrays_.push_back(a);
      } else {
        d.Width = d.Height = 4096;
        CUmipmappedArray m = nullptr;
        rc = cuMipmappedArrayCreate(&m, &d, 2);
        if (rc == CUDA_SUCCESS) mipmaps_.push_back(m);
      }
    }
    if (rc == CUDA_SUCCESS) ++count_;
    return rc;
  }
  void ReleaseAll() override {
    for (CUarray a : arrays_) CHECK_CU(cuArrayDestroy(a));
    for (CUmipmappedArray m : mipmaps_) CHECK_CU(cuMipmappedArrayDestroy(m));
    arrays_.clear();
    mipmaps_.clear();
    count_ = 0;
  }

 private:
  Kind kind_;
  std::vector<CUarray> arrays_;
  std::vector<CUmipmappedArray> mipmaps_;
};

// Each allocation is one executable graph holding a mem-alloc node (and the matching free node)
// of 64 MiB, launched once: the driver keeps the graph's memory while the executable graph
// exists. kCapture builds the graph by capturing cuMemAllocAsync/cuMemFreeAsync on a stream.
// kExplicitPtsz instantiates with cuGraphInstantiateWithParams_ptsz and launches with
// cuGraphLaunch_ptsz; kCapture instantiates with cuGraphInstantiateWithParams. kRuntime10000 and
// kRuntime11000 instantiate through the pointer cuGetProcAddress("cuGraphInstantiate", 10000 /
// 11000) returns (cuGraphInstantiate / cuGraphInstantiate_v2, the five-argument ABI), as the CUDA
// 11.x runtimes' cudaGraphInstantiate does (docs/interposition.md, "What each runtime asks for").
class GraphAlloc : public Path {
 public:
  enum class Kind { kExplicit, kExplicitPtsz, kCapture, kRuntime10000, kRuntime11000 };
  explicit GraphAlloc(Kind kind) : kind_(kind) {
    CHECK_CU(cuCtxGetDevice(&dev_));
    CHECK_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
    if (kind == Kind::kRuntime10000 || kind == Kind::kRuntime11000) {
      void* fn = nullptr;
      CHECK_CU(cuGetProcAddress("cuGraphInstantiate", &fn, kind == Kind::kRuntime10000 ? 10000 : 11000,
                                CU_GET_PROC_ADDRESS_DEFAULT, nullptr));
      instantiate_v11_ = reinterpret_cast<InstantiateV11>(fn);
    }
  }
  ~GraphAlloc() override { CHECK_CU(cuStreamDestroy(stream_)); }

  CUresult Allocate() override { return AllocateGraph(kChunk, true); }

  // Builds, instantiates and launches one graph of `bytes`; a refusal at any stage is returned
  // (and recorded in refused_at_). With keep == false the executable graph is destroyed after.
  CUresult AllocateGraph(uint64_t bytes, bool keep) {
    CUgraph graph = nullptr;
    CUresult rc = Build(bytes, &graph);
    if (rc != CUDA_SUCCESS) {
      refused_at_ = "build";
      return rc;
    }
    CUgraphExec exec = nullptr;
    rc = Instantiate(&exec, graph);
    CHECK_CU(cuGraphDestroy(graph));
    if (rc != CUDA_SUCCESS) {
      refused_at_ = "instantiate";
      return rc;
    }
    rc = kind_ == Kind::kExplicitPtsz ? cuGraphLaunch_ptsz(exec, nullptr) : cuGraphLaunch(exec, stream_);
    if (rc != CUDA_SUCCESS) {
      refused_at_ = "launch";
      CHECK_CU(cuGraphExecDestroy(exec));
      return rc;
    }
    CHECK_CU(cuCtxSynchronize());
    if (keep) {
      execs_.push_back(exec);
      ++count_;
    } else {
      CHECK_CU(cuGraphExecDestroy(exec));
    }
    return CUDA_SUCCESS;
  }

  void ReleaseAll() override {
    for (CUgraphExec e : execs_) CHECK_CU(cuGraphExecDestroy(e));
    execs_.clear();
    count_ = 0;
    CHECK_CU(cuDeviceGraphMemTrim(dev_));
  }
  uint64_t Charged() const override {
    cuuint64_t reserved = 0;
    CHECK_CU(cuDeviceGetGraphMemAttribute(dev_, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved));
    return reserved;
  }
  const char* RefusedAt() const override { return refused_at_; }

 private:
  // Each kind instantiates through another entry point: WithFlags, WithParams_ptsz, WithParams,
  // and the five-argument ABI of the 11.x runtimes.
  CUresult Instantiate(CUgraphExec* exec, CUgraph graph) {
    if (kind_ == Kind::kExplicit) return cuGraphInstantiateWithFlags(exec, graph, 0);
    if (instantiate_v11_ != nullptr) {
      CUgraphNode error_node = nullptr;
      char log[256];
      return instantiate_v11_(exec, graph, &error_node, log, sizeof(log));
    }
    CUDA_GRAPH_INSTANTIATE_PARAMS params{};
    params.hUploadStream = stream_;
    return kind_ == Kind::kExplicitPtsz ? cuGraphInstantiateWithParams_ptsz(exec, graph, &params)
                                        : cuGraphInstantiateWithParams(exec, graph, &params);
  }

  CUresult Build(uint64_t bytes, CUgraph* graph) {
    if (kind_ == Kind::kCapture) {
      CHECK_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
      CUdeviceptr p = 0;
      const CUresult rc = cuMemAllocAsync(&p, bytes, stream_);
      if (rc == CUDA_SUCCESS) CHECK_CU(cuMemFreeAsync(p, stream_));
      CHECK_CU(cuStreamEndCapture(stream_, graph));
      if (rc != CUDA_SUCCESS) CHECK_CU(cuGraphDestroy(*graph));
      return rc;
    }
    return memtest::GraphWithAllocation(dev_, bytes, graph);
  }

  // PFN_cuGraphInstantiate_v10000 / _v11000 (cudaTypedefs.h declares them for internal builds only).
  using InstantiateV11 = CUresult(CUDAAPI*)(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t);

  Kind kind_;
  CUdevice dev_ = 0;
  CUstream stream_ = nullptr;
  InstantiateV11 instantiate_v11_ = nullptr;
  std::vector<CUgraphExec> execs_;
  const char* refused_at_ = "none";
};

std::unique_ptr<Path> MakePath(const std::string& mode) {
  using Via = PlainAlloc::Via;
  if (mode == "alloc") return std::make_unique<PlainAlloc>(Via::kExported);
  if (mode == "alloc_v1") return std::make_unique<PlainAlloc>(Via::kV1);
  if (mode == "alloc_gpa") return std::make_unique<PlainAlloc>(Via::kProcAddress);
  if (mode == "alloc_dlsym") return std::make_unique<PlainAlloc>(Via::kDlsym);
  if (mode == "pitch") return std::make_unique<PitchAlloc>();
  if (mode == "managed") return std::make_unique<ManagedAlloc>();
  if (mode == "async") return std::make_unique<PoolAlloc>(false, false);
  if (mode == "async_ptsz") return std::make_unique<PoolAlloc>(false, true);
  if (mode == "pool") return std::make_unique<PoolAlloc>(true, false);
  if (mode == "pool_ptsz") return std::make_unique<PoolAlloc>(true, true);
  if (mode == "vmm") return std::make_unique<VmmAlloc>();
  if (mode == "array") return std::make_unique<ArrayAlloc>(ArrayAlloc::Kind::k2D);
  if (mode == "array3d") return std::make_unique<ArrayAlloc>(ArrayAlloc::Kind::k3D);
  if (mode == "mipmap") return std::make_unique<ArrayAlloc>(ArrayAlloc::Kind::kMipmapped);
  if (mode == "graph") return std::make_unique<GraphAlloc>(GraphAlloc::Kind::kExplicit);
  if (mode == "graph_ptsz") return std::make_unique<GraphAlloc>(GraphAlloc::Kind::kExplicitPtsz);
  if (mode == "capture") return std::make_unique<GraphAlloc>(GraphAlloc::Kind::kCapture);
  if (mode == "graph_v10000") return std::make_unique<GraphAlloc>(GraphAlloc::Kind::kRuntime10000);
  if (mode == "graph_v11000") return std::make_unique<GraphAlloc>(GraphAlloc::Kind::kRuntime11000);
  return nullptr;
}

// Allocates until a call fails (or kMaxSteps). Reports under "<round>_…": the count, the bytes
// the driver holds, the failing call's result and cuMemGetInfo's free just before and after it.
void Fill(Path& path, const std::string& round) {
  CUresult rc = CUDA_SUCCESS;
  uint64_t free_before = 0, free_after = 0;
  for (int step = 0; step < memtest::kMaxSteps; ++step) {
    free_before = memtest::FreeBytes();
    rc = path.Allocate();
    if (rc != CUDA_SUCCESS) break;
  }
  free_after = memtest::FreeBytes();
  Report((round + "_count").c_str(), path.count());
  Report((round + "_charged").c_str(), path.Charged());
  Report((round + "_refusal_code").c_str(), rc);
  memtest::ReportText((round + "_refused_at").c_str(), rc == CUDA_SUCCESS ? "never" : path.RefusedAt());
  Report((round + "_free_before_refusal").c_str(), free_before);
  Report((round + "_free_after_refusal").c_str(), free_after);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: memory_paths <mode> [--huge-mib N]\n");
    return 2;
  }
  const std::string mode = argv[1];
  uint64_t huge_mib = 4096;
  if (argc == 4 && std::string(argv[2]) == "--huge-mib") huge_mib = memtest::ArgU64(argv[3]);
  memtest::InitPrimaryContext(0);
  std::unique_ptr<Path> path = MakePath(mode);
  if (path == nullptr) {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  memtest::ReportText("mode", mode);
  Report("allocation_size", path->AllocationSize());
  Report("free_initial", memtest::FreeBytes());

  if (auto* graph = dynamic_cast<GraphAlloc*>(path.get())) {
    const uint64_t free_before = memtest::FreeBytes();
    const CUresult rc = graph->AllocateGraph(huge_mib * kMiB, false);
    Report("huge_graph_code", rc);
    memtest::ReportText("huge_graph_refused_at", rc == CUDA_SUCCESS ? "never" : graph->RefusedAt());
    graph->ReleaseAll();
    Report("huge_graph_free_before", free_before);
    Report("huge_graph_free_after", memtest::FreeBytes());
  }

  Fill(*path, "round1");
  memtest::HoldPoint("round1");
  path->ReleaseAll();
  Report("free_after_release", memtest::FreeBytes());
  Fill(*path, "round2");
  path->ReleaseAll();
  Report("free_final", memtest::FreeBytes());
  path.reset();
  std::printf("done\n");
  return 0;
}
