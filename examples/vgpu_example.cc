// The bundled example: what a job sees and gets under vgpu.
//
// It reports the device and the memory the driver shows it, allocates device memory in chunks
// until the allocation is refused, then keeps the GPU busy with spin kernels for a few seconds
// (never more than two batches in flight) and reports the kernels' share of wall time after the
// first second (when the limiter has settled: a job starts with a little banked budget). Under
// `vgpu run --memory 1GiB --compute 30` the total it sees is the limit, allocation stops at the
// limit, and the kernels' share of time is the compute limit.
//
// Usage: vgpu-example [--chunk-mib N] [--seconds N] [--kernel-ms N]
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "driver_api.h"
#include "ptx_kernels.h"

namespace {

struct Options {
  uint64_t chunk_mib = 256;
  int seconds = 3;
  int kernel_ms = 2;
};

bool ParseOptions(int argc, char** argv, Options* options) {
  for (int i = 1; i < argc; ++i) {
    auto value = [&](const char* flag) -> long {
      if (std::strcmp(argv[i], flag) != 0 || i + 1 >= argc) return -1;
      return std::strtol(argv[++i], nullptr, 10);
    };
    long v;
    if ((v = value("--chunk-mib")) > 0) {
      options->chunk_mib = static_cast<uint64_t>(v);
    } else if ((v = value("--seconds")) > 1) {
      options->seconds = static_cast<int>(v);
    } else if ((v = value("--kernel-ms")) > 0) {
      options->kernel_ms = static_cast<int>(v);
    } else {
      std::fprintf(stderr, "usage: vgpu-example [--chunk-mib N] [--seconds N (at least 2)] [--kernel-ms N]\n");
      return false;
    }
  }
  return true;
}

double Mib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

void PrintLimitsInEffect() {
  static const char* const kNames[] = {"CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT",
                                       "CUDA_DEVICE_MEMORY_SHARED_CACHE"};
  std::printf("limits in the environment:");
  bool any = false;
  for (const char* name : kNames) {
    if (const char* value = std::getenv(name)) {
      std::printf(" %s=%s", name, value);
      any = true;
    }
  }
  const char* preload = std::getenv("LD_PRELOAD");
  const bool vgpu_loaded = preload != nullptr && std::strstr(preload, "libvgpu.so") != nullptr;
  std::printf("%s\n", any ? (vgpu_loaded ? " (libvgpu.so preloaded)" : " (but libvgpu.so is NOT preloaded)")
                          : " none (not running under vgpu)");
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!ParseOptions(argc, argv, &options)) return 2;
  DriverApi api;
  if (!api.Load()) return 1;
  DRV_CHECK(api, api.Init(0));
  int version = 0;
  DRV_CHECK(api, api.DriverGetVersion(&version));
  CUdevice dev;
  DRV_CHECK(api, api.DeviceGet(&dev, 0));
  char name[256] = {};
  DRV_CHECK(api, api.DeviceGetName(name, sizeof(name), dev));
  if (api.simulated) {
    std::printf("vgpu example: SIMULATED GPU - no NVIDIA driver here, running on vgpu's test double "
                "(tests/simdriver), not on a GPU\n");
  } else {
    std::printf("vgpu example: NVIDIA driver (CUDA %d.%d), device 0: %s\n", version / 1000,
                (version % 1000) / 10, name);
  }
  PrintLimitsInEffect();

  CUcontext ctx;
  DRV_CHECK(api, api.DevicePrimaryCtxRetain(&ctx, dev));
  DRV_CHECK(api, api.CtxSetCurrent(ctx));
  size_t free_bytes = 0, total_bytes = 0;
  DRV_CHECK(api, api.MemGetInfo(&free_bytes, &total_bytes));
  std::printf("cuMemGetInfo: total %.0f MiB, free %.0f MiB\n", Mib(total_bytes), Mib(free_bytes));

  // Allocate until refused; never try more than the reported total plus one chunk.
  const size_t chunk = options.chunk_mib << 20;
  std::vector<CUdeviceptr> chunks;
  CUresult refusal = CUDA_SUCCESS;
  while (chunks.size() * chunk <= total_bytes) {
    CUdeviceptr p = 0;
    refusal = api.MemAlloc(&p, chunk);
    if (refusal != CUDA_SUCCESS) break;
    chunks.push_back(p);
  }
  std::printf("allocated %zu chunks of %llu MiB (%.0f MiB); next chunk: %s\n", chunks.size(),
              static_cast<unsigned long long>(options.chunk_mib), Mib(chunks.size() * chunk),
              refusal == CUDA_SUCCESS ? "not tried (reached the reported total)" : api.ErrorName(refusal));
  for (CUdeviceptr p : chunks) DRV_CHECK(api, api.MemFree(p));

  CUmodule module;
  DRV_CHECK(api, api.ModuleLoadData(&module, kExamplePtx));
  CUfunction spin;
  DRV_CHECK(api, api.ModuleGetFunction(&spin, module, "sim_sleep_spin"));
  CUstream stream;
  DRV_CHECK(api, api.StreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  // Batches of ~20 ms of kernels, at most two in flight; a batch counts when it completes.
  const int per_batch = std::max(1, 20 / options.kernel_ms);
  CUevent done[2];
  for (CUevent& e : done) DRV_CHECK(api, api.EventCreate(&e, CU_EVENT_DISABLE_TIMING));
  uint64_t ns = static_cast<uint64_t>(options.kernel_ms) * 1000000;
  void* params[] = {&ns};
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto window_start = start + std::chrono::seconds(1);
  const auto end = start + std::chrono::seconds(options.seconds);
  long batches = 0, counted = 0;
  while (Clock::now() < end) {
    if (batches >= 2) {
      DRV_CHECK(api, api.EventSynchronize(done[batches % 2]));  // the batch two behind
      if (Clock::now() >= window_start) ++counted;
    }
    for (int i = 0; i < per_batch; ++i) {
      DRV_CHECK(api, api.LaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr));
    }
    DRV_CHECK(api, api.EventRecord(done[batches % 2], stream));
    ++batches;
  }
  const double window_ms = std::chrono::duration<double, std::milli>(Clock::now() - window_start).count();
  DRV_CHECK(api, api.StreamSynchronize(stream));
  const double kernel_ms = static_cast<double>(counted) * per_batch * options.kernel_ms;
  std::printf("kernels: %d ms spin kernels for %d s; over the last %.1f s the kernels ran %.0f ms: "
              "%.0f%% of wall time\n",
              options.kernel_ms, options.seconds, window_ms / 1000, kernel_ms, 100.0 * kernel_ms / window_ms);
  return 0;
}
