// TEST DOUBLE ONLY: NVML health events (nvmlEventSetCreate, nvmlDeviceRegisterEvents,
// nvmlDeviceGetSupportedEventTypes, nvmlEventSetWait(_v2), nvmlEventSetFree).
//
// Events are injected by appending lines to the file named by VGPU_SIM_NVML_EVENTS (read when a
// set waits; each event set reads the file from where it was at creation):
//   <device index> xid <number>     XID critical error (eventData = the XID)
//   <device index> ecc_sbe          single-bit ECC error
//   <device index> ecc_dbe          double-bit ECC error
//   <device index> lost             the wait returns NVML_ERROR_GPU_IS_LOST for that device
// A line for a device or event type the set did not register is skipped; a malformed line is
// printed on stderr and skipped. Without the variable no event ever arrives (waits time out).
#include <errno.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>

#include "sim_nvml_types.h"

#define SIM_EXPORT extern "C" __attribute__((visibility("default")))

// Same definition as in sim_nvml.cc (the handle's pointee).
struct nvmlDevice_st {
  int index;
};

namespace {

constexpr unsigned long long kSingleBitEcc = 0x1ull;
constexpr unsigned long long kDoubleBitEcc = 0x2ull;
constexpr unsigned long long kXidCritical = 0x8ull;
constexpr unsigned long long kSupported = kSingleBitEcc | kDoubleBitEcc | kXidCritical;
constexpr nvmlReturn_t kTimeout = static_cast<nvmlReturn_t>(10);  // NVML_ERROR_TIMEOUT
constexpr nvmlReturn_t kGpuIsLost = static_cast<nvmlReturn_t>(15);

struct EventData {  // nvmlEventData_t
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

struct EventSet {
  std::mutex mu;
  std::map<int, std::pair<nvmlDevice_t, unsigned long long>> registered;  // index -> (handle, mask)
  std::streamoff offset = 0;  // where this set reads the event file next
};

std::string EventFile() {
  const char* path = getenv("VGPU_SIM_NVML_EVENTS");
  return path == nullptr ? std::string() : std::string(path);
}

std::streamoff FileSize(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  return in ? static_cast<std::streamoff>(in.tellg()) : 0;
}

// Reads complete lines from the set's offset; returns NVML_SUCCESS / kGpuIsLost with *data set
// for the first event the set registered for, or kTimeout when there is none (yet).
nvmlReturn_t NextEvent(EventSet* set, EventData* data) {
  const std::string path = EventFile();
  if (path.empty()) return kTimeout;
  std::ifstream in(path, std::ios::binary);
  if (!in) return kTimeout;
  in.seekg(set->offset);
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // an incomplete last line: read it once it is complete
    set->offset = in.tellg();
    std::istringstream fields(line);
    int index = -1;
    std::string kind;
    unsigned long long value = 0;
    if (!(fields >> index >> kind)) {
      if (!line.empty()) fprintf(stderr, "sim nvml: VGPU_SIM_NVML_EVENTS line \"%s\" is malformed; skipped\n", line.c_str());
      continue;
    }
    unsigned long long type = 0;
    if (kind == "xid") {
      if (!(fields >> value)) {
        fprintf(stderr, "sim nvml: VGPU_SIM_NVML_EVENTS line \"%s\" needs an XID; skipped\n", line.c_str());
        continue;
      }
      type = kXidCritical;
    } else if (kind == "ecc_sbe") {
      type = kSingleBitEcc;
    } else if (kind == "ecc_dbe") {
      type = kDoubleBitEcc;
    } else if (kind != "lost") {
      fprintf(stderr, "sim nvml: VGPU_SIM_NVML_EVENTS line \"%s\": unknown event; skipped\n", line.c_str());
      continue;
    }
    const auto it = set->registered.find(index);
    if (it == set->registered.end()) continue;
    *data = EventData{};
    data->device = it->second.first;
    if (kind == "lost") return kGpuIsLost;
    if ((it->second.second & type) == 0) continue;
    data->eventType = type;
    data->eventData = value;
    data->gpuInstanceId = NVML_VALUE_NOT_AVAILABLE_UINT;
    data->computeInstanceId = NVML_VALUE_NOT_AVAILABLE_UINT;
    return NVML_SUCCESS;
  }
  return kTimeout;
}

nvmlReturn_t Wait(void* handle, EventData* data, unsigned int timeout_ms) {
  if (handle == nullptr || data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  auto* set = static_cast<EventSet*>(handle);
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(set->mu);
      const nvmlReturn_t rc = NextEvent(set, data);
      if (rc != kTimeout) return rc;
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const long long elapsed_ms = (now.tv_sec - start.tv_sec) * 1000LL + (now.tv_nsec - start.tv_nsec) / 1000000;
    if (elapsed_ms >= timeout_ms) return kTimeout;
    struct timespec pause = {0, 5'000'000};
    nanosleep(&pause, nullptr);
  }
}

}  // namespace

SIM_EXPORT nvmlReturn_t nvmlEventSetCreate(void** set) {
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  auto* s = new EventSet();
  const std::string path = EventFile();
  if (!path.empty()) s->offset = FileSize(path);  // only events injected from now on
  *set = s;
  return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlEventSetFree(void* set) {
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  delete static_cast<EventSet*>(set);
  return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long* types) {
  if (device == nullptr || types == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *types = kSupported;
  return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, void* set) {
  if (device == nullptr || set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if ((types & ~kSupported) != 0) return NVML_ERROR_NOT_SUPPORTED;
  auto* s = static_cast<EventSet*>(set);
  std::lock_guard<std::mutex> lock(s->mu);
  auto& entry = s->registered[device->index];
  entry.first = device;
  entry.second |= types;
  return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlEventSetWait_v2(void* set, EventData* data, unsigned int timeout_ms) {
  return Wait(set, data, timeout_ms);
}

SIM_EXPORT nvmlReturn_t nvmlEventSetWait(void* set, EventData* data, unsigned int timeout_ms) {
  return Wait(set, data, timeout_ms);
}
