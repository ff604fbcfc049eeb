#include "compute/limiter.h"

namespace vgpu::compute {

ComputeLimiter::ComputeLimiter(Controller* controller, BusyTracker* tracker)
    : controller_(controller), tracker_(tracker) {}

// Measured busy time feeds the sensor; the difference to what was estimated at submission
// corrects the budget clock.
void ComputeLimiter::Apply(const PollResult& result, int64_t now) {
  if (result.intervals == 0) return;
  if (observer_ != nullptr) observer_(observer_context_, now, result.estimated_ns, result.busy_ns, result.unmeasured_ns);
  controller_->AddMeasured(result.busy_ns);
  controller_->Charge(result.busy_ns - result.estimated_ns, now);
}

int64_t ComputeLimiter::BeforeLaunch(StreamKey stream, int64_t now, LaunchTicket* ticket) {
  int64_t wait = controller_->AdmitDelayNs(now);
  if (wait > 0) {
    Apply(tracker_->Poll(now), now);  // completions may refund over-estimates
    wait = controller_->AdmitDelayNs(now);
  }
  if (wait > 0) {
    // A holder that rests, or lets a waiting neighbour go first, hands the turn back now, not at
    // its next Tick (the claim, a sum of estimates, often ends later than the work did): all of
    // it with nothing of this process in flight, else its run's hold.
    controller_->ReleaseTurn(now, !tracker_->HasPendingWork());
    tracker_->EndLight(now);  // limited now, or estimates overcharged: measure exactly
    tracker_->Flush(now);  // the streams will run dry while we sleep: mark where they end
    controller_->AddThrottled(wait);
    return wait;
  }
  PollResult polled;
  const bool banked = tracker_->bank_light() && controller_->Banked(now);
  wait = tracker_->BeforeLaunch(stream, now, ticket, &polled, banked);
  Apply(polled, now);
  return wait;
}

void ComputeLimiter::AfterLaunch(const LaunchTicket& ticket, bool launched, int64_t now) {
  PollResult polled;
  int64_t estimate = tracker_->AfterLaunch(ticket, launched, now, &polled);
  if (estimate > 0) {
    if (observer_ != nullptr) observer_(observer_context_, now, estimate, 0, 0);
    controller_->Charge(estimate, now);
    controller_->ClaimTurn(estimate, now);
  }
  Apply(polled, now);
}

void ComputeLimiter::ObserveCharges(ChargeObserver observer, void* context) {
  observer_context_ = context;
  observer_ = observer;
}

LaunchTicket ComputeLimiter::WaitForAdmission(StreamKey stream, Clock* clock, Sleeper* sleeper) {
  LaunchTicket ticket;
  for (;;) {
    int64_t wait = BeforeLaunch(stream, clock->NowNs(), &ticket);
    if (wait <= 0) return ticket;
    sleeper->SleepNs(wait);
  }
}

void ComputeLimiter::BeforeSynchronize(int64_t now) { tracker_->Flush(now); }

void ComputeLimiter::BeforeWait(int64_t now, const StreamKey* stream) { tracker_->FlushBeforeWait(now, stream); }

void ComputeLimiter::OnStreamDestroyed(StreamKey stream, int64_t now) {
  tracker_->OnStreamDestroyed(stream, now);
}

void ComputeLimiter::Tick(int64_t now) {
  Apply(tracker_->Tick(now), now);
  controller_->SetLaunchSpan(tracker_->LaunchSpanNs(now));
  controller_->SetOverlap(tracker_->Overlap());
  if (tracker_->HasPendingWork()) {
    controller_->NoteActivity(now);
  } else {
    controller_->ReleaseTurn(now);  // done before its estimate: others need not wait for it
  }
  controller_->MaybeUpdate(now);
}

void ComputeLimiter::Reset(bool destroy_events) { tracker_->Reset(destroy_events); }

}  // namespace vgpu::compute
