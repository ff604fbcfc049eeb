// ComputeLimiter: what the launch hooks call. Glues one process's BusyTracker (measurement) to
// the container's Controller (budget) for one device.
//
// Launch hook (cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel, cuGraphLaunch, and
// their _ptsz variants), on a device whose limiter exists:
//
//   LaunchTicket ticket = limiter.WaitForAdmission(stream, clock, sleeper);  // may sleep
//   CUresult r = real_launch(...);
//   limiter.AfterLaunch(ticket, r == CUDA_SUCCESS, clock->NowNs());
//
// or, non-blocking (what the simulation does): call BeforeLaunch until it returns 0, sleeping
// what it returns in between. Also:
//   BeforeSynchronize  before cuCtxSynchronize (every queue runs dry there; marks placed now
//                      keep the coming idle time out of the measurement).
//   BeforeWait         before cuStreamSynchronize (the stream) or cuEventSynchronize (no stream:
//                      the event's is not known): marks the tails that may run dry and cost the
//                      other streams nothing (BusyTracker::FlushBeforeWait).
//   OnStreamDestroyed  before the real cuStreamDestroy.
//   Tick               every ~1-5 ms from a background thread, if there is one: polls completions,
//                      closes stale tails, keeps the priority heartbeat alive while work is in
//                      flight. Optional; without it the same happens on launches.
//   Reset              when the context is destroyed (its events die with it).
//
// Thread safety: all methods may be called concurrently. Cost when the container has no debt:
// the controller's two or three atomic loads, the tracker's mutex and hash lookup, and every K
// launches one cuEventRecord (see BusyTracker).
#pragma once

#include <cstdint>

#include "compute/busy_tracker.h"
#include "compute/controller.h"
#include "compute/time_source.h"

namespace vgpu::compute {

class ComputeLimiter {
 public:
  // Both must outlive the limiter.
  ComputeLimiter(Controller* controller, BusyTracker* tracker);

  // 0: submit the launch now (*ticket filled; call AfterLaunch). > 0: wait that long, then ask
  // again (*ticket untouched). Waits come from the container's debt (sleep proportional to it)
  // or from the stream having too much unmeasured work in flight.
  int64_t BeforeLaunch(StreamKey stream, int64_t now, LaunchTicket* ticket);
  void AfterLaunch(const LaunchTicket& ticket, bool launched, int64_t now);

  // Blocking form of BeforeLaunch: sleeps (never spins) until admitted.
  LaunchTicket WaitForAdmission(StreamKey stream, Clock* clock, Sleeper* sleeper);

  void BeforeSynchronize(int64_t now);
  void BeforeWait(int64_t now, const StreamKey* stream);
  void OnStreamDestroyed(StreamKey stream, int64_t now);
  void Tick(int64_t now);
  void Reset(bool destroy_events);

  // Called (if set) for every charge to the container's budget: a launch's estimate at its
  // submission (measured = 0) and, per batch of completed intervals, what they measured against
  // what was estimated for them (the clock is charged the difference), `unmeasured_ns` of the
  // measured part being estimates that stood where nothing could be measured (PollResult). For
  // VGPU_COMPUTE_TRACE.
  using ChargeObserver = void (*)(void* context, int64_t now, int64_t estimated_ns, int64_t measured_ns,
                                  int64_t unmeasured_ns);
  void ObserveCharges(ChargeObserver observer, void* context);

  Controller* controller() const { return controller_; }
  BusyTracker* tracker() const { return tracker_; }

 private:
  void Apply(const PollResult& result, int64_t now);

  Controller* const controller_;
  BusyTracker* const tracker_;
  ChargeObserver observer_ = nullptr;  // set before use (ObserveCharges)
  void* observer_context_ = nullptr;
};

}  // namespace vgpu::compute
