// The GPU side effects of the busy tracker, behind one narrow interface so that the tracker is
// tested against a simulated GPU (sim_model.h) and runs against the real driver in libvgpu.so.
//
// Production mapping (the interposer implements this with the REAL driver entry points, never
// through its own hooks):
//   StreamKey  the CUstream handle value as the application passed it (0 / CU_STREAM_LEGACY /
//              CU_STREAM_PER_THREAD included; a per-thread default stream should be keyed per
//              thread by the caller, e.g. by mixing in the thread id, and recorded on with the
//              handle the application used).
//   EventId    a CUevent handle value.
//   Create     cuEventCreate(&e, CU_EVENT_DEFAULT)  (timing enabled, no blocking sync), in the
//              context that owns the tracked streams.
//   Destroy    cuEventDestroy.
//   Record     cuEventRecord(e, stream)  (cuEventRecord_ptsz for per-thread default streams).
//   Query      cuEventQuery(e): CUDA_SUCCESS -> kReady, CUDA_ERROR_NOT_READY -> kNotReady,
//              anything else -> kError.
//   ElapsedMs  cuEventElapsedTime(&ms, from, to): time(to) - time(from) in ms; negative when `to`
//              completed first (both events complete, same device).
//   QueryAgainst  cuEventElapsedTime_v2(&ms, reference, e), `reference` complete: CUDA_SUCCESS ->
//              kReady (and ms, what ElapsedMs(reference, e) would read), CUDA_ERROR_NOT_READY ->
//              kNotReady; otherwise, or without the _v2 entry, Query(e). cuEventQuery's first
//              look at a completed event processes the stream's finished work (1.5 us on an
//              H200, against 0.11 us while the event is pending); cuEventElapsedTime_v2 reads
//              the timestamps only (0.14-0.28 us either way).
// Every method may be called from any thread that launches on the device (the tracker
// serialises its own calls with a mutex); the interposer makes the owning context current when
// needed.
#pragma once

#include <cstdint>
#include <limits>

namespace vgpu::compute {

using StreamKey = uint64_t;
using EventId = uint64_t;

enum class EventState { kReady, kNotReady, kError };

class GpuEventOps {
 public:
  virtual ~GpuEventOps() = default;
  // A new timing event; false when none can be created (the tracker then stops marking).
  virtual bool Create(EventId* event) = 0;
  virtual void Destroy(EventId event) = 0;
  // Enqueues `event` on `stream` behind all work submitted to it so far.
  virtual bool Record(EventId event, StreamKey stream) = 0;
  virtual EventState Query(EventId event) = 0;
  // Whether `event` is complete, asked against `reference`, an event known complete (cheaper
  // where the driver allows; see above). *elapsed_ms: when kReady came with the events' times,
  // ElapsedMs(reference, event)'s answer (the tracker then need not ask it); NaN otherwise. The
  // default asks Query.
  virtual EventState QueryAgainst(EventId reference, EventId event, float* elapsed_ms) {
    (void)reference;
    *elapsed_ms = std::numeric_limits<float>::quiet_NaN();
    return Query(event);
  }
  // REQUIRES: both events recorded and complete. false on error.
  virtual bool ElapsedMs(EventId from, EventId to, float* ms) = 0;
};

}  // namespace vgpu::compute
