// Real-GPU check, layers 2 and 3: a CUDA runtime program. The runtime dlopen()s libcuda.so.1,
// looks up cuGetProcAddress(_v2) with dlsym and gets every driver entry point from it.
// Prints deterministic results; run.sh compares them with and without libvgpu.so.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.h"

__global__ void Fill(float* out, int n, float scale) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = scale * static_cast<float>(i % 1013);
}

__global__ void Square(float* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = data[i] * data[i] * 1e-3f;
}

int main() {
  int count = 0;
  RT(cudaGetDeviceCount(&count));
  std::printf("devices visible: %d\n", count > 0 ? 1 : 0);
  size_t free_bytes = 0, total = 0;
  RT(cudaMemGetInfo(&free_bytes, &total));
  cudaDeviceProp prop{};
  RT(cudaGetDeviceProperties(&prop, 0));
  std::printf("cudaMemGetInfo total == totalGlobalMem: %s\n", total == prop.totalGlobalMem ? "yes" : "no");

  const int n = 1 << 22;
  float* d = nullptr;
  RT(cudaMalloc(&d, n * sizeof(float)));
  Fill<<<(n + 255) / 256, 256>>>(d, n, 0.5f);
  RT(cudaGetLastError());
  Square<<<(n + 255) / 256, 256>>>(d, n);
  RT(cudaGetLastError());
  std::vector<float> h(n);
  RT(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  double sum = 0;
  for (float v : h) sum += v;
  std::printf("kernels checksum %.4f\n", sum);

  // cudaMallocAsync, pitch and managed allocations, and a CUDA graph replay.
  cudaStream_t stream;
  RT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  float* a = nullptr;
  RT(cudaMallocAsync(&a, n * sizeof(float), stream));
  void* pitched = nullptr;
  size_t pitch = 0;
  RT(cudaMallocPitch(&pitched, &pitch, 1000, 100));
  float* managed = nullptr;
  RT(cudaMallocManaged(&managed, 1 << 20));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  RT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  Fill<<<(n + 255) / 256, 256, 0, stream>>>(a, n, 0.25f);
  Square<<<(n + 255) / 256, 256, 0, stream>>>(a, n);
  RT(cudaStreamEndCapture(stream, &graph));
  RT(InstantiateGraph(&exec, graph));
  for (int i = 0; i < 5; ++i) RT(cudaGraphLaunch(exec, stream));
  RT(cudaMemcpyAsync(h.data(), a, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  RT(cudaStreamSynchronize(stream));
  sum = 0;
  for (float v : h) sum += v;
  std::printf("graph checksum %.4f\n", sum);
  RT(cudaGraphExecDestroy(exec));
  RT(cudaGraphDestroy(graph));
  RT(cudaFreeAsync(a, stream));
  RT(cudaStreamSynchronize(stream));
  RT(cudaFree(pitched));
  RT(cudaFree(managed));
  RT(cudaFree(d));
  RT(cudaStreamDestroy(stream));
  std::printf("runtime api done\n");
  return 0;
}
