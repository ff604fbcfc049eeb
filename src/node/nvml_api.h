// The NVML subset vgpu-node uses, declared from NVIDIA's documentation (nvml.h is not on every
// build machine; the ABI is stable). Loaded with dlopen by gpu_source.cc.
#pragma once

#include <cstddef>

extern "C" {

typedef int vgpuNvmlReturn;
typedef struct nvmlDevice_st* vgpuNvmlDevice;
typedef struct nvmlEventSet_st* vgpuNvmlEventSet;

enum : int {
  kNvmlSuccess = 0,
  kNvmlErrorNotSupported = 3,
  kNvmlErrorInsufficientSize = 7,
  kNvmlErrorTimeout = 10,
  kNvmlErrorGpuIsLost = 15,
};

// nvmlEventType*: bit masks.
enum : unsigned long long {
  kNvmlEventSingleBitEcc = 0x1ull,
  kNvmlEventDoubleBitEcc = 0x2ull,
  kNvmlEventXidCritical = 0x8ull,
};

struct VgpuNvmlMemory {  // nvmlMemory_t
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct VgpuNvmlProcessInfo {  // nvmlProcessInfo_t (v2/v3 queries)
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

struct VgpuNvmlUtilization {  // nvmlUtilization_t
  unsigned int gpu;
  unsigned int memory;
};

struct VgpuNvmlEventData {  // nvmlEventData_t
  vgpuNvmlDevice device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

}  // extern "C"

static_assert(sizeof(VgpuNvmlMemory) == 24);
static_assert(sizeof(VgpuNvmlProcessInfo) == 24);
static_assert(sizeof(VgpuNvmlEventData) == 32);
static_assert(offsetof(VgpuNvmlEventData, eventData) == 16);
