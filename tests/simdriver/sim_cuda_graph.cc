// TEST DOUBLE ONLY: CUDA graphs and stream capture in the simulated driver.
//
// Model: a graph is a list of nodes (dependencies are accepted and ignored). Launching an
// executable graph runs its kernel nodes back to back on the stream (one busy interval of the
// summed duration). Memory of mem-alloc nodes (each rounded to the granularity) is charged to the
// device at the first launch and kept until the executable graph is destroyed, or until
// cuDeviceGraphMemTrim finds it idle (a later launch charges it again).
#include <algorithm>

#include "sim_cuda_internal.h"

namespace vgpusim::cuda {
namespace {

GraphNode* AddNode(Graph* graph, GraphNode::Type type, CUgraphNode* out) {
  graph->nodes.push_back(std::make_unique<GraphNode>());
  GraphNode* node = graph->nodes.back().get();
  node->type = type;
  Rt().handles[node] = HandleType::kGraphNode;
  if (out != nullptr) *out = reinterpret_cast<CUgraphNode>(node);
  return node;
}

CUresult GraphArgs(CUgraphNode* out, CUgraph handle, const CUgraphNode* deps, size_t num_deps, Graph** graph) {
  if (out == nullptr || (num_deps > 0 && deps == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  *graph = Lookup<Graph>(handle, HandleType::kGraph);
  return *graph == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

// `params`: as given (cuGraphMemAllocNodeGetParams returns them with dptr filled in).
CUresult AddMemAlloc(Graph* graph, int physical, const CUDA_MEM_ALLOC_NODE_PARAMS& params, CUdeviceptr* dptr,
                     CUgraphNode* out) {
  if (params.bytesize == 0 || physical < 0 || (params.accessDescCount > 0 && params.accessDescs == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (graph->device >= 0 && graph->device != physical) return CUDA_ERROR_NOT_SUPPORTED;
  const uint64_t rounded = RoundUp(params.bytesize, Cfg().granularity);
  const CUdeviceptr base = ReserveAddress(physical, rounded, Cfg().granularity, false, false);
  if (base == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  graph->device = physical;
  GraphNode* node = AddNode(graph, GraphNode::Type::kMemAlloc, out);
  node->bytes = rounded;
  node->dptr = base;
  node->access.assign(params.accessDescs, params.accessDescs + params.accessDescCount);
  node->alloc = params;
  node->alloc.accessDescs = node->access.empty() ? nullptr : node->access.data();
  node->alloc.dptr = base;
  *dptr = base;
  return CUDA_SUCCESS;
}

CUresult AddKernel(CUgraphNode* out, CUgraph handle, const CUgraphNode* deps, size_t num_deps, CUfunction f,
                   void** params, void** extra) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  Graph* graph = nullptr;
  if (const CUresult rc = GraphArgs(out, handle, deps, num_deps, &graph); rc != CUDA_SUCCESS) return rc;
  const Function* function = Lookup<Function>(f, HandleType::kFunction);
  if (function == nullptr) return CUDA_ERROR_INVALID_VALUE;
  AddNode(graph, GraphNode::Type::kKernel, out)->duration_ns = KernelDuration(function, params, extra);
  return CUDA_SUCCESS;
}

CUresult Instantiate(CUgraphExec* exec_out, CUgraph handle) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  if (exec_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const Graph* graph = Lookup<Graph>(handle, HandleType::kGraph);
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* exec = NewHandle<GraphExec>(HandleType::kGraphExec);
  exec->device = graph->device;
  for (const auto& node : graph->nodes) {
    if (node->type == GraphNode::Type::kKernel) exec->kernels.push_back(node->duration_ns);
    if (node->type == GraphNode::Type::kMemAlloc) exec->mem_bytes += node->bytes;
  }
  *exec_out = reinterpret_cast<CUgraphExec>(exec);
  // VGPU_SIM_GRAPH_INSTANTIATE_MS: a large graph takes a while to instantiate, and the process's
  // other threads go on meanwhile (the lock is let go first).
  const uint64_t ns = Cfg().graph_instantiate_ns;
  api.lock().unlock();
  if (ns > 0) SleepUntil(NowNs() + ns);
  return CUDA_SUCCESS;
}

CUresult Launch(CUgraphExec handle, CUstream stream_handle, bool ptsz) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  GraphExec* exec = Lookup<GraphExec>(handle, HandleType::kGraphExec);
  if (exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* stream = nullptr;
  if (const CUresult rc = ResolveStream(stream_handle, ptsz, &stream); rc != CUDA_SUCCESS) return rc;
  if (stream->capture != nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (exec->mem_bytes > 0 && !exec->charged) {
    if (!State().TryCharge(exec->device, exec->mem_bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    exec->charged = true;
    Rt().graph_mem_used[exec->device] += exec->mem_bytes;
    Rt().graph_mem_high[exec->device] = std::max(Rt().graph_mem_high[exec->device], Rt().graph_mem_used[exec->device]);
  }
  uint64_t total = 0;
  for (uint64_t ns : exec->kernels) total += ns;
  exec->last_end_ns = Enqueue(stream, total);
  return CUDA_SUCCESS;
}

void ReleaseGraphMemory(GraphExec* exec) {
  if (!exec->charged) return;
  State().Uncharge(exec->device, exec->mem_bytes);
  Rt().graph_mem_used[exec->device] -= std::min(Rt().graph_mem_used[exec->device], exec->mem_bytes);
  exec->charged = false;
}

CUresult BeginCapture(CUstream handle, CUstreamCaptureMode mode, bool ptsz) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Stream* stream = nullptr;
  if (const CUresult rc = ResolveStream(handle, ptsz, &stream); rc != CUDA_SUCCESS) return rc;
  if (stream->kind == StreamKind::kLegacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (stream->capture != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  stream->capture = NewHandle<Graph>(HandleType::kGraph);
  return CUDA_SUCCESS;
}

CUresult EndCapture(CUstream handle, CUgraph* graph_out, bool ptsz) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  if (graph_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* stream = nullptr;
  if (const CUresult rc = ResolveStream(handle, ptsz, &stream); rc != CUDA_SUCCESS) return rc;
  if (stream->capture == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  *graph_out = reinterpret_cast<CUgraph>(stream->capture);
  stream->capture = nullptr;
  return CUDA_SUCCESS;
}

CUresult IsCapturing(CUstream handle, CUstreamCaptureStatus* status, bool ptsz) {
  Api api;
  if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* stream = nullptr;
  if (const CUresult rc = ResolveStream(handle, ptsz, &stream); rc != CUDA_SUCCESS) return rc;
  *status = stream->capture != nullptr ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

}  // namespace

void DestroyGraphExec(GraphExec* exec) {
  ReleaseGraphMemory(exec);
  DeleteHandle(exec);
}

CUresult CaptureKernel(Stream* stream, uint64_t duration_ns) {
  AddNode(stream->capture, GraphNode::Type::kKernel, nullptr)->duration_ns = duration_ns;
  return CUDA_SUCCESS;
}

CUresult CaptureMemAlloc(Stream* stream, uint64_t bytes, CUdeviceptr* out) {
  CUDA_MEM_ALLOC_NODE_PARAMS params{};
  params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  params.poolProps.location.id = Ordinal(stream->ctx->device);
  params.bytesize = bytes;
  return AddMemAlloc(stream->capture, stream->ctx->device, params, out, nullptr);
}

CUresult CaptureMemFree(Stream* stream, CUdeviceptr dptr) {
  if (dptr == 0) return CUDA_ERROR_INVALID_VALUE;
  AddNode(stream->capture, GraphNode::Type::kMemFree, nullptr)->dptr = dptr;
  return CUDA_SUCCESS;
}

}  // namespace vgpusim::cuda

using namespace vgpusim::cuda;

SIM_EXPORT CUresult cuGraphCreate(CUgraph* graph_out, unsigned int flags) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    if (graph_out == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    *graph_out = reinterpret_cast<CUgraph>(NewHandle<Graph>(HandleType::kGraph));
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuGraphDestroy(CUgraph handle) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    Graph* graph = Lookup<Graph>(handle, HandleType::kGraph);
    if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
    for (const auto& node : graph->nodes) {
      if (node->type == GraphNode::Type::kMemAlloc) ReleaseAddress(node->dptr);
      Rt().handles.erase(node.get());
    }
    DeleteHandle(graph);
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuGraphAddKernelNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t n,
                                         const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guarded([&] { return AddKernel(out, graph, deps, n, p->func, p->kernelParams, p->extra); });
}

SIM_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t n,
                                            const CUDA_KERNEL_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUfunction f = p->func != nullptr ? p->func : reinterpret_cast<CUfunction>(p->kern);
  return Guarded([&] { return AddKernel(out, graph, deps, n, f, p->kernelParams, p->extra); });
}

SIM_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode* out, CUgraph handle, const CUgraphNode* deps, size_t n,
                                           CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    Graph* graph = nullptr;
    if (const CUresult rc = GraphArgs(out, handle, deps, n, &graph); rc != CUDA_SUCCESS) return rc;
    if (params == nullptr || params->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    return AddMemAlloc(graph, Physical(params->poolProps.location.id), *params, &params->dptr, out);
  });
}

SIM_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode* out, CUgraph handle, const CUgraphNode* deps, size_t n,
                                          CUdeviceptr dptr) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    Graph* graph = nullptr;
    if (const CUresult rc = GraphArgs(out, handle, deps, n, &graph); rc != CUDA_SUCCESS) return rc;
    if (dptr == 0) return CUDA_ERROR_INVALID_VALUE;
    AddNode(graph, GraphNode::Type::kMemFree, out)->dptr = dptr;
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuGraphGetNodes(CUgraph handle, CUgraphNode* nodes, size_t* num_nodes) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    const Graph* graph = Lookup<Graph>(handle, HandleType::kGraph);
    if (graph == nullptr || num_nodes == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const size_t count = graph->nodes.size();
    if (nodes == nullptr) {
      *num_nodes = count;
      return CUDA_SUCCESS;
    }
    // As documented: fill *num_nodes entries, NULL the ones past the end, return how many were obtained.
    for (size_t i = 0; i < *num_nodes; ++i) {
      nodes[i] = i < count ? reinterpret_cast<CUgraphNode>(graph->nodes[i].get()) : nullptr;
    }
    *num_nodes = std::min(*num_nodes, count);
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuGraphNodeGetType(CUgraphNode handle, CUgraphNodeType* type) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    const GraphNode* node = Lookup<GraphNode>(handle, HandleType::kGraphNode);
    if (node == nullptr || type == nullptr) return CUDA_ERROR_INVALID_VALUE;
    switch (node->type) {
      case GraphNode::Type::kKernel: *type = CU_GRAPH_NODE_TYPE_KERNEL; break;
      case GraphNode::Type::kMemAlloc: *type = CU_GRAPH_NODE_TYPE_MEM_ALLOC; break;
      case GraphNode::Type::kMemFree: *type = CU_GRAPH_NODE_TYPE_MEM_FREE; break;
    }
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode handle, CUDA_MEM_ALLOC_NODE_PARAMS* params_out) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    const GraphNode* node = Lookup<GraphNode>(handle, HandleType::kGraphNode);
    if (node == nullptr || node->type != GraphNode::Type::kMemAlloc || params_out == nullptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    *params_out = node->alloc;  // accessDescs points at the node's copy, valid until the node goes
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long) {
  return Guarded([&] { return Instantiate(exec, graph); });
}
SIM_EXPORT CUresult cuGraphInstantiate(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log,
                                       size_t log_size) {
  if (error_node != nullptr) *error_node = nullptr;
  if (log != nullptr && log_size > 0) log[0] = '\0';
  return Guarded([&] { return Instantiate(exec, graph); });
}
SIM_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log,
                                          size_t log_size) {
  if (error_node != nullptr) *error_node = nullptr;
  if (log != nullptr && log_size > 0) log[0] = '\0';
  return Guarded([&] { return Instantiate(exec, graph); });
}
SIM_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph,
                                                 CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUresult rc = Guarded([&] { return Instantiate(exec, graph); });
  params->hErrNode_out = nullptr;
  params->result_out = rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  return rc;
}
SIM_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph graph,
                                                      CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUresult rc = Guarded([&] { return Instantiate(exec, graph); });
  params->hErrNode_out = nullptr;
  params->result_out = rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  return rc;
}

SIM_EXPORT CUresult cuGraphExecDestroy(CUgraphExec handle) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    GraphExec* exec = Lookup<GraphExec>(handle, HandleType::kGraphExec);
    if (exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
    DestroyGraphExec(exec);
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) { return Guarded([&] { return Launch(exec, s, false); }); }
SIM_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) { return Guarded([&] { return Launch(exec, s, true); }); }

SIM_EXPORT CUresult cuStreamBeginCapture(CUstream s) {
  return Guarded([&] { return BeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL, false); });
}
SIM_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream s) {
  return Guarded([&] { return BeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL, true); });
}
SIM_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  return Guarded([&] { return BeginCapture(s, mode, false); });
}
SIM_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) {
  return Guarded([&] { return BeginCapture(s, mode, true); });
}
SIM_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph* g) { return Guarded([&] { return EndCapture(s, g, false); }); }
SIM_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph* g) { return Guarded([&] { return EndCapture(s, g, true); }); }
SIM_EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* st) {
  return Guarded([&] { return IsCapturing(s, st, false); });
}
SIM_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus* st) {
  return Guarded([&] { return IsCapturing(s, st, true); });
}

SIM_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice dev) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    const int physical = Physical(dev);
    if (physical < 0) return CUDA_ERROR_INVALID_DEVICE;
    const uint64_t now = vgpusim::NowNs();
    for (const auto& [handle, type] : Rt().handles) {
      if (type != HandleType::kGraphExec) continue;
      auto* exec = static_cast<GraphExec*>(const_cast<void*>(handle));
      if (exec->device == physical && exec->last_end_ns <= now) ReleaseGraphMemory(exec);
    }
    return CUDA_SUCCESS;
  });
}

SIM_EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void* value) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    const int physical = Physical(dev);
    if (physical < 0) return CUDA_ERROR_INVALID_DEVICE;
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    auto* out = static_cast<cuuint64_t*>(value);
    switch (attr) {
      case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
      case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: *out = Rt().graph_mem_used[physical]; return CUDA_SUCCESS;
      case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
      case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: *out = Rt().graph_mem_high[physical]; return CUDA_SUCCESS;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
  });
}

SIM_EXPORT CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void* value) {
  return Guarded([&] {
    Api api;
    if (const CUresult rc = api.Check(); rc != CUDA_SUCCESS) return rc;
    const int physical = Physical(dev);
    if (physical < 0) return CUDA_ERROR_INVALID_DEVICE;
    if (value == nullptr || *static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
    if (attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    Rt().graph_mem_high[physical] = Rt().graph_mem_used[physical];
    return CUDA_SUCCESS;
  });
}
