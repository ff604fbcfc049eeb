// Shared by the spin-kernel programs of bench/compute (spin.cu, concurrency.cu, turn_probe.cu): the
// CUDA return code check, the kernel that spins for a number of clock64() cycles, launched with one
// block per SM on a non-blocking stream (Gpu, Setup, Launch), the spin clock's rate (CyclesPerUs)
// and a CLOCK_MONOTONIC reading in seconds.
#pragma once

#include <cuda_runtime.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>

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
