// Two (simulated) GPUs: limits must follow the device, whatever CUDA_VISIBLE_DEVICES does to the
// ordinals.
//
//   memory_multi totals   per CUDA ordinal: "ordinal_<i>_uuid GPU-…" and "ordinal_<i>_total".
//                         If cuInit fails: "init_error <code>" (exit 0).
//   memory_multi fill     totals, then per ordinal: context, cuMemGetInfo, 64 MiB allocations
//                         until refused ("ordinal_<i>_count", "_refusal_code"); then, through
//                         NVML (physical indices), every device's uuid and memory info, and the
//                         memory info of the device found by ordinal 0's UUID. Hold point "full"
//                         while everything is allocated.
//   memory_multi cross    contexts on both ordinals, ordinal 0 current; VMM handles located on
//                         ordinal 1 until refused ("cross_count"), then plain allocations on
//                         ordinal 0 until refused ("ordinal_0_count"). Hold point "full".
#include <cuda.h>

#include <string>
#include <vector>

#include "memory_common.h"
#include "sim_nvml_types.h"

namespace {

using memtest::kMiB;
using memtest::Report;
using memtest::ReportText;

#define CHECK_NVML(expr) CHECK((expr) == NVML_SUCCESS)

constexpr uint64_t kChunk = 64 * kMiB;

std::string UuidString(const CUuuid& u) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  char s[64];
  std::snprintf(s, sizeof(s), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return s;
}

std::string Key(int ordinal, const char* what) { return "ordinal_" + std::to_string(ordinal) + "_" + what; }

// Reports every ordinal's UUID and total; returns the UUIDs.
std::vector<std::string> ReportTotals() {
  int count = 0;
  CHECK_CU(cuDeviceGetCount(&count));
  Report("device_count", count);
  std::vector<std::string> uuids;
  for (int i = 0; i < count; ++i) {
    CUdevice dev;
    CHECK_CU(cuDeviceGet(&dev, i));
    CUuuid uuid;
    CHECK_CU(cuDeviceGetUuid_v2(&uuid, dev));
    uuids.push_back(UuidString(uuid));
    ReportText(Key(i, "uuid").c_str(), uuids.back());
    size_t total = 0;
    CHECK_CU(cuDeviceTotalMem(&total, dev));
    Report(Key(i, "total").c_str(), total);
  }
  return uuids;
}

CUcontext Retain(int ordinal) {
  CUdevice dev;
  CHECK_CU(cuDeviceGet(&dev, ordinal));
  CUcontext ctx;
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  return ctx;
}

std::vector<CUdeviceptr> PlainFill(int ordinal) {
  std::vector<CUdeviceptr> held;
  CUresult rc = CUDA_SUCCESS;
  for (int i = 0; i < memtest::kMaxSteps; ++i) {
    CUdeviceptr p = 0;
    rc = cuMemAlloc(&p, kChunk);
    if (rc != CUDA_SUCCESS) break;
    held.push_back(p);
  }
  Report(Key(ordinal, "count").c_str(), held.size());
  Report(Key(ordinal, "refusal_code").c_str(), rc);
  return held;
}

void ReportNvml(const std::string& first_uuid) {
  CHECK_NVML(nvmlInit_v2());
  unsigned count = 0;
  CHECK_NVML(nvmlDeviceGetCount_v2(&count));
  for (unsigned j = 0; j < count; ++j) {
    nvmlDevice_t dev;
    CHECK_NVML(nvmlDeviceGetHandleByIndex_v2(j, &dev));
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    CHECK_NVML(nvmlDeviceGetUUID(dev, uuid, sizeof(uuid)));
    nvmlMemory_t memory{};
    CHECK_NVML(nvmlDeviceGetMemoryInfo(dev, &memory));
    const std::string prefix = "nvml_" + std::to_string(j) + "_";
    ReportText((prefix + "uuid").c_str(), uuid);
    Report((prefix + "total").c_str(), memory.total);
    Report((prefix + "used").c_str(), memory.used);
    Report((prefix + "free").c_str(), memory.free);
  }
  nvmlDevice_t by_uuid;
  CHECK_NVML(nvmlDeviceGetHandleByUUID(first_uuid.c_str(), &by_uuid));
  nvmlMemory_t memory{};
  CHECK_NVML(nvmlDeviceGetMemoryInfo(by_uuid, &memory));
  Report("nvml_by_ordinal_0_uuid_total", memory.total);
  CHECK_NVML(nvmlShutdown());
}

int Totals() {
  const CUresult rc = cuInit(0);
  if (rc != CUDA_SUCCESS) {
    Report("init_error", rc);
    return 0;
  }
  ReportTotals();
  return 0;
}

int FillAll() {
  CHECK_CU(cuInit(0));
  const std::vector<std::string> uuids = ReportTotals();
  std::vector<std::pair<CUcontext, std::vector<CUdeviceptr>>> held;
  for (int i = 0; i < static_cast<int>(uuids.size()); ++i) {
    CUcontext ctx = Retain(i);
    CHECK_CU(cuCtxSetCurrent(ctx));
    size_t free_bytes = 0, total = 0;
    CHECK_CU(cuMemGetInfo(&free_bytes, &total));
    Report(Key(i, "info_total").c_str(), total);
    Report(Key(i, "info_free").c_str(), free_bytes);
    held.emplace_back(ctx, PlainFill(i));
  }
  ReportNvml(uuids.at(0));
  memtest::HoldPoint("full");
  for (auto& [ctx, ptrs] : held) {
    CHECK_CU(cuCtxSetCurrent(ctx));
    for (CUdeviceptr p : ptrs) CHECK_CU(cuMemFree(p));
  }
  std::printf("done\n");
  return 0;
}

int Cross() {
  CHECK_CU(cuInit(0));
  ReportTotals();
  CUcontext ctx0 = Retain(0);
  Retain(1);
  CHECK_CU(cuCtxSetCurrent(ctx0));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 1;  // the other device than the current context's
  std::vector<CUmemGenericAllocationHandle> handles;
  CUresult rc = CUDA_SUCCESS;
  for (int i = 0; i < memtest::kMaxSteps; ++i) {
    CUmemGenericAllocationHandle h = 0;
    rc = cuMemCreate(&h, kChunk, &prop, 0);
    if (rc != CUDA_SUCCESS) break;
    handles.push_back(h);
  }
  Report("cross_count", handles.size());
  Report("cross_refusal_code", rc);
  std::vector<CUdeviceptr> plain = PlainFill(0);
  memtest::HoldPoint("full");
  for (CUdeviceptr p : plain) CHECK_CU(cuMemFree(p));
  for (CUmemGenericAllocationHandle h : handles) CHECK_CU(cuMemRelease(h));
  std::printf("done\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "totals") return Totals();
  if (mode == "fill") return FillAll();
  if (mode == "cross") return Cross();
  std::fprintf(stderr, "usage: memory_multi totals|fill|cross\n");
  return 2;
}
