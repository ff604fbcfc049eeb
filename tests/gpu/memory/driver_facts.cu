// Diagnostic (no library needed): what the driver adds to a process's NVML per-process figure,
// step by step, so that vgpu's admission can charge memory before it exists.
//
//   driver_facts [--kill-mib N]
//
// Prints one line per step: "fact <name> delta_mib=<NVML growth of this process> total_mib=<now>".
//   context        cuDevicePrimaryCtxRetain (the runtime's context)
//   small/large    cuMemAlloc of sizes below and above the 2 MiB granule (packing and rounding)
//   first-launch   the first launch of a kernel of another module (lazy loading)
//   async-setup    the first cuMemAllocAsync (the stream-ordered allocator's own memory)
//   second-context cuCtxCreate on the same device
//   kill           (first, before this process uses CUDA) a forked child holding N MiB is SIGKILLed: how long NVML still lists its
//                  memory after the kill, after the child became a zombie, and after it was reaped
// Every CUDA and NVML return code is checked (exit 2 on failure).
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(call)                                                                      \
  do {                                                                                \
    CUresult r_ = (call);                                                             \
    if (r_ != CUDA_SUCCESS) {                                                         \
      const char* s_ = nullptr;                                                       \
      cuGetErrorName(r_, &s_);                                                        \
      fprintf(stderr, "%s failed at line %d: %s\n", #call, __LINE__, s_ ? s_ : "?"); \
      exit(2);                                                                        \
    }                                                                                 \
  } while (0)
#define CR(call)                                                                                         \
  do {                                                                                                   \
    cudaError_t e_ = (call);                                                                             \
    if (e_ != cudaSuccess) {                                                                             \
      fprintf(stderr, "%s failed at line %d: %s\n", #call, __LINE__, cudaGetErrorString(e_));            \
      exit(2);                                                                                           \
    }                                                                                                    \
  } while (0)

__global__ void TouchA(int* p) { if (p) p[threadIdx.x] = 1; }
__global__ void TouchB(float* p, int n) { for (int i = threadIdx.x; i < n; i += blockDim.x) p[i] *= 2.0f; }

namespace {

struct ProcessInfo {
  unsigned int pid;
  unsigned long long used;
  unsigned int gi, ci;
};
using NvmlInit = int (*)();
using NvmlByIndex = int (*)(unsigned int, void**);
using NvmlProcs = int (*)(void*, unsigned int*, ProcessInfo*);
NvmlProcs g_procs = nullptr;
void* g_dev = nullptr;

void NvmlOpen() {
  void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (!h) { fprintf(stderr, "no libnvidia-ml.so.1\n"); exit(2); }
  auto init = reinterpret_cast<NvmlInit>(dlsym(h, "nvmlInit_v2"));
  auto by_index = reinterpret_cast<NvmlByIndex>(dlsym(h, "nvmlDeviceGetHandleByIndex_v2"));
  g_procs = reinterpret_cast<NvmlProcs>(dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3"));
  if (!init || !by_index || !g_procs || init() != 0 || by_index(0, &g_dev) != 0) {
    fprintf(stderr, "NVML unusable\n");
    exit(2);
  }
}

// NVML's per-process figure of `pid` on GPU 0 (0 when not listed).
long long NvmlUsed(int pid) {
  ProcessInfo infos[256];
  unsigned int count = 256;
  int rc = g_procs(g_dev, &count, infos);
  if (rc != 0) { fprintf(stderr, "nvmlDeviceGetComputeRunningProcesses_v3: %d\n", rc); exit(2); }
  for (unsigned int i = 0; i < count; ++i) if (static_cast<int>(infos[i].pid) == pid) return static_cast<long long>(infos[i].used);
  return 0;
}

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

long long g_last = 0;
void Fact(const char* name, const char* detail = "") {
  const long long now = NvmlUsed(getpid());
  printf("fact %-16s delta_mib=%8.3f total_mib=%8.1f %s\n", name, (now - g_last) / 1048576.0, now / 1048576.0, detail);
  fflush(stdout);
  g_last = now;
}

void AllocBatch(const char* name, size_t bytes, int count, std::vector<CUdeviceptr>* keep) {
  for (int i = 0; i < count; ++i) {
    CUdeviceptr p;
    CK(cuMemAlloc(&p, bytes));
    keep->push_back(p);
  }
  char detail[96];
  snprintf(detail, sizeof(detail), "(%d x %zu bytes = %.3f MiB requested)", count, bytes, count * bytes / 1048576.0);
  Fact(name, detail);
}

void KillFact(size_t mib) {
  int ready[2];
  if (pipe(ready) != 0) exit(2);
  pid_t child = fork();
  if (child == 0) {
    CR(cudaFree(nullptr));
    void* p = nullptr;
    CR(cudaMalloc(&p, mib << 20));
    CR(cudaMemset(p, 1, mib << 20));
    CR(cudaDeviceSynchronize());
    if (write(ready[1], "x", 1) != 1) _exit(3);
    pause();
    _exit(0);
  }
  close(ready[1]);  // the child's end only: EOF when the child dies before it is ready
  char c;
  if (read(ready[0], &c, 1) != 1) {
    fprintf(stderr, "kill fact: the child failed before it was ready\n");
    waitpid(child, nullptr, 0);
    exit(2);
  }
  close(ready[0]);
  const long long held = NvmlUsed(child);
  const double t0 = Now();
  kill(child, SIGKILL);
  double zombie_at = -1, gone_at = -1, reaped_at = -1;
  int status = 0;
  while (Now() - t0 < 10) {
    if (zombie_at < 0) {
      char path[64], buf[512] = {};
      snprintf(path, sizeof(path), "/proc/%d/stat", child);
      FILE* f = fopen(path, "r");
      if (f) {
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        const char* paren = strrchr(buf, ')');
        if (n > 0 && paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X')) zombie_at = Now() - t0;
      }
    }
    if (gone_at < 0 && NvmlUsed(child) == 0) gone_at = Now() - t0;
    if (zombie_at >= 0 && reaped_at < 0 && gone_at >= 0) {
      waitpid(child, &status, 0);
      reaped_at = Now() - t0;
      break;
    }
    usleep(200);
  }
  if (reaped_at < 0) waitpid(child, &status, 0);
  printf("fact kill              held_mib=%.1f zombie_after_ms=%.2f nvml_gone_after_ms=%.2f (child not reaped until NVML dropped it)\n",
         held / 1048576.0, zombie_at * 1e3, gone_at * 1e3);
  fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  size_t kill_mib = 4096;
  if (argc == 3 && strcmp(argv[1], "--kill-mib") == 0) kill_mib = strtoull(argv[2], nullptr, 10);
  NvmlOpen();
  // First, before this process initialises CUDA: a child forked after cuInit cannot use CUDA.
  KillFact(kill_mib);
  KillFact(kill_mib / 16);
  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  size_t granularity = 0;
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  printf("fact granularity      bytes=%zu\n", granularity);
  Fact("start");
  CUcontext primary;
  CK(cuDevicePrimaryCtxRetain(&primary, dev));
  CK(cuCtxSetCurrent(primary));
  Fact("context");
  std::vector<CUdeviceptr> keep;
  AllocBatch("small-512B", 512, 64, &keep);
  AllocBatch("small-4KiB", 4096, 64, &keep);
  AllocBatch("small-64KiB", 64 << 10, 32, &keep);
  AllocBatch("small-1MiB", 1 << 20, 8, &keep);
  AllocBatch("small-1.5MiB", 3 << 19, 4, &keep);
  AllocBatch("large-2MiB", 2 << 20, 4, &keep);
  AllocBatch("large-2MiB+1", (2 << 20) + 1, 4, &keep);
  AllocBatch("large-3MiB", 3 << 20, 4, &keep);
  AllocBatch("large-37.3MiB", static_cast<size_t>(37.3 * 1048576), 4, &keep);
  for (CUdeviceptr p : keep) CK(cuMemFree(p));
  Fact("freed-all");
  // The runtime's own first use (its module registration), then two kernels of this module.
  CR(cudaSetDevice(0));
  CR(cudaFree(nullptr));
  Fact("runtime-init");
  int* buf = nullptr;
  CR(cudaMalloc(&buf, 1 << 20));
  Fact("runtime-1MiB");
  TouchA<<<1, 32>>>(buf);
  CR(cudaGetLastError());
  CR(cudaDeviceSynchronize());
  Fact("first-launch-A");
  TouchB<<<1, 256>>>(reinterpret_cast<float*>(buf), 1024);
  CR(cudaGetLastError());
  CR(cudaDeviceSynchronize());
  Fact("first-launch-B");
  CUstream stream;
  CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a;
  CK(cuMemAllocAsync(&a, 64 << 20, stream));
  CK(cuStreamSynchronize(stream));
  Fact("async-first-64MiB");
  CUdeviceptr b;
  CK(cuMemAllocAsync(&b, 64 << 20, stream));
  CK(cuStreamSynchronize(stream));
  Fact("async-second-64MiB");
  CK(cuMemFreeAsync(a, stream));
  CK(cuMemFreeAsync(b, stream));
  CK(cuStreamSynchronize(stream));
  Fact("async-freed");
  CUcontext second;
  CK(cuCtxCreate(&second, nullptr, 0, dev));
  Fact("second-context");
  CK(cuCtxDestroy(second));
  CK(cuCtxSetCurrent(primary));
  Fact("second-destroyed");
  CR(cudaFree(buf));
  return 0;
}
