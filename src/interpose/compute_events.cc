#include "interpose/compute_events.h"

#include <atomic>
#include <limits>

#include "interpose/driver_imports.h"

namespace vgpu::compute_limit {
namespace {

// initial-exec: no allocation or lock on first use from any thread.
__attribute__((tls_model("initial-exec"))) thread_local uint64_t t_thread_serial = 0;
std::atomic<uint64_t> g_next_serial{1};

uint64_t ThreadSerial() {
  if (__builtin_expect(t_thread_serial == 0, 0)) {
    t_thread_serial = g_next_serial.fetch_add(1, std::memory_order_relaxed);
  }
  return t_thread_serial;
}

CUevent AsEvent(compute::EventId event) { return reinterpret_cast<CUevent>(static_cast<uintptr_t>(event)); }

bool Capturing(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (g_cuda.cuStreamIsCapturing == nullptr) return false;
  return g_cuda.cuStreamIsCapturing(stream, &status) != CUDA_SUCCESS ||
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}

}  // namespace

compute::StreamKey StreamKeyOf(CUstream stream, bool ptsz) {
  const auto handle = reinterpret_cast<uintptr_t>(stream);
  const auto per_thread = reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD);
  const auto legacy = reinterpret_cast<uintptr_t>(CU_STREAM_LEGACY);
  if (handle == per_thread || (handle == 0 && ptsz)) return kPerThreadTag | ThreadSerial();
  if (handle == 0) return legacy;
  return handle;
}

bool RealEventOps::Create(compute::EventId* event) {
  CUevent created = nullptr;
  if (g_cuda.cuEventCreate == nullptr || g_cuda.cuEventCreate(&created, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
    return false;
  }
  *event = reinterpret_cast<uintptr_t>(created);
  return true;
}

void RealEventOps::Destroy(compute::EventId event) {
  if (g_cuda.cuEventDestroy_v2 != nullptr) g_cuda.cuEventDestroy_v2(AsEvent(event));
}

bool RealEventOps::Record(compute::EventId event, compute::StreamKey stream) {
  if (g_cuda.cuEventRecord == nullptr) return false;
  CUstream handle = reinterpret_cast<CUstream>(static_cast<uintptr_t>(stream));
  if ((stream & kPerThreadTag) != 0) {
    if ((stream & ~kPerThreadTag) != ThreadSerial()) return false;  // another thread's stream
    handle = CU_STREAM_PER_THREAD;
  }
  if (Capturing(handle)) return false;
  return g_cuda.cuEventRecord(AsEvent(event), handle) == CUDA_SUCCESS;
}

compute::EventState RealEventOps::Query(compute::EventId event) {
  if (g_cuda.cuEventQuery == nullptr) return compute::EventState::kError;
  switch (g_cuda.cuEventQuery(AsEvent(event))) {
    case CUDA_SUCCESS: return compute::EventState::kReady;
    case CUDA_ERROR_NOT_READY: return compute::EventState::kNotReady;
    default: return compute::EventState::kError;
  }
}

// Version 1 of cuEventElapsedTime looks for earlier asynchronous errors (3 us on an H200): only
// _v2 is cheaper than the query.
compute::EventState RealEventOps::QueryAgainst(compute::EventId reference, compute::EventId event,
                                               float* elapsed_ms) {
  *elapsed_ms = std::numeric_limits<float>::quiet_NaN();
  if (g_cuda.cuEventElapsedTime_v2 != nullptr) {
    float ms = 0;
    switch (g_cuda.cuEventElapsedTime_v2(&ms, AsEvent(reference), AsEvent(event))) {
      case CUDA_SUCCESS:
        *elapsed_ms = ms;
        return compute::EventState::kReady;
      case CUDA_ERROR_NOT_READY: return compute::EventState::kNotReady;
      default: break;  // the query decides (and reports an error as one)
    }
  }
  return Query(event);
}

bool RealEventOps::ElapsedMs(compute::EventId from, compute::EventId to, float* ms) {
  auto elapsed = g_cuda.cuEventElapsedTime_v2 != nullptr ? g_cuda.cuEventElapsedTime_v2 : g_cuda.cuEventElapsedTime;
  return elapsed != nullptr && elapsed(ms, AsEvent(from), AsEvent(to)) == CUDA_SUCCESS;
}

}  // namespace vgpu::compute_limit
