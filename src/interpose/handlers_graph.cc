// Graph memory-allocation nodes: the memory of a graph's allocation nodes is charged when the
// graph is instantiated (the driver reserves it for the executable graph at its first launch and
// keeps it until the executable is destroyed or trimmed), and returned when the executable graph
// is destroyed.
#include <cuda.h>

#include <vector>

#include "interpose/allocation_map.h"
#include "interpose/driver_imports.h"
#include "interpose/handlers.h"
#include "interpose/loader.h"
#include "interpose/memory_accounting.h"

namespace vgpu::hooks {
namespace {

using memory::AllocKind;
using memory::AllocRecord;
using memory::KeySpace;

struct GraphMemory {
  int ordinal = -1;
  uint64_t bytes = 0;
};

// Sum of the allocation nodes' sizes (top-level nodes; nested child graphs are not descended).
GraphMemory AllocationNodes(CUgraph graph) {
  GraphMemory memory;
  size_t count = 0;
  if (!g_cuda.cuGraphGetNodes || !g_cuda.cuGraphNodeGetType || !g_cuda.cuGraphMemAllocNodeGetParams ||
      g_cuda.cuGraphGetNodes(graph, nullptr, &count) != CUDA_SUCCESS || count == 0) {
    return memory;
  }
  std::vector<CUgraphNode> nodes(count);
  if (g_cuda.cuGraphGetNodes(graph, nodes.data(), &count) != CUDA_SUCCESS) return memory;
  for (size_t i = 0; i < count; ++i) {
    CUgraphNodeType type;
    if (g_cuda.cuGraphNodeGetType(nodes[i], &type) != CUDA_SUCCESS || type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) continue;
    CUDA_MEM_ALLOC_NODE_PARAMS params{};
    if (g_cuda.cuGraphMemAllocNodeGetParams(nodes[i], &params) != CUDA_SUCCESS) continue;
    memory.bytes += params.bytesize;
    memory.ordinal = params.poolProps.location.id;
  }
  return memory;
}

template <typename Instantiate>
CUresult ChargeGraph(CUgraphExec* exec, CUgraph graph, Instantiate instantiate) {
  if (!memory::Enabled() || exec == nullptr) return instantiate();
  const GraphMemory needed = AllocationNodes(graph);
  if (needed.bytes == 0) return instantiate();
  const int device = memory::DeviceForOrdinal(needed.ordinal);
  if (device < 0) return instantiate();
  // In flight while the graph is instantiated; NVML sees it once the driver reserves it, at
  // the first launch.
  if (!memory::ReserveUnseen(device, needed.bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult result = instantiate();
  if (result != CUDA_SUCCESS) {
    memory::Release(device, needed.bytes);
    memory::NoteInflight(device, -static_cast<int64_t>(needed.bytes));
    return result;
  }
  memory::Track(KeySpace::kGraphExec, reinterpret_cast<uint64_t>(*exec),
                AllocRecord{device, AllocKind::kGraph, needed.bytes, 0});
  memory::NoteGraphCharge(device, static_cast<int64_t>(needed.bytes));  // before it leaves flight
  memory::NoteInflight(device, -static_cast<int64_t>(needed.bytes));
  return result;
}

}  // namespace

CUresult hook_cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph, unsigned long long flags) {
  auto real = reinterpret_cast<Pfn_cuGraphInstantiateWithFlags>(RealCuda(kHook_cuGraphInstantiateWithFlags));
  if (real == nullptr) return MissingCudaEntry(kHook_cuGraphInstantiateWithFlags);
  return ChargeGraph(phGraphExec, hGraph, [&] { return real(phGraphExec, hGraph, flags); });
}

CUresult hook_cuGraphInstantiateWithParams(CUgraphExec* phGraphExec, CUgraph hGraph,
                                           CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  auto real = reinterpret_cast<Pfn_cuGraphInstantiateWithParams>(RealCuda(kHook_cuGraphInstantiateWithParams));
  if (real == nullptr) return MissingCudaEntry(kHook_cuGraphInstantiateWithParams);
  return ChargeGraph(phGraphExec, hGraph, [&] { return real(phGraphExec, hGraph, params); });
}

CUresult hook_cuGraphInstantiateWithParams_ptsz(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  auto real =
      reinterpret_cast<Pfn_cuGraphInstantiateWithParams_ptsz>(RealCuda(kHook_cuGraphInstantiateWithParams_ptsz));
  if (real == nullptr) return MissingCudaEntry(kHook_cuGraphInstantiateWithParams_ptsz);
  return ChargeGraph(phGraphExec, hGraph, [&] { return real(phGraphExec, hGraph, params); });
}

CUresult hook_cuGraphInstantiate(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode, char* logBuffer,
                                 size_t bufferSize) {
  auto real = RealCudaAs<Pfn_cuGraphInstantiate>(kHook_cuGraphInstantiate);
  if (real == nullptr) return MissingCudaEntry(kHook_cuGraphInstantiate);
  return ChargeGraph(phGraphExec, hGraph, [&] { return real(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize); });
}

CUresult hook_cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode,
                                    char* logBuffer, size_t bufferSize) {
  auto real = RealCudaAs<Pfn_cuGraphInstantiate_v2>(kHook_cuGraphInstantiate_v2);
  if (real == nullptr) return MissingCudaEntry(kHook_cuGraphInstantiate_v2);
  return ChargeGraph(phGraphExec, hGraph, [&] { return real(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize); });
}

CUresult hook_cuGraphExecDestroy(CUgraphExec hGraphExec) {
  auto real = reinterpret_cast<Pfn_cuGraphExecDestroy>(RealCuda(kHook_cuGraphExecDestroy));
  if (real == nullptr) return MissingCudaEntry(kHook_cuGraphExecDestroy);
  if (!memory::Enabled()) return real(hGraphExec);
  std::optional<AllocRecord> record = memory::Take(KeySpace::kGraphExec, reinterpret_cast<uint64_t>(hGraphExec));
  const CUresult result = real(hGraphExec);
  if (record) {
    if (result == CUDA_SUCCESS) {
      memory::Release(record->device, record->bytes);
      memory::NoteGraphCharge(record->device, -static_cast<int64_t>(record->bytes));
    } else {
      memory::Track(KeySpace::kGraphExec, reinterpret_cast<uint64_t>(hGraphExec), *record);
    }
  }
  return result;
}

}  // namespace vgpu::hooks
