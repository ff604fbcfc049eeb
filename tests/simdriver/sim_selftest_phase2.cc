// Self-test of the simulated driver, phase 2: stream-ordered pools, VMM (with a cross-process
// export/import), arrays and graphs (explicit and captured). TEST DOUBLE ONLY.
#include <unistd.h>

#include <cstring>

#include "sim_selftest.h"

using namespace simtest;

namespace {

uint64_t PoolAttr(CUmemoryPool pool, CUmemPool_attribute attr) {
  cuuint64_t value = 0;
  SIM_OK(cuMemPoolGetAttribute(pool, attr, &value));
  return value;
}

void TestPools() {
  const uint64_t base = FreeBytes();
  CUmemoryPool pool = nullptr;
  SIM_OK(cuDeviceGetDefaultMemPool(&pool, 0));
  CUmemoryPool current = nullptr;
  SIM_OK(cuDeviceGetMemPool(&current, 0));
  SIM_CHECK(current == pool);
  CUstream s = nullptr;
  SIM_OK(cuStreamCreate(&s, 0));
  CUdeviceptr a = 0, b = 0;
  SIM_OK(cuMemAllocAsync(&a, 1 * kMiB, s));
  SIM_CHECK(PoolAttr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 32 * kMiB);
  SIM_CHECK(PoolAttr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 1 * kMiB);
  SIM_CHECK(FreeBytes() == base - 32 * kMiB);
  SIM_OK(cuMemAllocAsync(&b, 40 * kMiB, s));  // grows by two chunks
  SIM_CHECK(PoolAttr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 64 * kMiB);
  SIM_OK(cuMemFreeAsync(b, s));
  SIM_CHECK(PoolAttr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 64 * kMiB);  // kept until a sync
  SIM_OK(cuStreamSynchronize(s));
  SIM_CHECK(PoolAttr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 32 * kMiB);  // threshold 0: keep used
  SIM_CHECK(PoolAttr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) == 64 * kMiB);
  SIM_CHECK(PoolAttr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH) == 41 * kMiB);
  SIM_OK(cuMemFreeAsync(a, s));
  SIM_CHECK_CU(cuMemFreeAsync(a, s), CUDA_ERROR_INVALID_VALUE);
  SIM_OK(cuStreamSynchronize(s));
  SIM_CHECK(PoolAttr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
  SIM_CHECK(FreeBytes() == base);
  // A release threshold keeps reservations across syncs until trimmed.
  cuuint64_t threshold = 64 * kMiB;
  SIM_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
  SIM_OK(cuMemAllocAsync(&a, 50 * kMiB, s));
  SIM_OK(cuMemFreeAsync(a, s));
  SIM_OK(cuStreamSynchronize(s));
  SIM_CHECK(PoolAttr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 64 * kMiB);
  SIM_CHECK(FreeBytes() == base - 64 * kMiB);
  SIM_OK(cuMemPoolTrimTo(pool, 0));
  SIM_CHECK(PoolAttr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
  // Fragmentation: a freed block leaves a hole that a larger block does not fit although the
  // unused reserve is as large, and a trim keeps every chunk a live block lies on.
  threshold = UINT64_MAX;
  SIM_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
  CUdeviceptr f[3] = {};
  for (CUdeviceptr& p : f) SIM_OK(cuMemAllocAsync(&p, 20 * kMiB, s));  // [0, 60) MiB: chunks 0 and 1
  SIM_CHECK(PoolAttr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 64 * kMiB);
  SIM_OK(cuMemFreeAsync(f[1], s));
  SIM_OK(cuStreamSynchronize(s));
  SIM_OK(cuMemPoolTrimTo(pool, 0));
  SIM_CHECK(PoolAttr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 64 * kMiB);
  SIM_CHECK(PoolAttr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 40 * kMiB);
  CUdeviceptr g = 0, h = 0;
  SIM_OK(cuMemAllocAsync(&g, 24 * kMiB, s));  // 24 MiB unused, but no 24 MiB piece: [60, 84) grows
  SIM_CHECK(g == f[2] + 20 * kMiB);
  SIM_CHECK(PoolAttr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 96 * kMiB);
  SIM_OK(cuMemAllocAsync(&h, 16 * kMiB, s));  // the hole holds this one
  SIM_CHECK(h == f[1]);
  SIM_CHECK(PoolAttr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 96 * kMiB);
  for (CUdeviceptr p : {f[0], f[2], g, h}) SIM_OK(cuMemFreeAsync(p, s));
  SIM_OK(cuStreamSynchronize(s));
  SIM_OK(cuMemPoolTrimTo(pool, 0));
  SIM_CHECK(PoolAttr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
  SIM_CHECK(FreeBytes() == base);
  threshold = 0;
  SIM_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
  // Explicit pools; pool OOM is CUDA_ERROR_OUT_OF_MEMORY.
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool mine = nullptr;
  SIM_OK(cuMemPoolCreate(&mine, &props));
  SIM_OK(cuMemAllocFromPoolAsync(&a, 3 * kMiB, mine, s));
  SIM_CHECK(FreeBytes() == base - 32 * kMiB);
  SIM_CHECK_CU(cuMemAllocFromPoolAsync(&b, 2 * base, mine, s), CUDA_ERROR_OUT_OF_MEMORY);
  SIM_OK(cuMemFree(a));  // cuMemFree accepts pool memory
  SIM_OK(cuMemPoolDestroy(mine));
  SIM_CHECK(FreeBytes() == base);
  SIM_CHECK_CU(cuMemPoolDestroy(pool), CUDA_ERROR_INVALID_VALUE);  // the default pool stays
  SIM_OK(cuStreamDestroy(s));
}

CUmemAllocationProp DeviceProp(int ordinal, bool shareable) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = ordinal;
  if (shareable) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

void TestVmm() {
  const uint64_t base = FreeBytes();
  CUmemAllocationProp prop = DeviceProp(0, true);
  size_t granularity = 0;
  SIM_OK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  SIM_CHECK(granularity == 2 * kMiB);
  CUmemGenericAllocationHandle handle = 0;
  SIM_CHECK_CU(cuMemCreate(&handle, 3 * kMiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  SIM_OK(cuMemCreate(&handle, 8 * kMiB, &prop, 0));
  SIM_CHECK(FreeBytes() == base - 8 * kMiB);
  CUdeviceptr va = 0;
  SIM_OK(cuMemAddressReserve(&va, 16 * kMiB, 0, 0, 0));
  SIM_CHECK(FreeBytes() == base - 8 * kMiB);  // address space is free
  SIM_OK(cuMemMap(va, 8 * kMiB, 0, handle, 0));
  SIM_CHECK_CU(cuMemMap(va, 8 * kMiB, 0, handle, 0), CUDA_ERROR_INVALID_VALUE);  // overlap
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  SIM_OK(cuMemSetAccess(va, 8 * kMiB, &access, 1));
  CUmemGenericAllocationHandle retained = 0;
  SIM_OK(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(va + 4096)));
  SIM_CHECK(retained == handle);
  CUmemAllocationProp got{};
  SIM_OK(cuMemGetAllocationPropertiesFromHandle(&got, handle));
  SIM_CHECK(got.location.id == 0 && got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CUdeviceptr range_base = 0;
  size_t range_size = 0;
  SIM_OK(cuMemGetAddressRange(&range_base, &range_size, va + 100));
  SIM_CHECK(range_base == va && range_size == 8 * kMiB);

  // Another process imports it: the charge stays with us, the importer sees the same size.
  int fd = -1;
  SIM_OK(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  SIM_CHECK(fd >= 0);
  SIM_CHECK(Wait(Spawn({"import", std::to_string(8 * kMiB)}, {}, nullptr, fd)) == 0);
  close(fd);
  SIM_CHECK(FreeBytes() == base - 8 * kMiB);

  SIM_OK(cuMemRelease(handle));    // the mapping and the retain still hold it
  SIM_OK(cuMemRelease(retained));
  SIM_CHECK(FreeBytes() == base - 8 * kMiB);
  SIM_CHECK_CU(cuMemAddressFree(va, 16 * kMiB), CUDA_ERROR_INVALID_VALUE);  // still mapped
  SIM_OK(cuMemUnmap(va, 8 * kMiB));
  SIM_CHECK(FreeBytes() == base);
  SIM_OK(cuMemAddressFree(va, 16 * kMiB));
  SIM_CHECK_CU(cuMemRelease(handle), CUDA_ERROR_INVALID_VALUE);
}

int ChildImport(uint64_t size) {
  SIM_OK(cuInit(0));
  CUcontext ctx = nullptr;
  SIM_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
  SIM_OK(cuCtxSetCurrent(ctx));
  CUmemGenericAllocationHandle handle = 0;
  SIM_OK(cuMemImportFromShareableHandle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(3)),
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  CUdeviceptr va = 0;
  SIM_OK(cuMemAddressReserve(&va, size, 0, 0, 0));
  SIM_OK(cuMemMap(va, size, 0, handle, 0));
  SIM_CHECK_CU(cuMemMap(va + size, 2 * kMiB, size, handle, 0), CUDA_ERROR_INVALID_VALUE);  // beyond the size
  SIM_OK(cuMemUnmap(va, size));
  SIM_OK(cuMemRelease(handle));
  SIM_OK(cuMemAddressFree(va, size));
  return 0;
}

void TestArrays() {
  const uint64_t base = FreeBytes();
  CUDA_ARRAY_DESCRIPTOR desc{};
  desc.Width = 1024;
  desc.Height = 1024;
  desc.Format = CU_AD_FORMAT_FLOAT;
  desc.NumChannels = 4;
  CUarray array = nullptr;
  SIM_OK(cuArrayCreate(&array, &desc));
  SIM_CHECK(FreeBytes() == base - 16 * kMiB);
  CUDA_ARRAY_DESCRIPTOR got{};
  SIM_OK(cuArrayGetDescriptor(&got, array));
  SIM_CHECK(got.Width == 1024 && got.Height == 1024 && got.Format == CU_AD_FORMAT_FLOAT && got.NumChannels == 4);
  SIM_OK(cuArrayDestroy(array));
  SIM_CHECK(FreeBytes() == base);
  CUDA_ARRAY3D_DESCRIPTOR desc3{};
  desc3.Width = 1000;  // 1000 x 1 x 3 x 2 ch x 2 B = 12000 B -> one granule
  desc3.Depth = 3;
  desc3.Format = CU_AD_FORMAT_HALF;
  desc3.NumChannels = 2;
  SIM_OK(cuArray3DCreate(&array, &desc3));
  SIM_CHECK(FreeBytes() == base - 2 * kMiB);
  SIM_OK(cuArrayDestroy(array));
  // Mipmaps: 2048^2 x 4 B = 16 MiB, + 4 MiB + 1 MiB = 21 MiB -> 22 MiB.
  desc3 = CUDA_ARRAY3D_DESCRIPTOR{};
  desc3.Width = 2048;
  desc3.Height = 2048;
  desc3.Format = CU_AD_FORMAT_UNSIGNED_INT8;
  desc3.NumChannels = 4;
  CUmipmappedArray mip = nullptr;
  SIM_OK(cuMipmappedArrayCreate(&mip, &desc3, 3));
  SIM_CHECK(FreeBytes() == base - 22 * kMiB);
  SIM_OK(cuMipmappedArrayDestroy(mip));
  SIM_CHECK(FreeBytes() == base);
  desc.Format = static_cast<CUarray_format>(0x7777);
  SIM_CHECK_CU(cuArrayCreate(&array, &desc), CUDA_ERROR_INVALID_VALUE);
}

std::vector<CUgraphNode> GraphNodes(CUgraph graph) {
  size_t count = 0;
  SIM_OK(cuGraphGetNodes(graph, nullptr, &count));
  std::vector<CUgraphNode> nodes(count);
  SIM_OK(cuGraphGetNodes(graph, nodes.data(), &count));
  SIM_CHECK(count == nodes.size());
  return nodes;
}

CUgraphNodeType NodeType(CUgraphNode node) {
  CUgraphNodeType type{};
  SIM_OK(cuGraphNodeGetType(node, &type));
  return type;
}

uint64_t GraphMem(CUgraphMem_attribute attr) {
  cuuint64_t value = 0;
  SIM_OK(cuDeviceGetGraphMemAttribute(0, attr, &value));
  return value;
}

void TestGraphs(CUfunction sleep_fn) {
  const uint64_t base = FreeBytes();
  CUstream s = nullptr;
  SIM_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  // Captured: two 10 ms kernels and a 10 MiB stream-ordered allocation.
  SIM_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  SIM_OK(cuStreamIsCapturing(s, &status));
  SIM_CHECK(status == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUdeviceptr p = 0;
  SIM_OK(cuMemAllocAsync(&p, 9 * kMiB, s));
  LaunchSleep(sleep_fn, s, 10000000);
  LaunchSleep(sleep_fn, s, 10000000);
  SIM_CHECK_CU(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph graph = nullptr;
  SIM_OK(cuStreamEndCapture(s, &graph));
  SIM_CHECK(FreeBytes() == base);  // capture runs nothing, allocates nothing
  // The capture made a mem-alloc node (device 0, pinned, the requested size) and two kernel nodes.
  std::vector<CUgraphNode> nodes = GraphNodes(graph);
  SIM_CHECK(nodes.size() == 3);
  SIM_CHECK(NodeType(nodes[0]) == CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  SIM_CHECK(NodeType(nodes[1]) == CU_GRAPH_NODE_TYPE_KERNEL && NodeType(nodes[2]) == CU_GRAPH_NODE_TYPE_KERNEL);
  CUDA_MEM_ALLOC_NODE_PARAMS got{};
  SIM_OK(cuGraphMemAllocNodeGetParams(nodes[0], &got));
  SIM_CHECK(got.bytesize == 9 * kMiB && got.dptr == p && got.accessDescCount == 0);
  SIM_CHECK(got.poolProps.allocType == CU_MEM_ALLOCATION_TYPE_PINNED);
  SIM_CHECK(got.poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE && got.poolProps.location.id == 0);
  SIM_CHECK_CU(cuGraphMemAllocNodeGetParams(nodes[1], &got), CUDA_ERROR_INVALID_VALUE);  // a kernel node
  // More slots than nodes: the rest are NULLed; fewer: that many are filled.
  CUgraphNode slots[4] = {nodes[0], nodes[0], nodes[0], nodes[0]};
  size_t count = 4;
  SIM_OK(cuGraphGetNodes(graph, slots, &count));
  SIM_CHECK(count == 3 && slots[2] == nodes[2] && slots[3] == nullptr);
  count = 2;
  SIM_OK(cuGraphGetNodes(graph, slots, &count));
  SIM_CHECK(count == 2 && slots[0] == nodes[0] && slots[1] == nodes[1]);
  SIM_CHECK_CU(cuGraphGetNodes(graph, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUgraphNodeType type{};
  SIM_CHECK_CU(cuGraphNodeGetType(nullptr, &type), CUDA_ERROR_INVALID_VALUE);
  SIM_CHECK_CU(cuStreamBeginCapture(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraphExec exec = nullptr;
  SIM_OK(cuGraphInstantiate(&exec, graph, 0));
  SIM_CHECK(FreeBytes() == base);
  const uint64_t t0 = NowNs();
  SIM_OK(cuGraphLaunch(exec, s));
  SIM_CHECK(FreeBytes() == base - 10 * kMiB);
  SIM_CHECK(GraphMem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 10 * kMiB);
  SIM_CHECK_CU(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  SIM_OK(cuStreamSynchronize(s));
  const uint64_t elapsed = NowNs() - t0;
  SIM_CHECK(elapsed >= 19000000 && elapsed < 50000000);
  SIM_OK(cuDeviceGraphMemTrim(0));  // idle: released, charged again by the next launch
  SIM_CHECK(FreeBytes() == base);
  SIM_OK(cuGraphLaunch(exec, s));
  SIM_CHECK(FreeBytes() == base - 10 * kMiB);
  SIM_OK(cuStreamSynchronize(s));
  SIM_OK(cuGraphExecDestroy(exec));
  SIM_CHECK(FreeBytes() == base);
  SIM_CHECK(GraphMem(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) == 10 * kMiB);
  SIM_OK(cuGraphDestroy(graph));

  // Built explicitly.
  SIM_OK(cuGraphCreate(&graph, 0));
  uint64_t ns = 5000000;
  void* params[] = {&ns};
  CUDA_KERNEL_NODE_PARAMS kernel{};
  kernel.func = sleep_fn;
  kernel.gridDimX = kernel.gridDimY = kernel.gridDimZ = 1;
  kernel.blockDimX = kernel.blockDimY = kernel.blockDimZ = 1;
  kernel.kernelParams = params;
  CUgraphNode node = nullptr;
  SIM_OK(cuGraphAddKernelNode(&node, graph, nullptr, 0, &kernel));
  CUDA_MEM_ALLOC_NODE_PARAMS alloc{};
  alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  alloc.poolProps.location.id = 0;
  alloc.bytesize = 4 * kMiB - 1000;  // charged as 4 MiB, reported as given
  CUmemAccessDesc access{};
  access.location = alloc.poolProps.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  alloc.accessDescs = &access;
  alloc.accessDescCount = 1;
  CUgraphNode alloc_node = nullptr;
  SIM_OK(cuGraphAddMemAllocNode(&alloc_node, graph, &node, 1, &alloc));
  SIM_CHECK(alloc.dptr != 0);
  CUgraphNode free_node = nullptr;
  SIM_OK(cuGraphAddMemFreeNode(&free_node, graph, &alloc_node, 1, alloc.dptr));
  nodes = GraphNodes(graph);
  SIM_CHECK(nodes.size() == 3 && nodes[0] == node && nodes[1] == alloc_node && nodes[2] == free_node);
  SIM_CHECK(NodeType(node) == CU_GRAPH_NODE_TYPE_KERNEL);
  SIM_CHECK(NodeType(alloc_node) == CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  SIM_CHECK(NodeType(free_node) == CU_GRAPH_NODE_TYPE_MEM_FREE);
  access = CUmemAccessDesc{};  // the node keeps its own copy
  got = CUDA_MEM_ALLOC_NODE_PARAMS{};
  SIM_OK(cuGraphMemAllocNodeGetParams(alloc_node, &got));
  SIM_CHECK(got.bytesize == 4 * kMiB - 1000 && got.dptr == alloc.dptr);
  SIM_CHECK(got.poolProps.allocType == CU_MEM_ALLOCATION_TYPE_PINNED);
  SIM_CHECK(got.poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE && got.poolProps.location.id == 0);
  SIM_CHECK(got.accessDescCount == 1 && got.accessDescs != nullptr && got.accessDescs != &access);
  SIM_CHECK(got.accessDescs[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  SIM_CHECK(got.accessDescs[0].location.type == CU_MEM_LOCATION_TYPE_DEVICE);
  CUDA_GRAPH_INSTANTIATE_PARAMS instantiate{};
  SIM_OK(cuGraphInstantiateWithParams(&exec, graph, &instantiate));
  SIM_CHECK(instantiate.result_out == CUDA_GRAPH_INSTANTIATE_SUCCESS);
  CUevent start = nullptr, stop = nullptr;
  SIM_OK(cuEventCreate(&start, 0));
  SIM_OK(cuEventCreate(&stop, 0));
  SIM_OK(cuEventRecord(start, s));
  SIM_OK(cuGraphLaunch(exec, s));
  SIM_OK(cuEventRecord(stop, s));
  SIM_CHECK(FreeBytes() == base - 4 * kMiB);
  SIM_OK(cuEventSynchronize(stop));
  float ms = 0;
  SIM_OK(cuEventElapsedTime(&ms, start, stop));
  SIM_CHECK(ms >= 4.9f && ms < 6.0f);
  SIM_OK(cuGraphExecDestroy(exec));
  SIM_OK(cuGraphDestroy(graph));
  SIM_CHECK(FreeBytes() == base);
  SIM_OK(cuEventDestroy(start));
  SIM_OK(cuEventDestroy(stop));
  SIM_OK(cuStreamDestroy(s));
}

}  // namespace

namespace simtest {

void RunPhase2(CUfunction sleep_fn) {
  TestPools();
  TestVmm();
  TestArrays();
  TestGraphs(sleep_fn);
  std::printf("sim_selftest: phase 2 passed\n");
}

int Phase2Child(const std::vector<std::string>& args) {
  if (args.at(0) == "import") return ChildImport(std::stoull(args.at(1)));
  Fail(__FILE__, __LINE__, "unknown child mode " + args.at(0));
}

}  // namespace simtest
