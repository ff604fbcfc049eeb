#include "compute/busy_tracker.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "compute/splitmix.h"

namespace vgpu::compute {

void PollResult::Add(const PollResult& other) {
  busy_ns += other.busy_ns;
  estimated_ns += other.estimated_ns;
  unmeasured_ns += other.unmeasured_ns;
  intervals += other.intervals;
}

namespace {

// A tracker's name in its container's BusyRing: splitmix64 of the pid and the object's address
// (processes of one container have distinct pids; a collision only means that two processes
// do not subtract each other's intervals).
uint64_t RingToken(const void* self) {
  const uint64_t z = SplitMix64((static_cast<uint64_t>(getpid()) << 32) ^ reinterpret_cast<uintptr_t>(self));
  return z != 0 ? z : 1;
}

// Windows of `length` that look back one to two of them (the span and the begins' delay): the
// current one, with its start_ns, and the one before it. At `now` a new current window opens
// once the current one is `length` old; the old one becomes the one before, unless it is older
// than two lengths.
template <typename Window>
void RotateWindows(Window* current, Window* before, int64_t now, int64_t length) {
  if (now - current->start_ns < length) return;
  *before = now - current->start_ns < 2 * length ? *current : Window{};
  *current = Window{};
  current->start_ns = now;
}

// What the windows say at `now`: false when the current one is two lengths old (nothing lately);
// else *previous is the one before it while the current one is younger than a length, an empty
// window once it is older.
template <typename Window>
bool RecentWindows(const Window& current, const Window& before, int64_t now, int64_t length, Window* previous) {
  const int64_t age = now - current.start_ns;
  if (age >= 2 * length) return false;
  *previous = age < length ? before : Window{};
  return true;
}

}  // namespace

BusyTracker::BusyTracker(GpuEventOps* ops, const BusyTrackerOptions& options, BusyRing* ring)
    : ops_(ops), options_(options), union_(512), ring_(ring), ring_token_(RingToken(this)) {}

BusyTracker::~BusyTracker() { Reset(true); }

// --- Streams -------------------------------------------------------------------------------

int BusyTracker::FindOrCreateLocked(StreamKey stream) {
  auto it = index_.find(stream);
  if (it != index_.end()) return it->second;
  if (static_cast<int>(index_.size()) >= options_.max_streams) return -1;
  int slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<int>(slots_.size());
    slots_.emplace_back();
  }
  StreamState& st = slots_[slot];
  uint32_t generation = st.generation + 1;
  st = StreamState{};
  st.key = stream;
  st.generation = generation;
  st.in_use = true;
  st.window = options_.probe_launches;
  index_.emplace(stream, slot);
  ++stats_.streams;
  return slot;
}

void BusyTracker::FreeSlotLocked(int slot) {
  StreamState& st = slots_[slot];
  uint32_t generation = st.generation;
  st = StreamState{};
  st.generation = generation;
  free_slots_.push_back(slot);
}

double BusyTracker::EstimateLocked(const StreamState& st) const {
  if (st.has_estimate) return st.estimate_ns;
  return has_default_estimate_ ? default_estimate_ns_ : 0.0;
}

// The estimate of a launch of one kind (StreamState::kinds): its kind's, once learned.
double BusyTracker::EstimateLocked(const StreamState& st, bool graph) const {
  const KindEstimate& kind = st.kinds[graph ? 1 : 0];
  return kind.launches > 0 ? kind.busy_ns / kind.launches : EstimateLocked(st);
}

// The slower average of a kind's cost, for light tails (BusyTrackerOptions::light_estimate_gain).
double BusyTracker::SlowEstimateLocked(const StreamState& st, bool graph) const {
  const KindEstimate& kind = st.kinds[graph ? 1 : 0];
  return kind.slow_launches > 0 ? kind.slow_busy_ns / kind.slow_launches : EstimateLocked(st, graph);
}

// --- Events --------------------------------------------------------------------------------

bool BusyTracker::AcquireEventLocked(EventId* event) {
  if (!free_events_.empty()) {
    *event = free_events_.back();
    free_events_.pop_back();
    return true;
  }
  if (events_exhausted_ || static_cast<int>(all_events_.size()) >= options_.max_events) return false;
  if (!ops_->Create(event)) {
    events_exhausted_ = true;  // do not retry a failing create on every launch
    ++stats_.event_errors;
    return false;
  }
  all_events_.push_back(*event);
  ++stats_.events_created;
  return true;
}

void BusyTracker::ReleaseEventLocked(EventId event) { free_events_.push_back(event); }

// Records a begin (before a launch, idle stream) or a mark closing the tail (after launches).
bool BusyTracker::RecordLocked(StreamState& st, bool begin, bool deep, int64_t now) {
  if (static_cast<int>(st.pending.size()) >= options_.max_pending_per_stream) return false;
  EventId event;
  if (!AcquireEventLocked(&event)) return false;
  if (!ops_->Record(event, st.key)) {
    ReleaseEventLocked(event);
    ++stats_.event_errors;
    return false;
  }
  // Everything unfinished on the stream runs before the event: at the rate the queue drains,
  // the event is not done for a while.
  const double ahead = static_cast<double>(st.pending_launches + (begin ? 0 : st.tail_launches));
  const double drain_ns = options_.poll_delay_fraction * ahead * QueuedCostLocked(st);
  const int64_t due = now + std::llround(std::min(drain_ns, static_cast<double>(options_.max_inflight_work_ns)));
  st.pending.push_back(PendingMark{event, begin ? 0 : st.tail_launches, begin,
                                   !begin && st.gap_unmarked, deep, begin ? 0 : st.tail_estimate_ns,
                                   now, own_horizon_, due, begin ? 0 : st.tail_first_return_ns,
                                   begin ? 0 : st.last_launch_ns, begin ? 0 : st.tail_graphs,
                                   !begin && st.tail_light, begin ? 0 : st.tail_light_estimate_ns});
  st.gap_unmarked = false;
  ++stats_.marks;
  if (begin) ++stats_.begins;
  st.pending_launches += begin ? 0 : st.tail_launches;
  st.pending_estimate_ns += begin ? 0 : st.tail_estimate_ns;
  st.last_event = event;
  st.has_last_event = true;
  st.last_event_is_begin = begin;
  st.tail_launches = 0;
  st.tail_graphs = 0;
  st.tail_light = false;
  st.tail_light_estimate_ns = 0;
  st.tail_estimate_ns = 0;
  st.last_mark_ns = now;
  return true;
}

// Closes the tail with a mark and adapts K: if the previous mark is still pending (and the
// stream's latest intervals were deep by their launches' returns: QueuedDeepLocked), the queue
// held the whole tail, so no gap can hide in it and marks can be sparser; otherwise denser. A
// uniform stream's marks grow sparser either way: its intervals that may hide a gap are capped
// (ProcessMarkLocked), so K need not stay small to see its gaps, and a stream of tiny kernels
// launched slower than they run (the previous mark always complete) would otherwise keep K at
// 1-2 and pay a mark and a query per launch or two. A begin says nothing about depth (it was
// recorded right before the tail, on an idle stream).
void BusyTracker::MarkTailLocked(StreamState& st, int64_t now) {
  if (st.tail_launches == 0) return;
  bool previous_pending = false;
  bool deep = false;
  if (st.has_last_event && !st.last_event_is_begin) {
    previous_pending = QueryLastEventLocked(st) == EventState::kNotReady;
    // Pending, but the latest intervals' launches were not all queued behind the marks before
    // them (their returns say so): the launches may still be on their way to the GPU, and the
    // queue is not known to be deep.
    deep = previous_pending && QueuedDeepLocked(st);
    if (deep || UniformCostLocked(st)) {
      st.mark_interval = std::min(st.mark_interval * 2, options_.max_mark_interval);
    } else {
      st.mark_interval = std::max(st.mark_interval / 2, 1);
    }
  }
  if (st.exact_left > 0 && !deep) st.mark_interval = 1;  // a light measurement's exact window stays dense
  st.last_mark_deep = deep;
  RecordLocked(st, /*begin=*/false, previous_pending, now);
  // On failure the tail stays open and is retried at the next launch (its estimate stands in).
}

// Whether nothing submitted to the stream is still running. Only answerable when the tail is
// empty (the last event follows every launch).
bool BusyTracker::StreamIdleLocked(StreamState& st) {
  if (st.tail_launches > 0) return false;
  if (!st.has_last_event) return true;
  const EventState state = QueryLastEventLocked(st);
  if (state == EventState::kNotReady) return false;
  if (state == EventState::kError) ++stats_.event_errors;
  return true;  // complete (or broken: restart the chain either way)
}

// While a tail grows (checked at tail lengths 1, 2, 4, 8, ...: log2(K) queries per K launches),
// a completed last mark means the queue is shallower than the tail: the stream may run dry
// between launches, where only K = 1 sees the gaps. Mark from this launch on.
void BusyTracker::CollapseIntervalIfShallowLocked(StreamState& st) {
  int32_t tail = st.tail_launches;
  if (tail == 0 || (tail & (tail - 1)) != 0 || st.mark_interval == 1) return;
  if (!st.has_last_event || st.last_event_is_begin || UniformCostLocked(st)) return;
  if (QueryLastEventLocked(st) != EventState::kNotReady) st.mark_interval = 1;
}

// Asks about the stream's last event. Complete: so is every event recorded before it on the
// stream (a stream runs in order), and the poll need not ask about them again.
EventState BusyTracker::QueryLastEventLocked(StreamState& st) {
  PendingMark* mark = !st.pending.empty() && st.pending.back().event == st.last_event ? &st.pending.back() : nullptr;
  const EventState state = QueryEventLocked(st.last_event, mark);
  if (state == EventState::kReady) st.pending_known_done = static_cast<int32_t>(st.pending.size());
  return state;
}

// Whether `event` is complete: asked against the anchor, complete by definition, where there is
// one (GpuEventOps::QueryAgainst: on the driver a query's first look at a completed event costs
// 13 times its look at a pending one, and most of the tracker's questions are about events
// complete by then); before the first event is processed, a plain query.
EventState BusyTracker::QueryEventLocked(EventId event, PendingMark* mark) {
  ++stats_.queries;
  if (!has_anchor_ || anchor_ == event) return ops_->Query(event);
  float ms = 0;
  const EventState state = ops_->QueryAgainst(anchor_, event, &ms);
  if (mark != nullptr && state == EventState::kReady && std::isfinite(ms)) {
    mark->elapsed_anchor = anchor_serial_;
    mark->elapsed_ms = ms;
  }
  return state;
}

// Whether the stream's latest intervals were deep by their launches' return times (at least
// queued_run_to_grow in a row: BusyTrackerOptions::visible_slack_ns); without a BusyRing (no
// clocks' offset) or without a least launch delay lately, the marks' pending state alone decides.
bool BusyTracker::QueuedDeepLocked(const StreamState& st) const {
  int64_t delay = 0;
  return !LaunchDelayLocked(&delay) || st.queued_run >= options_.queued_run_to_grow;
}

bool BusyTracker::UniformCostLocked(const StreamState& st) const {
  return st.deep_samples >= options_.uniform_min_samples &&
         st.deep_max_ns <= options_.uniform_cost_ratio * st.deep_cost_ns &&
         st.single_max_ns <= SingleBoundLocked(st);
}

// What a launch measured alone may cost on a uniform stream (BusyTrackerOptions).
double BusyTracker::SingleBoundLocked(const StreamState& st) const {
  return options_.uniform_cost_ratio * st.deep_max_ns + static_cast<double>(options_.uniform_idle_slack_ns);
}

// Whether the host mostly launches on the stream slower than its deep intervals say a launch
// costs (from one launch call's start to the next one's, longer than launch_slower_ratio x that
// cost, for most launches; on an H200 the time between the calls alone missed a stream of 4 us
// kernels launched every ~11 us, docs/benchmarks.md 2026-11-27): its queue runs dry between cheap
// launches, so an expensive one among them starts on an idle stream and no deep interval sees it.
// Launches measured alone count only on such streams: elsewhere a begin-bracketed launch may have
// waited for another container's work at a turn's hand-over, and a cost read from that would end
// a uniform standing the cap needs there (SharingTest.ContainersFillingTheGpuEachGetTheirShare).
bool BusyTracker::LaunchedSlowerLocked(const StreamState& st) const {
  return st.slower_share > 0.5;
}

// Whether to measure this launch of a uniform stream alone (one launched slower than its deep
// intervals' cost per launch, whose last mark found the queue run dry: a deep queue's intervals
// see every kind of launch): drawn at random, so that a mix of launches repeating with any period
// is sampled evenly.
bool BusyTracker::DrawSampleLocked() { return DrawLocked(options_.uniform_sample_every); }

// True one time in `every`, at random (never when `every` <= 0).
bool BusyTracker::DrawLocked(int every) {
  sample_rng_ ^= sample_rng_ << 13;
  sample_rng_ ^= sample_rng_ >> 7;
  sample_rng_ ^= sample_rng_ << 17;
  return every > 0 && sample_rng_ % static_cast<uint64_t>(every) == 0;
}

// --- Launch path ---------------------------------------------------------------------------

// How much a stream may have queued: at most `window` unfinished launches, and at most
// max_inflight_work_ns of work at the rate its queue drains.
BusyTracker::QueueLimit BusyTracker::InflightLimitLocked(const StreamState& st, int64_t now) const {
  int64_t unfinished = st.pending_launches + st.tail_launches;
  if (unfinished >= st.window) return QueueLimit::kWindow;
  if (static_cast<double>(unfinished) * QueuedCostLocked(st) > static_cast<double>(options_.max_inflight_work_ns)) {
    return QueueLimit::kWork;
  }
  if (!st.pending.empty() && now - st.pending.front().host_ns > options_.max_inflight_age_ns) {
    return QueueLimit::kAge;
  }
  return QueueLimit::kNone;
}

// The cost per launch of a stream's queue, in wall time: its measured intervals' total length
// over their launches (decaying sums), else the estimate. Not the union busy time each interval
// added: with several streams, the interval that reaches the union first is credited with time
// the other streams' kernels shared, so single intervals read far above their launches' cost (a
// decaying maximum of those made one host thread feeding 16 streams of 50 us kernels wait 16% of
// its time on an H200). A ratio of sums also keeps one long interval of one launch (a kernel that
// waited for the SMs) from counting for the whole queue.
double BusyTracker::QueuedCostLocked(const StreamState& st) const {
  return st.drain_launches > 0 ? st.drain_span_ns / st.drain_launches : EstimateLocked(st);
}

int64_t BusyTracker::BeforeLaunch(StreamKey stream, int64_t now, LaunchTicket* ticket, PollResult* polled,
                                  bool banked) {
  std::lock_guard<std::mutex> lock(mu_);
  *ticket = LaunchTicket{};
  int slot = FindOrCreateLocked(stream);
  if (slot < 0) return 0;  // table full: launch untracked (estimated by the caller's default)
  StreamState& st = slots_[slot];
  QueueLimit limit = InflightLimitLocked(st, now);
  if (limit != QueueLimit::kNone) {
    MarkTailLocked(st, now);  // so that the wait can observe the tail's completion
    if (polled != nullptr) {  // what completed no longer counts as queued
      polled->Add(PollLocked(now));
      limit = InflightLimitLocked(st, now);
    }
  }
  if (limit != QueueLimit::kNone) {
    if (!st.pending.empty()) {
      ++stats_.queue_waits;
      stats_.queue_wait_ns += options_.probe_wait_ns;
      ++(limit == QueueLimit::kWindow ? stats_.queue_waits_window
         : limit == QueueLimit::kWork ? stats_.queue_waits_work
                                      : stats_.queue_waits_age);
      return options_.probe_wait_ns;
    }
    // Nothing to wait for (no events available): measuring is impossible, launch unmetered.
  }
  const bool light_set = light_.load(std::memory_order_relaxed);
  const bool by_bank = !light_set && banked && bank_light_.load(std::memory_order_relaxed);
  const bool alone = other_stream_ns_ == 0 || now - other_stream_ns_ >= options_.light_alone_ns;
  bool light = (light_set || by_bank) && alone;
  if (!light) {
    st.exact_left = 0;  // a window ends with light measurement (its dense marks with it)
  } else if (st.exact_left > 0 || DrawLocked(options_.light_window_every)) {
    // A window measured exactly (light_window_every): the light tail closed first, dense marks
    // unless the queue is deep (its intervals hold no gap whatever their length: a mark per
    // launch would only cost the stream's kernels GPU time).
    if (st.exact_left == 0) {
      st.exact_left = std::max(options_.light_window_launches, 1);
      if (st.tail_light) MarkTailLocked(st, now);
      if (!st.last_mark_deep) st.mark_interval = 1;
    }
    --st.exact_left;
    light = false;
  }
  if (!light) CollapseIntervalIfShallowLocked(st);
  st.sampling = !st.last_mark_deep && LaunchedSlowerLocked(st) && UniformCostLocked(st) && DrawSampleLocked();
  if (st.sampling) MarkTailLocked(st, now);  // the sampled launch starts an interval
  if (st.tail_launches == 0) st.tail_light = light && !st.sampling;
  if (StreamIdleLocked(st)) {
    if (light && !st.sampling) {
      // Light: no begin. The interval to come may hold this idle gap: its estimate stands
      // (gap_unmarked), and its tail is marked every few launches (the queue's window allowing).
      st.gap_unmarked = true;
      st.mark_interval = std::max(1, std::min(options_.light_mark_interval, st.window / 2));
      ++stats_.light_launches;
      if (by_bank) ++stats_.light_banked;
    } else {
      if (light_set && !alone) ++stats_.light_not_alone;
      if (!light_set && light_wanted_.load(std::memory_order_relaxed)) ++stats_.light_held;
      // The queue starts empty: mark densely until it is seen deep again (a uniform stream's
      // intervals are capped instead, and its marks stay sparse).
      if (!UniformCostLocked(st)) st.mark_interval = 1;
      if (!RecordLocked(st, /*begin=*/true, /*deep=*/false, now)) {
        st.gap_unmarked = true;  // the next interval would include the idle gap: do not measure it
      }
    }
  }
  ticket->slot = slot;
  ticket->generation = st.generation;
  ticket->submit_ns = now;
  return 0;
}

int64_t BusyTracker::AfterLaunch(const LaunchTicket& ticket, bool launched, int64_t now,
                                 PollResult* polled) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!launched) return 0;
  ++stats_.launches;
  int64_t estimate = 0;
  if (ticket.slot >= 0 && slots_[ticket.slot].generation == ticket.generation &&
      slots_[ticket.slot].in_use && !slots_[ticket.slot].retired) {
    StreamState& st = slots_[ticket.slot];
    const bool graph = !ticket.starts_after_return;
    estimate = std::llround(EstimateLocked(st, graph));
    if (st.tail_light) st.tail_light_estimate_ns += std::llround(SlowEstimateLocked(st, graph));
    if (graph) ++st.tail_graphs;
    if (st.last_submit_ns > 0) {  // a share, not a mean: a rest between two launches is one period
      const bool slower = static_cast<double>(ticket.submit_ns - st.last_submit_ns) >
                          options_.launch_slower_ratio * st.deep_cost_ns;
      st.slower_share += options_.estimate_gain * ((slower ? 1.0 : 0.0) - st.slower_share);
    }
    st.last_submit_ns = ticket.submit_ns;
    if (st.tail_launches == 0) st.tail_first_return_ns = ticket.starts_after_return ? now : 0;
    st.tail_launches += 1;
    st.tail_estimate_ns += estimate;
    st.last_launch_ns = now;
    st.last_launch_seq = ++launch_seq_;
    if (ticket.slot != last_launch_slot_) {
      if (last_launch_slot_ >= 0) other_stream_ns_ = now;
      last_launch_slot_ = ticket.slot;
    }
    if (st.tail_launches >= st.mark_interval || now - st.last_mark_ns >= options_.max_mark_age_ns || st.sampling) {
      MarkTailLocked(st, now);
    }
    st.sampling = false;
  } else if (has_default_estimate_) {
    estimate = std::llround(default_estimate_ns_);  // untracked: the estimate is the charge
  }
  if (now - last_poll_ns_ >= options_.poll_period_ns && polled != nullptr) {
    polled->Add(PollLocked(now));
  }
  return estimate;
}

void BusyTracker::SetLight(bool light, int64_t now) {
  light_wanted_.store(light, std::memory_order_relaxed);
  light_.store(light && now >= light_hold_until_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void BusyTracker::EndLight(int64_t now) {
  light_hold_until_.store(now + options_.light_hold_ns, std::memory_order_relaxed);
  light_.store(false, std::memory_order_relaxed);
}

// Under light measurement a tail that began with a launch onto an idle stream without a begin is
// charged its estimates wherever it ends (gap_unmarked): a mark placed before a wait would only
// delay the wait by its trip to the GPU.
bool BusyTracker::LightTailLocked(const StreamState& st) const {
  return st.gap_unmarked && light_.load(std::memory_order_relaxed);
}

void BusyTracker::Flush(int64_t now) {
  std::lock_guard<std::mutex> lock(mu_);
  for (StreamState& st : slots_) {
    if (st.in_use && !st.retired && !LightTailLocked(st)) MarkTailLocked(st, now);
  }
}

void BusyTracker::FlushBeforeWait(int64_t now, const StreamKey* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  for (StreamState& st : slots_) {
    if (!st.in_use || st.retired || st.tail_launches == 0 || LightTailLocked(st)) continue;
    if ((stream != nullptr && st.key == *stream) || st.last_launch_seq == launch_seq_ ||
        QueuedCostLocked(st) >= static_cast<double>(options_.cheap_mark_launch_ns) || TailDueLocked(st, now)) {
      MarkTailLocked(st, now);
    }
  }
}

PollResult BusyTracker::Tick(int64_t now) {
  std::lock_guard<std::mutex> lock(mu_);
  PollResult result = PollLocked(now);  // first: what completed no longer counts as queued
  for (StreamState& st : slots_) {
    if (st.in_use && !st.retired && st.tail_launches > 0 && TailDueLocked(st, now)) {
      MarkTailLocked(st, now);
    }
  }
  return result;
}

// How old a tail must be before Tick closes it: a stream that may have run dry needs its mark
// soon (else the idle time after its last launch counts as busy), but marks on streams that
// others launched on since cost a GPU whose streams share hardware queues concurrency (measured,
// not explained: docs/compute.md). So a tail that is not the last thing launched is left open
// until its queue may be about to run dry: tick_flush_margin_ns before the launches unfinished at
// its last launch are drained at the rate it drains, but no longer than max_tick_flush_delay_ns
// (an estimate too long). Where the queue drains faster, the time from its end to the mark counts
// as busy, which costs only where no other stream of the process kept the GPU busy meanwhile.
int64_t BusyTracker::TickFlushAgeLocked(const StreamState& st) const {
  if (st.last_launch_seq == launch_seq_) return options_.tick_flush_age_ns;  // nothing behind it
  const double drain_ns = static_cast<double>(st.pending_launches + st.tail_launches) * QueuedCostLocked(st);
  const double wait_ns = std::min(drain_ns - static_cast<double>(options_.tick_flush_margin_ns),
                                  static_cast<double>(options_.max_tick_flush_delay_ns));
  return std::max(options_.tick_flush_age_ns, static_cast<int64_t>(wait_ns));
}

// Whether Tick closes the stream's open tail now (FlushBeforeWait closes it too).
bool BusyTracker::TailDueLocked(const StreamState& st, int64_t now) const {
  return now - st.last_launch_ns >= TickFlushAgeLocked(st);
}

bool BusyTracker::HasPendingWork() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const StreamState& st : slots_) {
    if (st.in_use && (st.tail_launches > 0 || st.pending_launches > 0)) return true;
  }
  return false;
}

void BusyTracker::OnStreamDestroyed(StreamKey stream, int64_t now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(stream);
  if (it == index_.end()) return;
  int slot = it->second;
  index_.erase(it);
  StreamState& st = slots_[slot];
  MarkTailLocked(st, now);
  if (st.pending.empty()) {
    FreeSlotLocked(slot);
  } else {
    st.retired = true;  // PollLocked frees it once drained
  }
}

void BusyTracker::Reset(bool destroy_events) {
  std::lock_guard<std::mutex> lock(mu_);
  if (destroy_events) {
    for (EventId e : all_events_) ops_->Destroy(e);
  }
  all_events_.clear();
  free_events_.clear();
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].in_use) FreeSlotLocked(static_cast<int>(i));
  }
  index_.clear();
  union_ = IntervalUnion(512);
  own_horizon_ = std::numeric_limits<int64_t>::min();
  has_offset_ = false;
  delay_now_ = delay_before_ = DelayWindow{};
  delay_excess_ns_ = 0;
  has_anchor_ = false;
  events_exhausted_ = false;
}

void BusyTracker::ObserveIntervals(IntervalObserver observer, void* context) {
  observer_ = observer;
  observer_context_ = context;
}

TrackerStats BusyTracker::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

// --- Completion path -----------------------------------------------------------------------

// GPU time of a completed event on the tracker's common time base.
bool BusyTracker::AbsoluteTimeLocked(const PendingMark& mark, int64_t* time) {
  const EventId event = mark.event;
  if (!has_anchor_) {
    anchor_ = event;
    has_anchor_ = true;
    ++anchor_serial_;
    anchor_time_ns_ = 0;
    *time = 0;
    return true;
  }
  float ms = mark.elapsed_ms;
  const bool read = mark.elapsed_anchor == anchor_serial_;  // by the query that found it complete
  if (!read && (!ops_->ElapsedMs(anchor_, event, &ms) || !std::isfinite(ms))) {
    ++stats_.event_errors;
    return false;
  }
  *time = anchor_time_ns_ + std::llround(static_cast<double>(ms) * 1e6);
  if (std::llabs(*time - anchor_time_ns_) > options_.rebase_after_ns) {
    ReleaseEventLocked(anchor_);  // the newer event becomes the anchor (float precision)
    anchor_ = event;
    ++anchor_serial_;
    anchor_time_ns_ = *time;
  }
  return true;
}

// Learns from a measured interval: the per-launch estimate, how fast the stream's queue
// drains (for the queued-work bound), and the stream's window of unfinished launches,
// which grows by the launches that completed (slow start) and halves when the work turned out
// much larger than estimated (the estimate cannot be trusted to bound the queue).
void BusyTracker::LearnLocked(StreamState& st, const PendingMark& mark, const Measured& m) {
  const int64_t busy_ns = m.busy_ns;
  const int64_t span_ns = m.span_ns;
  if (mark.launches <= 0) return;
  double per_launch = static_cast<double>(busy_ns) / mark.launches;
  double g = options_.estimate_gain;
  // A ratio of decaying sums, not an average of the intervals' ratios: with several streams an
  // interval of one launch may be credited with milliseconds the other streams' kernels shared
  // (it reached the union first); weighted by its launches it moves the estimate little.
  st.estimate_busy_ns = st.estimate_busy_ns * (1 - g) + static_cast<double>(busy_ns);
  st.estimate_launches = st.estimate_launches * (1 - g) + mark.launches;
  st.estimate_ns = st.estimate_busy_ns / st.estimate_launches;
  st.has_estimate = true;
  if (mark.graphs == 0 || mark.graphs == mark.launches) {  // one kind only
    KindEstimate& kind = st.kinds[mark.graphs == 0 ? 0 : 1];
    kind.busy_ns = kind.busy_ns * (1 - g) + static_cast<double>(busy_ns);
    kind.launches = kind.launches * (1 - g) + mark.launches;
    if (!mark.light) {  // what the light tails are charged (light_estimate_gain)
      const double slow = options_.light_estimate_gain;
      kind.slow_busy_ns = kind.slow_busy_ns * (1 - slow) + static_cast<double>(busy_ns);
      kind.slow_launches = kind.slow_launches * (1 - slow) + mark.launches;
    }
  }
  default_estimate_ns_ = has_default_estimate_
                             ? default_estimate_ns_ + g * (per_launch - default_estimate_ns_)
                             : per_launch;
  has_default_estimate_ = true;
  const bool had_drain = st.drain_launches > 0;
  const double drain_before = QueuedCostLocked(st);
  st.drain_span_ns = st.drain_span_ns * options_.max_cost_decay + static_cast<double>(span_ns);
  st.drain_launches = st.drain_launches * options_.max_cost_decay + mark.launches;
  // The uniform-cost learning reads the interval's own length per launch (a deep interval: the
  // queue never ran dry), what the cap on a possibly gapped interval bounds. Not the union busy
  // time it added: with several streams that is a fraction of its length, and a cap from it cut
  // the intervals after every idle start short (a container under-measured its busy time).
  // A launch measured alone with the time before it could start cut off (Measured::bounded) is
  // such a sample too: a stream whose queue runs dry between its launches has no deep intervals.
  const double span_per_launch = static_cast<double>(m.deep ? span_ns : m.own_ns) / mark.launches;
  if (m.alone && LaunchedSlowerLocked(st)) {
    // One launch measured alone (UniformCostLocked), on a stream where that tells something
    // (LaunchedSlowerLocked).
    st.single_max_ns = std::max(static_cast<double>(m.own_ns), st.single_max_ns * options_.single_max_decay);
  }
  const bool sample = m.deep || (m.alone && m.bounded);
  if (sample && mark.launches <= options_.uniform_max_launches) {
    // Few launches per interval: their costs show how much single launches differ (an interval
    // of many launches averages that away).
    st.deep_cost_ns = st.deep_samples > 0 ? st.deep_cost_ns + g * (span_per_launch - st.deep_cost_ns) : span_per_launch;
    st.deep_max_ns = std::max(span_per_launch, st.deep_max_ns * options_.max_cost_decay);
    st.deep_samples = std::min(st.deep_samples + 1, 1 << 30);
  } else if (sample && span_per_launch > options_.uniform_cost_ratio * st.deep_max_ns) {
    st.deep_samples = 0;  // the launches got more expensive: not uniform until re-learned
    st.deep_max_ns = 0;
  }
  // Much more work than expected: once the stream's drain rate is known, when it doubled (one
  // long interval among many launches moves it little; a stream whose kernels became far longer
  // moves it at once); before, against the estimate charged for the interval.
  const bool undershoot =
      had_drain ? QueuedCostLocked(st) > 2 * drain_before && span_ns - mark.launches * drain_before > 1e6
                : busy_ns > 2 * mark.estimate_ns && busy_ns - mark.estimate_ns > 1'000'000;
  st.window = undershoot ? std::max(st.window / 2, options_.probe_launches)
                         : std::min(st.window + mark.launches, options_.max_inflight_launches);
}

PollResult BusyTracker::ProcessMarkLocked(StreamState& st, const PendingMark& mark) {
  PollResult result;
  int64_t time = 0;
  bool timed = AbsoluteTimeLocked(mark, &time);
  if (timed) {
    NoteOffsetLocked(mark.host_ns, last_poll_ns_, time);
    if (mark.begin) NoteBeginDelayLocked(time - mark.host_ns, last_poll_ns_);
  }
  if (!(has_anchor_ && anchor_ == mark.event)) ReleaseEventLocked(mark.event);
  if (st.has_last_event && st.last_event == mark.event) st.has_last_event = false;
  st.pending_launches -= mark.launches;
  st.pending_estimate_ns -= mark.estimate_ns;
  if (!mark.begin) {
    result.intervals = 1;
    result.estimated_ns = mark.estimate_ns;
    if (timed && st.chain_open && !mark.unmeasurable) {
      const int64_t span = std::max<int64_t>(time - st.chain_time_ns, 0);  // the interval's own length
      if (mark.launches > 0) NoteSpanLocked(st, span / mark.launches, mark.host_ns);
      int64_t begin = st.chain_time_ns;
      const int64_t skew = options_.mark_gpu_ns + (st.chain_from_begin ? options_.begin_skew_ns : 0);
      begin += std::min(skew, (time - begin) / 2);
      bool deep = mark.deep;
      bool bounded = false;
      int64_t delay = 0;  // on the event clock
      if (LaunchDelayLocked(&delay)) {  // BusyTrackerOptions::visible_slack_ns
        if (mark.first_return_ns > 0) {
          const int64_t excess = std::llround(options_.start_delay_excess * delay_excess_ns_);
          begin = std::max(begin, std::min(mark.first_return_ns + delay + excess - options_.visible_slack_ns, time));
          bounded = true;
        }
        deep = st.chain_time_ns >= mark.last_return_ns + delay + options_.queued_margin_ns;
        st.queued_run = deep ? std::min(st.queued_run + 1, 1 << 30) : 0;
      }
      // A tail of several launches submitted under light measurement, which does not look for
      // idle starts inside it (K stays at light_mark_interval): unless its queue was deep, the
      // stream may have run dry between its launches, and its length would count those gaps
      // (a host-paced stream charged ~25% too much in the simulation). Its estimates stand.
      if (mark.light && !deep && mark.launches > 1) {
        result.busy_ns = mark.light_estimate_ns;
        result.unmeasured_ns = mark.light_estimate_ns;
      } else {
        // One launch measured alone: queued behind others, bracketed by a begin, or with the time
        // before it could start cut off; its own time (what it cost from the start the bound
        // allows), else the interval's length.
        Measured m;
        m.deep = deep;
        m.bounded = bounded;
        m.alone = mark.launches == 1 && (deep || st.chain_from_begin || bounded);
        m.own_ns = bounded ? time - begin : span;
        m.span_ns = span;
        if (!deep && UniformCostLocked(st)) {
          // A gap may hide in this interval: at most `launches` uniform launches ran in it (with
          // the ratio as slack: the decaying maximum may sit below a launch seen a while ago).
          const int64_t cap = std::llround(mark.launches * st.deep_max_ns * options_.uniform_cost_ratio);
          // But the GPU idles only while it waits for work not yet submitted: after the event that
          // starts the interval was recorded and before this mark reached the GPU. The rest of the
          // interval was busy, whatever the cap says (launches submitted in a burst and
          // synchronised: a step of a server, where one expensive launch among cheap ones is not a
          // gap). More than the cap surely busy: the launches are not uniform (K shrinks, costs are
          // learned again).
          const int64_t may_idle = std::max<int64_t>(mark.host_ns - st.chain_host_ns, 0) + options_.submit_slack_ns;
          const int64_t surely_busy = (time - begin) - may_idle;
          if (surely_busy > cap) {
            st.deep_samples = 0;
            st.deep_max_ns = 0;
          }
          begin = std::max(begin, time - std::max(cap, surely_busy));
        }
        result.busy_ns = AddOwnLocked(begin, time);
        NoteOverlapLocked(time - begin, result.busy_ns);
        m.busy_ns = result.busy_ns;
        LearnLocked(st, mark, m);
      }
    } else {
      // Interval not measurable: the estimate stands (a light tail's, the slower one).
      result.busy_ns = mark.light ? mark.light_estimate_ns : mark.estimate_ns;
      result.unmeasured_ns = result.busy_ns;
    }
  }
  st.chain_open = timed;
  st.chain_time_ns = time;
  st.chain_host_ns = mark.host_ns;
  st.chain_from_begin = mark.begin;
  return result;
}

// --- Processes of one container: the BusyRing ----------------------------------------------

// CLOCK_MONOTONIC = time + offset. No event completes before it was recorded, nor after the poll
// that found it complete: host_ns - time <= offset <= seen_ns - time. The tightest bounds seen
// are kept, each loosened by the drift the clocks may have had since (max_clock_drift_ppm), and
// the estimate is their middle. Each bound tightens its own way: the lower one with any event
// that ran as soon as it was recorded (a begin on a GPU nobody else holds), the upper one with
// any event a poll found soon after it completed (polls come every poll_period_ns while a
// process launches); the middle is off by at most half of what is still unknown.
void BusyTracker::NoteOffsetLocked(int64_t host_ns, int64_t seen_ns, int64_t time) {
  if (ring_ == nullptr) return;
  const int64_t low = host_ns - time;
  const int64_t high = seen_ns - time;
  if (has_offset_) {
    const int64_t elapsed = std::max<int64_t>(seen_ns - offset_noted_ns_, 0);
    const int64_t drift = elapsed / 1'000'000 * options_.max_clock_drift_ppm;
    offset_low_ns_ = std::max(offset_low_ns_ - drift, low);
    offset_high_ns_ = std::min(offset_high_ns_ + drift, high);
  } else {
    offset_low_ns_ = low;
    offset_high_ns_ = high;
    has_offset_ = true;
  }
  offset_noted_ns_ = std::max(offset_noted_ns_, seen_ns);
  host_offset_ns_ = offset_low_ns_ + std::max<int64_t>(offset_high_ns_ - offset_low_ns_, 0) / 2;
}

// A begin (an event recorded on an idle stream) completed delay_ns after its record (the event's
// time less the host's clock at the record: the clocks' offset is in it, as in every D).
void BusyTracker::NoteBeginDelayLocked(int64_t delay_ns, int64_t now) {
  RotateWindows(&delay_now_, &delay_before_, now, options_.delay_window_ns);
  delay_now_.least_ns = std::min(delay_now_.least_ns, delay_ns);
  int64_t least = 0;
  if (options_.start_delay_excess > 0 && LaunchDelayLocked(&least)) {
    const double excess = static_cast<double>(std::clamp<int64_t>(delay_ns - least, 0, options_.max_delay_excess_ns));
    delay_excess_ns_ += options_.estimate_gain * (excess - delay_excess_ns_);
  }
}

// D (BusyTrackerOptions::visible_slack_ns): the least delay of the begins of the last one to two
// delay windows, never more than the clocks' offset's lower bound allows (an older begin, its
// bound loosened by the drift since). False without a BusyRing or without begins lately.
bool BusyTracker::LaunchDelayLocked(int64_t* delay_ns) const {
  DelayWindow previous;
  if (!has_offset_ ||
      !RecentWindows(delay_now_, delay_before_, last_poll_ns_, options_.delay_window_ns, &previous)) {
    return false;
  }
  const int64_t least = std::min(delay_now_.least_ns, previous.least_ns);
  if (least == std::numeric_limits<int64_t>::max()) return false;
  *delay_ns = std::min(least, -offset_low_ns_);
  return true;
}

// This process's interval: what it adds to the union (its own and the others' intervals), then
// published for the others.
int64_t BusyTracker::AddOwnLocked(int64_t begin, int64_t end) {
  const int64_t added = union_.Add(begin, end);
  own_horizon_ = std::max(own_horizon_, end);
  if (observer_ != nullptr && has_offset_ && end > begin) {
    observer_(observer_context_, begin + host_offset_ns_, end + host_offset_ns_);
  }
  if (ring_ == nullptr || !has_offset_ || end <= begin) return added;
  const uint64_t i = ring_->head.fetch_add(1, std::memory_order_relaxed);
  BusyRingSlot& slot = ring_->slots[i % kBusyRingSlots];
  slot.seq.store(2 * i + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  slot.begin_ns.store(begin + host_offset_ns_, std::memory_order_relaxed);
  slot.end_ns.store(end + host_offset_ns_, std::memory_order_relaxed);
  slot.writer.store(ring_token_, std::memory_order_relaxed);
  slot.seq.store(2 * i + 2, std::memory_order_release);
  return added;
}

// Adds the intervals other processes published since the last read to the union (their
// coverage only: nothing is charged for them here). A slot still being written stops the read
// (it is retried at the next poll) unless the writers already moved a ring's length past it.
void BusyTracker::ReadRingLocked() {
  if (ring_ == nullptr || !has_offset_) return;
  const uint64_t head = ring_->head.load(std::memory_order_acquire);
  if (head - ring_read_ > static_cast<uint64_t>(kBusyRingSlots) || head < ring_read_) {
    if (head > ring_read_) stats_.shared_skipped += static_cast<int64_t>(head - ring_read_) - kBusyRingSlots;
    ring_read_ = head > static_cast<uint64_t>(kBusyRingSlots) ? head - kBusyRingSlots : 0;
  }
  for (; ring_read_ < head; ++ring_read_) {
    const uint64_t i = ring_read_;
    const BusyRingSlot& slot = ring_->slots[i % kBusyRingSlots];
    const uint64_t seq = slot.seq.load(std::memory_order_acquire);
    if (seq == 2 * i + 1 && head - i < kBusyRingSlots / 2) return;  // being written: next poll
    const int64_t begin = slot.begin_ns.load(std::memory_order_relaxed);
    const int64_t end = slot.end_ns.load(std::memory_order_relaxed);
    const uint64_t writer = slot.writer.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (seq != 2 * i + 2 || slot.seq.load(std::memory_order_relaxed) != seq) {
      ++stats_.shared_skipped;
      continue;
    }
    if (writer == ring_token_ || end <= begin) continue;
    union_.Add(begin - host_offset_ns_, end - host_offset_ns_);
    ++stats_.shared_read;
  }
}

void BusyTracker::NoteSpanLocked(StreamState& st, int64_t span_ns, int64_t now) {
  RotateWindows(&span_now_, &span_before_, now, options_.span_window_ns);
  span_now_.longest_ns = std::max(span_now_.longest_ns, span_ns);
  if (st.span_window_start_ns != span_now_.start_ns) {
    st.span_window_start_ns = span_now_.start_ns;
    ++span_now_.streams;
  }
}

void BusyTracker::NoteOverlapLocked(int64_t length_ns, int64_t added_ns) {
  if (length_ns <= 0) return;
  constexpr double kKeep = 1.0 - 1.0 / kOverlapIntervals;
  overlap_length_ns_ = kKeep * overlap_length_ns_ + static_cast<double>(length_ns);
  overlap_added_ns_ = kKeep * overlap_added_ns_ + static_cast<double>(std::max<int64_t>(added_ns, 0));
}

double BusyTracker::Overlap() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!(overlap_length_ns_ > 0)) return 1.0;
  // Intervals that added nothing (others already covered their time) bound it at their count.
  const double added = std::max(overlap_added_ns_, overlap_length_ns_ / kOverlapIntervals);
  return std::max(overlap_length_ns_ / added, 1.0);
}

int64_t BusyTracker::LaunchSpanNs(int64_t now) const {
  std::lock_guard<std::mutex> lock(mu_);
  SpanWindow before;
  if (!RecentWindows(span_now_, span_before_, now, options_.span_window_ns, &before)) return 0;  // nothing lately
  if (std::max(span_now_.streams, before.streams) < 2) return 0;
  return std::max(span_now_.longest_ns, before.longest_ns);
}

// A broken event: the interval it closes cannot be measured; its estimate stands.
void BusyTracker::DropPendingLocked(StreamState& st, PollResult* result) {
  const PendingMark& mark = st.pending.front();
  ++stats_.event_errors;
  if (!mark.begin) {
    result->busy_ns += mark.estimate_ns;
    result->estimated_ns += mark.estimate_ns;
    result->unmeasured_ns += mark.estimate_ns;
    result->intervals += 1;
  }
  st.pending_launches -= mark.launches;
  st.pending_estimate_ns -= mark.estimate_ns;
  if (st.has_last_event && st.last_event == mark.event) st.has_last_event = false;
  ReleaseEventLocked(mark.event);
  st.chain_open = false;
  st.pending.pop_front();
  st.pending_known_done = 0;  // a broken event: ask about the next ones
}

// A stream's marks in order, as far as they are complete. The oldest is asked about only once it
// may be complete (its due time), or when a launch waits for the stream's queue.
PollResult BusyTracker::DrainStreamLocked(StreamState& st, int64_t now) {
  PollResult result;
  while (!st.pending.empty()) {
    EventState state = EventState::kReady;
    if (st.pending_known_done > 0) {
      --st.pending_known_done;  // seen done through a later event: no query
    } else if (now < st.pending.front().due_ns && InflightLimitLocked(st, now) == QueueLimit::kNone) {
      break;  // cannot be done yet
    } else {
      ++stats_.poll_queries;
      state = QueryEventLocked(st.pending.front().event, &st.pending.front());
    }
    if (state == EventState::kNotReady) {
      PendingMark& front = st.pending.front();
      front.due_ns = now + std::min((now - front.host_ns) / 8, options_.max_poll_delay_ns);
      break;
    }
    if (state == EventState::kError) {
      DropPendingLocked(st, &result);
      continue;
    }
    PendingMark mark = st.pending.front();
    st.pending.pop_front();
    result.Add(ProcessMarkLocked(st, mark));
  }
  return result;
}

PollResult BusyTracker::PollLocked(int64_t now) {
  last_poll_ns_ = now;
  PollResult result;
  ReadRingLocked();
  for (size_t i = 0; i < slots_.size(); ++i) {
    StreamState& st = slots_[i];
    if (!st.in_use || st.pending.empty()) continue;
    result.Add(DrainStreamLocked(st, now));
    if (st.retired && st.pending.empty()) FreeSlotLocked(static_cast<int>(i));
  }
  PruneUnionLocked();
  return result;
}

PollResult BusyTracker::Poll(int64_t now) {
  std::lock_guard<std::mutex> lock(mu_);
  return PollLocked(now);
}

// No future interval can start before: an open chain's current time (its next interval starts
// there), or, for a chain that restarts with a begin, the union horizon when that begin was
// recorded (everything processed before then had completed before it).
void BusyTracker::PruneUnionLocked() {
  int64_t floor = own_horizon_;
  for (const StreamState& st : slots_) {
    if (!st.in_use || st.pending.empty()) continue;
    const PendingMark& next = st.pending.front();
    int64_t bound = (st.chain_open && !next.begin) ? st.chain_time_ns : next.horizon;
    floor = std::min(floor, bound);
  }
  if (floor != std::numeric_limits<int64_t>::min()) union_.PruneBefore(floor);
}

}  // namespace vgpu::compute
