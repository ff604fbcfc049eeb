// Shared by the spin-kernel programs of bench/compute (spin.cu, concurrency.cu, turn_probe.cu): the
// CUDA return code check, the kernel that spins for a number of clock64() cycles, launched with one
// block per SM on a non-blocking stream (Gpu, Setup, Launch), the spin clock's rate (CyclesPerUs),
// the kernel of fixed work and its rate (WorkKernel, IterationsPerUs) and a CLOCK_MONOTONIC
// reading in seconds.
#pragma once

#include <cuda_runtime.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

// Every CUDA call is checked: a failure prints the call, the place and the error, and exits 2.
#define CHECK(call) CheckCuda((call), #call, __FILE__, __LINE__)

static inline void CheckCuda(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return;
  fprintf(stderr, "%s: %s failed at %s:%d: %s (%s)\n", program_invocation_short_name, call, file, line,
          cudaGetErrorName(err), cudaGetErrorString(err));
  exit(2);
}

__global__ void SpinKernel(long long cycles, unsigned long long* sink) {
  const long long start = clock64();
  long long now = start;
  while (now - start < cycles) now = clock64();
  if (threadIdx.x == 0 && now == 0) sink[blockIdx.x] = static_cast<unsigned long long>(now);  // never
}

// WorkKernel's chain of loads, walked by each block's first warp (the other warps skip it).
__device__ __forceinline__ void WorkChain(long long iterations, int step, unsigned long long* sink, long long* cycles) {
  __shared__ int ring[32];
  if (threadIdx.x < 32) {
    ring[threadIdx.x] = (threadIdx.x + step) & 31;
    __syncwarp();
    const long long start = clock64();
    int idx = threadIdx.x;
    for (long long i = 0; i < iterations; i += 8) {
#pragma unroll
      for (int k = 0; k < 8; ++k) idx = ring[idx];
    }
    if (idx < 0) sink[blockIdx.x] = 1;  // never: keeps the chain from being optimised away
    if (cycles != nullptr && threadIdx.x == 0) cycles[blockIdx.x] = clock64() - start;
  }
}

// A kernel of a fixed amount of work: the first warp of each block walks a chain of dependent
// shared-memory loads (each lane its own bank; `step` is 0 at run time, so every load reads the
// lane's own slot, which the compiler cannot know); the other warps wait at the barrier without
// issuing. It holds what SpinKernel holds (256 threads per block: 8 such kernels fill an H200's
// SMs) and, at one load in flight per warp every ~30 cycles, 8 of them on one SM do not slow each
// other down. Unlike SpinKernel, whose clock64() keeps counting while its context is switched out
// (a block preempted by another context's time slice resumes and finishes at once), it takes the
// GPU time it needs whoever else runs. With `cycles` set, block b writes the clock64() cycles its
// chain took to cycles[b] (the calibration).
__global__ void WorkKernel(long long iterations, int step, unsigned long long* sink, long long* cycles) {
  WorkChain(iterations, step, sink, cycles);
  __syncthreads();
}

// The start time a barrier's "go" file holds (CLOCK_MONOTONIC seconds), or -1 while it is absent
// or unreadable.
static inline double ReadGoTime(const char* path) {
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  double t = -1;
  if (fscanf(f, "%lf", &t) != 1) t = -1;
  fclose(f);
  return t;
}

static inline double Monotonic() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

struct Gpu {
  cudaStream_t stream = nullptr;
  int grid = 0;
  int block = 256;
  unsigned long long* sink = nullptr;
};

static void Launch(Gpu& g, long long cycles) {
  SpinKernel<<<g.grid, g.block, 0, g.stream>>>(cycles, g.sink);
  CHECK(cudaGetLastError());
}

static void Setup(Gpu& g) {
  int dev = 0;
  CHECK(cudaGetDevice(&dev));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  g.grid = sms;  // one block per SM, all resident at once: every SM spins for the whole kernel
  CHECK(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
  CHECK(cudaMalloc(&g.sink, sizeof(unsigned long long) * g.grid));
}

// Milliseconds between two recorded events.
static inline float Elapsed(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

// clock64() cycles per µs: the best of three probe kernels on g's stream.
static inline double CyclesPerUs(Gpu& g) {
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  const long long probe = 20000000;  // ~10 ms at 2 GHz
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    CHECK(cudaEventRecord(e0, g.stream));
    Launch(g, probe);
    CHECK(cudaEventRecord(e1, g.stream));
    CHECK(cudaEventSynchronize(e1));
    const double rate = probe / (Elapsed(e0, e1) * 1000.0);
    if (rate > best) best = rate;
  }
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  return best;
}

// WorkKernel iterations per µs at the GPU's maximum SM clock (cudaDevAttrClockRate) and the
// fewest clock64() cycles an iteration took in any block of three probe kernels. Neither depends
// on other contexts (a block switched out or slowed by another context counts in its own
// reading only, and another block's is kept), so processes that start together size their
// kernels alike.
static inline double IterationsPerUs(Gpu& g) {
  int dev = 0, khz = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
  const long long probe = 16384;  // ~0.25 ms at ~30 cycles per load
  long long* cycles = nullptr;
  CHECK(cudaMalloc(&cycles, sizeof(long long) * g.grid));
  std::vector<long long> host(g.grid);
  long long least = 0;
  for (int i = 0; i < 3; ++i) {
    WorkKernel<<<g.grid, g.block, 0, g.stream>>>(probe, 0, g.sink, cycles);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(g.stream));
    CHECK(cudaMemcpy(host.data(), cycles, sizeof(long long) * g.grid, cudaMemcpyDeviceToHost));
    for (long long c : host) {
      if (c > 0 && (least == 0 || c < least)) least = c;
    }
  }
  CHECK(cudaFree(cycles));
  if (least == 0 || khz <= 0) {
    fprintf(stderr, "%s: the WorkKernel calibration read no cycles (clock %d kHz)\n", program_invocation_short_name,
            khz);
    exit(2);
  }
  return khz / 1000.0 * static_cast<double>(probe) / static_cast<double>(least);
}
