// Real-GPU check on two GPUs (run by two_gpu.sh under LD_PRELOAD=libvgpu.so with
// CUDA_VISIBLE_DEVICES reordering the GPUs and a limit per CUDA ordinal). For each ordinal:
// its UUID, cudaMemGetInfo's total, then cudaMalloc in 64 MiB steps until refused (at most
// --cap-mib). Everything stays allocated for --hold-ms so the outside observer sees all of it,
// then it is freed. One line per ordinal:
//   ordinal=<i> uuid=GPU-... total_bytes=<n> free_bytes=<n> obtained_bytes=<n> refused=yes|no code_name=<name>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../cuda_check.h"

int main(int argc, char** argv) {
  uint64_t cap = 8192ull << 20;
  int hold_ms = 1500;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--cap-mib") cap = std::strtoull(argv[i + 1], nullptr, 10) << 20;
    if (flag == "--hold-ms") hold_ms = std::atoi(argv[i + 1]);
  }
  const uint64_t step = 64ull << 20;
  int count = 0;
  RT(cudaGetDeviceCount(&count));
  std::printf("device_count=%d\n", count);
  std::vector<std::vector<void*>> held(count);
  for (int dev = 0; dev < count; ++dev) {
    RT(cudaSetDevice(dev));
    RT(cudaFree(nullptr));
    cudaDeviceProp prop{};
    RT(cudaGetDeviceProperties(&prop, dev));
    const unsigned char* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
    char uuid[64];
    std::snprintf(uuid, sizeof(uuid), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                  u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    size_t free_bytes = 0, total = 0;
    RT(cudaMemGetInfo(&free_bytes, &total));
    uint64_t obtained = 0;
    cudaError_t rc = cudaSuccess;
    while (obtained + step <= cap) {
      void* p = nullptr;
      rc = cudaMalloc(&p, step);
      if (rc != cudaSuccess) {
        cudaGetLastError();
        break;
      }
      held[dev].push_back(p);
      obtained += step;
    }
    std::printf("ordinal=%d uuid=%s total_bytes=%zu free_bytes=%zu obtained_bytes=%llu refused=%s code_name=%s\n", dev,
                uuid, total, free_bytes, static_cast<unsigned long long>(obtained), rc != cudaSuccess ? "yes" : "no",
                rc != cudaSuccess ? cudaGetErrorName(rc) : "none");
    std::fflush(stdout);
  }
  usleep(hold_ms * 1000);
  for (int dev = 0; dev < count; ++dev) {
    RT(cudaSetDevice(dev));
    for (void* p : held[dev]) RT(cudaFree(p));
  }
  std::printf("done\n");
  return 0;
}
