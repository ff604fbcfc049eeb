// fork() children work: before CUDA is initialised, after it, and while other threads are inside
// vgpu's lookup paths. A child that hangs (a lock copied in the held state) fails the test via
// the alarm below.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "check.h"

namespace {

// What a child does: discover and use the driver through every layer, then exit 0.
int ChildWork() {
  alarm(20);
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (cuda == nullptr) return 10;
  auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(cuda, "cuGetProcAddress_v2"));
  if (gpa == nullptr) return 11;
  void* p = nullptr;
  if (gpa("cuDriverGetVersion", &p, 13000, 0, nullptr) != CUDA_SUCCESS) return 12;
  int version = 0;
  if (reinterpret_cast<PFN_cuDriverGetVersion_v2020>(p)(&version) != CUDA_SUCCESS || version <= 0) return 13;
  if (cuInit(0) != CUDA_SUCCESS) return 14;
  int count = 0;
  if (cuDeviceGetCount(&count) != CUDA_SUCCESS || count < 1) return 15;
  return 0;
}

int ForkAndWait() {
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) _exit(ChildWork());
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  if (!WIFEXITED(status)) return 100 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return WEXITSTATUS(status);
}

}  // namespace

int main() {
  alarm(60);
  // 1. Fork before anything was initialised.
  CHECK(ForkAndWait() == 0);
  // 2. Initialise in the parent, then fork.
  CHECK_CU(cuInit(0));
  CHECK(ForkAndWait() == 0);
  // 3. Fork repeatedly while other threads hammer dlsym and cuGetProcAddress.
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int i = 0; i < 4; ++i) {
    busy.emplace_back([&stop] {
      void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
      auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(cuda, "cuGetProcAddress_v2"));
      while (!stop.load()) {
        void* p = nullptr;
        gpa("cuMemAlloc", &p, 13000, 0, nullptr);
        dlsym(cuda, "cuLaunchKernel");
      }
    });
  }
  for (int i = 0; i < 20; ++i) CHECK(ForkAndWait() == 0);
  stop = true;
  for (auto& t : busy) t.join();
  std::printf("fork_child ok\n");
  return 0;
}
