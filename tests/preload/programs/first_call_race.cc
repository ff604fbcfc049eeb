// Concurrent first calls: many threads make their process's very first CUDA / NVML calls at the
// same moment, through all three layers. Every call must succeed and every thread must be handed
// the same wrapper. The harness runs this program many times (each run is one "first").
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <atomic>
#include <barrier>
#include <cstdio>
#include <thread>
#include <vector>

#include "check.h"

namespace {

constexpr int kThreads = 48;

void* g_cuda = nullptr;
void* g_from_dlsym[kThreads];
void* g_from_gpa[kThreads];
std::atomic<int> g_failures{0};

void Worker(int index, std::barrier<>* start) {
  start->arrive_and_wait();
  switch (index % 4) {
    case 0:  // layer 1: the exported symbol
      if (cuInit(0) != CUDA_SUCCESS) g_failures++;
      break;
    case 1: {  // layer 2: dlsym on the driver handle
      auto init = reinterpret_cast<PFN_cuInit_v2000>(dlsym(g_cuda, "cuInit"));
      g_from_dlsym[index] = reinterpret_cast<void*>(init);
      if (init == nullptr || init(0) != CUDA_SUCCESS) g_failures++;
      break;
    }
    case 2: {  // layer 3: cuGetProcAddress
      auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(g_cuda, "cuGetProcAddress_v2"));
      void* init = nullptr;
      if (gpa == nullptr || gpa("cuInit", &init, 13000, 0, nullptr) != CUDA_SUCCESS) {
        g_failures++;
        break;
      }
      g_from_gpa[index] = init;
      if (reinterpret_cast<PFN_cuInit_v2000>(init)(0) != CUDA_SUCCESS) g_failures++;
      break;
    }
    case 3: {  // NVML, loaded lazily by its own first call
      void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
      auto init = nvml ? reinterpret_cast<int (*)()>(dlsym(nvml, "nvmlInit_v2")) : nullptr;
      if (init == nullptr || init() != 0) g_failures++;
      break;
    }
  }
}

}  // namespace

int main() {
  g_cuda = dlopen("libcuda.so.1", RTLD_NOW);
  CHECK(g_cuda != nullptr);
  std::barrier start(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(Worker, i, &start);
  for (auto& t : threads) t.join();
  CHECK(g_failures.load() == 0);
  for (int i = 0; i < kThreads; ++i) {
    if (i % 4 == 1) CHECK(g_from_dlsym[i] == g_from_dlsym[1]);
    if (i % 4 == 2) CHECK(g_from_gpa[i] == g_from_gpa[2]);
  }
  CHECK(g_from_dlsym[1] == g_from_gpa[2]);  // one wrapper per entry, whichever layer handed it out
  std::printf("first_call_race ok\n");
  return 0;
}
