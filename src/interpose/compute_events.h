// compute::GpuEventOps over the REAL driver entries (driver_imports.def), never vgpu's own hooks,
// and the stream keys the busy tracker sees.
//
// Stream keys: a stream handle is its own key; the legacy default stream (0 through a plain
// entry, or CU_STREAM_LEGACY) is CU_STREAM_LEGACY; the per-thread default stream (0 through a
// _ptsz entry, or CU_STREAM_PER_THREAD) is kPerThreadTag | a serial number of the calling
// thread (user-space handles never have bit 63 set). A per-thread stream is recorded on with
// CU_STREAM_PER_THREAD, which means the CALLING thread's stream, so Record refuses it from any
// other thread (the tracker then marks it at that thread's next launch).
//
// Every call acts in the calling thread's current context; the caller (compute_limit.cc) makes
// sure that is the context owning the events and streams. Recording on a stream that is being
// captured into a graph is refused (it would add a node to the application's graph).
//
// Thread safety: stateless; any thread.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "compute/gpu_events.h"

namespace vgpu::compute_limit {

inline constexpr compute::StreamKey kPerThreadTag = compute::StreamKey{1} << 63;

// The tracker's key for `stream` as passed to a plain (ptsz = false) or _ptsz entry.
compute::StreamKey StreamKeyOf(CUstream stream, bool ptsz);

class RealEventOps final : public compute::GpuEventOps {
 public:
  bool Create(compute::EventId* event) override;
  void Destroy(compute::EventId event) override;
  bool Record(compute::EventId event, compute::StreamKey stream) override;
  compute::EventState Query(compute::EventId event) override;
  compute::EventState QueryAgainst(compute::EventId reference, compute::EventId event, float* elapsed_ms) override;
  bool ElapsedMs(compute::EventId from, compute::EventId to, float* ms) override;
};

}  // namespace vgpu::compute_limit
