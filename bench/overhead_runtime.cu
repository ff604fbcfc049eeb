// Interposer overhead through the CUDA runtime API (cudaMalloc/cudaFree, <<<>>> launches), which
// reaches the driver through cuGetProcAddress. Built by tests/gpu/run.sh with nvcc on the GPU
// machine. Same usage and output format as overhead_driver.cc.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define RT_CHECK(expr)                                                                   \
  do {                                                                                   \
    cudaError_t rt_check_err_ = (expr);                                                  \
    if (rt_check_err_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,          \
                   cudaGetErrorString(rt_check_err_));                                   \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

__global__ void EmptyKernel() {}

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: overhead_runtime launch <count> | alloc <count> <bytes>\n");
    return 2;
  }
  const long count = std::strtol(argv[2], nullptr, 10);
  RT_CHECK(cudaFree(nullptr));  // create the context outside the timed region
  if (std::strcmp(argv[1], "launch") == 0) {
    cudaStream_t stream;
    RT_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (int i = 0; i < 1000; ++i) EmptyKernel<<<1, 32, 0, stream>>>();
    RT_CHECK(cudaGetLastError());
    RT_CHECK(cudaStreamSynchronize(stream));
    const auto start = Clock::now();
    for (long i = 0; i < count; ++i) EmptyKernel<<<1, 32, 0, stream>>>();
    RT_CHECK(cudaGetLastError());
    RT_CHECK(cudaStreamSynchronize(stream));
    std::printf("empty_kernel_launch_rate %.0f launches/s\n", static_cast<double>(count) / SecondsSince(start));
  } else if (std::strcmp(argv[1], "alloc") == 0 && argc == 4) {
    const size_t bytes = std::strtoull(argv[3], nullptr, 10);
    void* p = nullptr;
    for (int i = 0; i < 100; ++i) {
      RT_CHECK(cudaMalloc(&p, bytes));
      RT_CHECK(cudaFree(p));
    }
    const auto start = Clock::now();
    for (long i = 0; i < count; ++i) {
      RT_CHECK(cudaMalloc(&p, bytes));
      RT_CHECK(cudaFree(p));
    }
    std::printf("cudaMalloc_cudaFree_pair %.0f ns\n", 1e9 * SecondsSince(start) / static_cast<double>(count));
  } else {
    std::fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
  }
  return 0;
}
