// The compute limit of this process: one compute::ComputeLimiter per ledger device, over the real
// driver's timing events, sharing the container's budget through the ledger (docs/compute.md).
//
// Enabled (g_compute_enabled) by cuInit when the ledger holds a compute limit (1..99%) for any
// device or as its default, and GPU_CORE_UTILIZATION_POLICY is not "disable". The ledger holds
// the effective limits: the library creates it from the environment (Config::SmLimit), and an
// authority's ledger wins, as for memory. While disabled, every GATED hook in cuda_hooks.def is
// the plain forwarder plus one relaxed load of g_compute_enabled; nothing here runs.
//
// While enabled, a device's limiter is created at the first launch on it whose ledger limit is
// 1..99 (a device without a limit is remembered as such; a limit added later by the authority
// is not picked up for it). Its timing events live in the context current at that launch; a
// launch from another context on the device re-binds the limiter (forgetting the old context's
// events: they may leak if that context is still alive). Streams being captured into a graph are
// never tracked nor throttled (their launches run when the graph is launched). The per-thread
// default stream is keyed per thread, and its marks are recorded only from its own thread.
//
// VGPU_COMPUTE_TRACE: each launch, sleep, busy interval and charge is recorded (compute/trace.h)
// and the trace written at exit; off, a launch pays one branch.
//
// Completions are polled from launches and synchronisations (Tick at most every 2 ms) and by a
// monitor thread started with the first limiter (every 5 ms while work is in flight; it also
// samples NVML for the soft limit, the reference share and light measurement).
// After fork() the child forgets the parent's limiters (it must call cuInit again anyway).
//
// Thread safety: all functions may be called from any thread.
#pragma once

#include <cuda.h>

#include <atomic>

#include "compute/busy_tracker.h"

namespace vgpu::compute_limit {

// True once a compute limit is set anywhere (never reset). The GATED hooks' only extra cost.
inline std::atomic<bool> g_compute_enabled{false};
inline bool Enabled() { return g_compute_enabled.load(std::memory_order_relaxed); }

// After memory::InitForCuInit succeeded: enables limiting when the ledger holds a compute limit.
void InitForCuInit();

struct DeviceLimiter;

// Brackets one launch: the constructor waits for admission (may sleep), Finish reports the
// result. `ptsz`: the call came through a _ptsz entry (stream 0 = the per-thread stream).
// `starts_after_return`: the launch's work cannot start on the GPU before the call returns (a
// kernel launch); false for a graph launch or a launch on several devices, whose first work may
// start while the call still submits the rest (compute::LaunchTicket).
class LaunchGuard {
 public:
  LaunchGuard(CUstream stream, bool ptsz, bool starts_after_return = true);
  LaunchGuard(const LaunchGuard&) = delete;
  LaunchGuard& operator=(const LaunchGuard&) = delete;
  // Returns `result` unchanged.
  CUresult Finish(CUresult result);

 private:
  DeviceLimiter* device_ = nullptr;
  compute::LaunchTicket ticket_;
  int64_t trace_start_ns_ = 0;  // VGPU_COMPUTE_TRACE: when the hook was entered
};

// Before a synchronising call on the current context (marks where its streams run dry), and
// after it (polls what completed). BeforeSynchronize: the whole context (cuCtxSynchronize);
// BeforeStreamWait: one stream (cuStreamSynchronize; the legacy default stream counts as the
// whole context, as it waits for every blocking stream); BeforeEventWait: an event
// (cuEventSynchronize) of a stream not known (compute::ComputeLimiter::BeforeWait).
void BeforeSynchronize();
void BeforeStreamWait(CUstream stream, bool ptsz);
void BeforeEventWait();
void AfterSynchronize();
// VGPU_COMPUTE_TRACE's record of a synchronising call (Y, compute/trace.h): TraceNow() is the
// clock while a trace is being recorded and 0 otherwise (one branch); TraceSync records a call of
// the current context from the hook's entry to now, the driver's call between the two times given.
int64_t TraceNow();
void TraceSync(int64_t entry_ns, int64_t call_start_ns, int64_t call_end_ns);
// Before the real cuStreamDestroy.
void OnStreamDestroyed(CUstream stream);

}  // namespace vgpu::compute_limit
