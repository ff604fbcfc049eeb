// An NVML-only process (a monitoring agent, or a framework asking NVML before it initialises
// CUDA): nvmlInit_v2, then device 0's memory as NVML reports it. Never touches CUDA.
//
//   nvml_probe     prints "init <code>", and when that is NVML_SUCCESS "total <bytes>" and
//                  "free <bytes>"; exits 0 when nvmlInit succeeded, 1 otherwise.
#include <cstdio>

#include "sim_nvml_types.h"

int main() {
  const nvmlReturn_t init = nvmlInit_v2();
  std::printf("init %d\n", static_cast<int>(init));
  if (init != NVML_SUCCESS) return 1;
  nvmlDevice_t device = nullptr;
  nvmlMemory_t memory{};
  if (nvmlDeviceGetHandleByIndex_v2(0, &device) != NVML_SUCCESS || nvmlDeviceGetMemoryInfo(device, &memory) != NVML_SUCCESS) {
    std::printf("query failed\n");
    return 2;
  }
  std::printf("total %llu\nfree %llu\n", static_cast<unsigned long long>(memory.total),
              static_cast<unsigned long long>(memory.free));
  nvmlShutdown();
  return 0;
}
