// BusyTracker: turns timing events sampled on a process's streams into GPU busy time.
//
// One tracker per (process, device). The launch hooks tell it about every launch; it records a
// timing event ("mark") behind some of them, polls the marks for completion and converts their
// GPU timestamps into busy time, which is charged after completion. What it measures:
//
//   - A stream's chain of marks M0, M1, ...: while the stream never ran dry, the GPU time between
//     two consecutive marks is busy time of that stream (everything in between ran back to back).
//   - Idle gaps. A stream can only run dry when a launch is submitted after everything before it
//     finished. Before a launch whose stream has no unmarked launches (tail == 0), the tracker
//     queries the last mark: if it is complete the stream is idle, and a "begin" event is recorded
//     before the launch, so the gap [last mark, begin] is not counted. Launches between marks are
//     not individually visible, so the mark interval K adapts per stream: it starts at 1 after
//     every begin (the queue is empty), doubles while the previous mark is still pending when
//     the next is recorded and the stream's recent intervals were deep by their launches' return
//     times (the queue held the whole tail, so no gap can hide in it: see launches on their way,
//     below), halves otherwise, and drops to 1 as soon as the last mark is seen complete while a tail grows
//     (checked at tail lengths 1, 2, 4, ...). Flush() closes every tail; the limiter calls it
//     before a throttle sleep and the hooks before a context synchronisation, which are exactly
//     when every stream runs dry (before a wait for one stream or an event: FlushBeforeWait).
//   - Concurrency. Busy time is the union over the process's streams on the device, not the sum:
//     mark timestamps are put on one time base (ElapsedMs against an anchor event, re-based every
//     rebase_after_ns so float ms keep sub-microsecond precision) and merged in an IntervalUnion.
//   - Graphs and anything else enqueued between marks count as the stream being busy (a graph
//     launch is one launch; its span is what the marks see).
//
// Uniform streams. Dense marks cost a cuEventRecord (~1.3 us) per launch, which makes a stream of
//   tiny kernels (5 us) CPU-bound and hides gaps between them. A stream whose deep intervals (no
//   gap can hide in them) and launches measured alone (below) show one
//   per-launch cost (decaying maximum within uniform_cost_ratio of the average, over at least
//   uniform_min_samples intervals of at most uniform_max_launches launches) is "uniform": its
//   intervals that may contain a gap are capped at launches x that maximum x the ratio (the gap
//   is cut off their start), and its marks stay sparse instead of collapsing to K = 1. The cap
//   never cuts what was surely busy: the GPU idles only while it waits for submissions, so at
//   most the host's time from recording the interval's first event to recording its mark (plus
//   submit_slack_ns) of it can be idle; an interval surely busy beyond its cap makes the stream
//   non-uniform again. Mixed streams keep the dense marking.
//
// The limiter's own events. Each interval counts the GPU time of the mark that closes it less
// (mark_gpu_ns): the events run on the container's time, but they are not its work.
//
// Launches on their way. A launch reaches the GPU a while after its call returned; the mark before
// it may complete meanwhile, and the stream idles inside the interval. An interval starts no
// sooner than its first launch could (its return + the least delay of the last second's begins:
// visible_slack_ns), and counts as deep only if the mark that starts it completed after its last
// launch could have arrived. A launch measured alone with that start (a single launch's interval)
// is a sample of a launch's cost for the uniform-stream test like a deep one: a stream whose
// queue runs dry between launches has no deep intervals.
//
// Estimates. Each stream keeps an EWMA of busy time per launch, one per kind of launch (kernels,
// graphs: StreamState::kinds). AfterLaunch returns the estimate for the launch (the limiter
// charges it at submission, so the budget reacts before completion); Poll reports, per batch of
// completed intervals, the measured busy time and the estimates that were charged for the
// launches they cover, so the caller charges the difference. Work whose marks are lost (event
// errors, a reset) keeps its estimate as its charge.
//
// Queue bound. Work already on the GPU cannot be throttled any more, and its cost is known only
// after it ran, so a stream may have only a bounded amount queued: at most `window` unfinished
// launches (starting at probe_launches, growing by every launch that completes, halving when an
// interval costs far more than estimated: TCP-like slow start), and at most max_inflight_work_ns
// of work at the rate its queue drains (its intervals' lengths per launch). This keeps a first
// burst of mis-estimated launches, or a drop of the share (priority), from finding seconds of
// work queued. A launch that finds its queue full polls first, and waits only while it is still
// full.
//
// Processes of one container. Their contexts time-slice while both have work queued, so each one's
//   intervals also cover the other's slices. With a BusyRing (one per container and GPU, shared
//   memory), every measured interval is published there on CLOCK_MONOTONIC, and before its marks
//   are processed the tracker adds the other processes' new intervals to its union: an interval
//   is charged only for time that neither this process nor another one already charged. Event
//   times become CLOCK_MONOTONIC by an offset: no event completes before it was recorded nor
//   after the poll that saw it complete, and the tightest such bounds give the offset (see
//   NoteOffsetLocked).
//
// Limits of the method (see docs/compute.md): a gap that opens in the middle of a tail (between
// two marks, with no Flush in between) is counted as busy; time a stream waits on something other
// than its own kernels (another context's time slice, a host callback, a copy) counts as busy.
//
// Thread safety: all methods may be called concurrently; one internal mutex. GpuEventOps calls
// are made under it. After fork() the child must not use the parent's tracker (its mutex may be
// held by a thread that does not exist in the child; its events belong to the parent's
// context): abandon it and build a new one.
//
// Cost per launch (H200, driver 580, bench/compute/event_cost.cu: cuEventRecord 1.0-1.2 us,
// cuEventQuery 0.11 us while pending and 1.5 us the first time it finds the event complete, a
// launch 3.7-5 us; an event between two queued kernels also takes ~2 us of GPU time): the mutex
// and a hash lookup; one question whether an event is complete when the stream's tail is empty
// (asked against the anchor, an event known complete, through GpuEventOps::QueryAgainst:
// 0.14-0.28 us either way); one Record per K launches plus a begin per idle start; a Poll at
// most every poll_period_ns.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "compute/compute_state.h"
#include "compute/gpu_events.h"
#include "compute/interval_union.h"

namespace vgpu::compute {

struct BusyTrackerOptions {
  int max_mark_interval = 64;              // K never exceeds this
  int64_t max_mark_age_ns = 2'000'000;     // a tail this old (host time) is marked at the next launch
  int64_t poll_period_ns = 250'000;        // AfterLaunch polls completions at most this often
  // A poll asks about a mark only once it may be complete: not before poll_delay_fraction of the
  // time its stream's queue needs to drain the launches ahead of it (at the rate it drains; at
  // most max_inflight_work_ns), and, once found unfinished, not again before an eighth of its age
  // has passed (at most max_poll_delay_ns); at once while a launch waits for the stream's queue.
  // A poll of 16 deep streams otherwise asks about each one's oldest mark every poll_period_ns.
  double poll_delay_fraction = 0.5;
  int64_t max_poll_delay_ns = 2'000'000;
  // Tick() closes a tail whose last launch is tick_flush_age_ns old. But marks on streams that
  // other streams launched on since, recorded while the thread fills those, cost throughput (on
  // an H200, 16 streams of 50 us kernels from one thread under a limit of 60: about 55 with them
  // 200 us after each tail, 56.6-57.4 without; why is not established, docs/compute.md). Such a
  // tail is closed once its queue may be about to run dry: tick_flush_margin_ns before the time
  // the queue needs to drain the launches unfinished at its last launch (at the rate it drains),
  // and at most max_tick_flush_delay_ns after that launch.
  int64_t tick_flush_age_ns = 200'000;
  int64_t tick_flush_margin_ns = 1'000'000;
  int64_t max_tick_flush_delay_ns = 10'000'000;
  // FlushBeforeWait also closes the tails of streams whose launches take this long or longer: on
  // an H200, 16 streams of 5 ms kernels from one thread (two launches queued each) got 55.1-57.7
  // at a limit of 60 and 84.3-89.4 at 90 with their tails left open at event waits, 57.8-58.4
  // and 86.2-89.1 with this rule (2026-11-26, docs/benchmarks.md).
  int64_t cheap_mark_launch_ns = 1'000'000;
  int probe_launches = 2;                  // a new stream's window of unfinished launches
  int max_inflight_launches = 1024;        // the window never grows beyond this
  double max_cost_decay = 0.95;            // per interval: decaying maxima and the drain sums
  int64_t probe_wait_ns = 200'000;         // wait handed out while the queue is too deep
  // Launches wait while a stream has more than this much estimated work queued on the GPU, or
  // its oldest unfinished mark is older than max_inflight_age_ns. Bounds what is already
  // committed when the share drops (priority), even for an unlimited container.
  int64_t max_inflight_work_ns = 20'000'000;
  int64_t max_inflight_age_ns = 50'000'000;
  int max_pending_per_stream = 256;        // more unfinished marks than this: no new marks
  int max_events = 4096;                   // events created in total
  int max_streams = 1024;                  // streams tracked (more: launches are estimated, unmarked)
  int64_t rebase_after_ns = 500'000'000;   // anchor distance before re-basing
  double estimate_gain = 0.25;             // the estimate's sums decay by (1 - gain) per interval
  // An interval that starts at a begin event overstates busy time by about this much: on an
  // H200 (driver 580), [begin, mark] around one launch on an idle stream exceeded NVML's
  // GPU-Util busy time by 0.5-1.4 us, 0.8 on average (docs/compute.md). At most half the interval.
  int64_t begin_skew_ns = 1'000;
  // Every interval ends at a mark, whose own GPU time is not the container's work: between two
  // queued kernels on an H200 a mark widened the gap from 1.7 to 3.1 us (the kernels' own stamps,
  // docs/benchmarks.md 2026-11-27) and took 2.0-2.1 us of GPU time (bench/compute/event_cost.cu);
  // charged, a launcher marked at nearly every launch lost that share of its throughput under the
  // limit. Each interval counts this much less (at most half of it, with the begin's skew); 2 us
  // gave host-bound mixes more of their share than 1.2 us, and GPU-Util then reads the limit.
  // 4 us left the serving workload where it was and took host mixes past their share (GPU-Util
  // 70 at a limit of 60; docs/benchmarks.md, 2026-11-28).
  int64_t mark_gpu_ns = 2'000;
  // A command reaches the GPU some time after the host submitted it: on an H200 kernels started a
  // median 14 us after the hook's entry, 9 us after the launch call returned (docs/benchmarks.md,
  // 2026-11-27). The least delay from record to completion of the begins (events recorded on an
  // idle stream) of the last one to two delay_window_ns, on the event clock, is the least such
  // delay, D (none without begins lately: no bound). A kernel whose launch call returned at r
  // starts no sooner than r + D - visible_slack_ns, so an interval does not count the time before
  // its first launch could start (the mark before it completed, the stream ran dry, while the
  // launch was still on its way). And its launches were all queued behind the mark that starts it
  // (no idle gap can hide in it: deep) only if that mark completed after r_last + D +
  // queued_margin_ns, r_last when the last one's call returned; the mark found pending when the
  // next was recorded says nothing while the launches between them may not have reached the GPU
  // yet; K doubles only after queued_run_to_grow such deep intervals in a row (their verdicts come
  // with the polls, up to poll_period_ns late). Needs a BusyRing (the clocks' offset is kept only
  // with one); without one, or without a D, deep is the mark found pending. D is not the clocks'
  // offset's lower bound (NoteOffsetLocked), which loosens by max_clock_drift_ppm while no event
  // completes at once: then D grew 20 us per second and the bound cut real work where no begin
  // found the GPU free (docs/compute.md, "Launches on their way to the GPU").
  // On the H200 a slack of 0 cut no kernel time (the kernels' own stamps, 0.002 us per launch
  // missed) and 0.5 us keeps a margin; the simulation's launch-and-synchronise loop of 5 us
  // kernels needs at most 0.5 (1 us: 25.9 at a limit of 30). The margin covers the launches'
  // jitter (on the H200 the tenth percentile of a kernel's start came ~5 us before the median);
  // 2 us left the simulated host mix 3 points short at 3 us of latency. A run of 4 made the
  // simulation's four containers of 1.67 ms kernels filling the GPU fall to 26.8 at 30; 1 let K
  // grow on stale verdicts (the host mix at 8 us of latency: 71.5 where 77.2 is due).
  int64_t visible_slack_ns = 500;
  // Where the GPU's delay jitters, a kernel launched onto a drained stream starts on average
  // later than r + D, and the bound above leaves that wait in the interval: in the simulation,
  // with launch latencies spread uniformly over 5 us, eager launches of 5-40 us kernels (20 us of
  // host work each, 68% busy natively) got 78.5 of their 88.7 at a limit of 60. The bound then
  // adds this fraction of the begins' mean delay above D (each begin's excess capped at
  // max_delay_excess_ns, averaged with estimate_gain): 1 makes the bound right on average in the
  // simulation, at the price of cutting the start of kernels that came early. 0 (the default): D
  // alone. On an H200 the excess is not the kernels': with 1, host mixes' intervals held 4-6% of
  // the window where their kernels ran 50-61% by their own stamps (docs/benchmarks.md,
  // 2026-11-28).
  double start_delay_excess = 0;
  int64_t max_delay_excess_ns = 20'000;
  int64_t queued_margin_ns = 4'000;
  int queued_run_to_grow = 2;
  int64_t delay_window_ns = 1'000'000'000;  // D looks back one to two of these windows
  // A stream is uniform (see above) when its deep intervals' decaying maximum cost per launch is
  // within this ratio of their average, over at least this many deep intervals.
  // Only deep intervals of at most uniform_max_launches launches are samples (single launches'
  // costs); a deep interval of more launches costing more than the ratio allows resets the state.
  double uniform_cost_ratio = 1.25;
  int uniform_min_samples = 8;
  int uniform_max_launches = 4;
  // Deep intervals see a stream's launches only where its queue held them: behind an expensive
  // launch, hardly ever the expensive one itself when the host launches slower than the cheap ones
  // run (it starts on an idle stream). On such a stream (LaunchedSlowerLocked) launches measured
  // alone count too: a launch bracketed by a begin and a mark, or queued alone behind others, and
  // on a uniform stream a launch drawn at random with probability 1 / uniform_sample_every, given
  // an interval of its own (its tail marked before it, a begin if its stream is idle, a mark after
  // it). While the decaying maximum of such launches (by single_max_decay per launch measured)
  // exceeds uniform_cost_ratio x the deep intervals' maximum + uniform_idle_slack_ns (what an idle
  // start adds to [begin, mark]: 4.5-5.8 us on an H200, against 1.2-1.4 behind a busy stream;
  // bench/compute/event_cost.cu), the stream is not uniform.
  int uniform_sample_every = 64;
  int64_t uniform_idle_slack_ns = 5'000;
  double single_max_decay = 0.99;
  double launch_slower_ratio = 1.5;  // LaunchedSlowerLocked
  // How long a command may take to reach the GPU after the hook read the clock to record it (the
  // lock, the driver call, the submission): a uniform stream's capped interval may have idled for
  // the host's time between recording its first event and its mark plus this; the rest of it is
  // surely busy and counts past the cap.
  int64_t submit_slack_ns = 20'000;
  // LaunchSpanNs() looks back one to two of these windows.
  int64_t span_window_ns = 1'000'000'000;
  // How far the GPU's event clock may drift from CLOCK_MONOTONIC (the time offset's decay).
  int64_t max_clock_drift_ppm = 20;
  // Light measurement (SetLight: the container is known to run below its limit, so its busy
  // time need not be exact, only cheap to learn). A launch onto a stream run dry records no
  // begin: the interval that follows may hold the idle gap and is charged its launches'
  // estimates, and its tail is marked every light_mark_interval launches. The estimates are
  // learned from windows measured exactly: one launch in light_window_every (drawn at random)
  // closes the open tail and starts a window of light_window_launches launches measured as
  // without light measurement (a begin at each idle start, a mark after each launch), so that
  // every kind of launch is measured in the order it comes. Until 2026-11-28 single launches onto
  // an idle stream were sampled instead, and the light tails were charged estimates learned from
  // every measured interval, the light tails that queued behind others included: a host-paced mix
  // of 3 us kernels and every 5th of 40 us was then measured from its cheap launches queued behind
  // the expensive ones and charged 0.6 of what it ran (97% of its native rate at a limit of 60
  // where 76.5 is due, in the simulation with light measurement held on; once on an H200,
  // docs/benchmarks.md 2026-11-28). On an H200 a stream run dry before every launch paid a query, a
  // begin and a mark per launch, ~2.5 us of host time: 88.5% of its native rate at a limit of 99
  // (docs/benchmarks.md, 2026-11-27). Only while the process launched on one stream alone for
  // light_alone_ns: an estimate is not added to the union, so concurrent streams' estimates
  // would each count the time they share (in the simulation 2 processes x 4 threads of 20 us
  // kernels, 67% busy natively, were throttled to 80% of their native rate at a limit of 80 where
  // exact measurement left them 96%). And not for light_hold_ns after a launch was told to wait
  // (EndLight): a wait means the limit binds, or estimates overcharged.
  int light_window_every = 256;
  int light_window_launches = 8;
  int light_mark_interval = 8;
  // What a light tail is charged: its launches' estimates by kind, learned from the intervals
  // measured exactly only (not from light tails: those measured are the ones that queued behind
  // others), averaged more slowly than the estimates charged at submission (this gain per
  // interval, against estimate_gain): intervals that arrive in a fixed order (a 40 us kernel found
  // its stream idle and was bracketed, the 5 us one after it measured behind it) bias a fast
  // average by where the tail falls in that order (with 0.25, a tail right after the 5 us one was
  // charged 20 us a launch for a 22.5 us mean).
  double light_estimate_gain = 0.05;
  int64_t light_alone_ns = 100'000'000;
  int64_t light_hold_ns = 1'000'000'000;
};

// Returned by BeforeLaunch, passed back to AfterLaunch.
struct LaunchTicket {
  int32_t slot = -1;          // stream slot, -1 = untracked
  uint32_t generation = 0;    // slot generation (a retired slot is never confused with its reuse)
  int64_t submit_ns = 0;      // BeforeLaunch's `now`
  // The launch's work cannot start on the GPU before its call returned (a kernel launch; set by
  // the caller after BeforeLaunch). false for a graph launch, whose first kernels may start while
  // the call still submits the rest (BusyTrackerOptions::visible_slack_ns).
  bool starts_after_return = true;
};

// Busy time that completed marks revealed.
struct PollResult {
  int64_t busy_ns = 0;         // busy time to charge for the covered launches (union-measured)
  int64_t estimated_ns = 0;    // estimates charged at submission for those same launches
  int64_t unmeasured_ns = 0;   // part of busy_ns that is an estimate standing in for a lost mark
  int intervals = 0;
  void Add(const PollResult& other);
};

struct TrackerStats {
  int64_t launches = 0;
  int64_t marks = 0;           // marks recorded (including begins)
  int64_t begins = 0;          // of which begins (idle stream detected)
  int64_t queries = 0;
  int64_t poll_queries = 0;    // of which by polls (the others: around launches and marks)
  int64_t event_errors = 0;
  int64_t queue_waits = 0;     // launches told to wait for their stream's queue (BeforeLaunch > 0)
  int64_t queue_wait_ns = 0;   // ... and the waits handed out
  // ... of which because of the window of unfinished launches, the queued work
  // (max_inflight_work_ns) or the oldest unfinished mark's age (max_inflight_age_ns), each
  // checked in that order
  int64_t queue_waits_window = 0;
  int64_t queue_waits_work = 0;
  int64_t queue_waits_age = 0;
  int64_t light_launches = 0;  // launches onto a stream run dry measured lightly (no begin)
  // Launches onto a stream run dry measured exactly (a begin) although light measurement was
  // asked for last, because a launch was told to wait within light_hold_ns (EndLight), or
  // because another stream of the process launched within light_alone_ns.
  int64_t light_held = 0;
  int64_t light_not_alone = 0;
  int64_t light_banked = 0;    // of light_launches, allowed by the bank alone (BeforeLaunch's `banked`)
  int64_t shared_read = 0;     // other processes' intervals added from the BusyRing
  int64_t shared_skipped = 0;  // ring slots found overwritten or being written
  int streams = 0;
  int events_created = 0;
};

class BusyTracker {
 public:
  // `ops` must outlive the tracker, and so must `ring` (the container's, or null: this process's
  // own union only).
  BusyTracker(GpuEventOps* ops, const BusyTrackerOptions& options, BusyRing* ring = nullptr);
  // Destroys every event it created (REQUIRES: their context is still alive, else Reset(false)).
  ~BusyTracker();
  BusyTracker(const BusyTracker&) = delete;
  BusyTracker& operator=(const BusyTracker&) = delete;

  // Before submitting a launch on `stream`. Returns 0 and fills *ticket: submit now, then call
  // AfterLaunch. Or returns > 0: the stream has too much unmeasured work in flight (its cost is
  // still unknown, or its oldest unfinished mark is older than max_inflight_age_ns); wait that
  // long, poll, and ask again. With `polled`, a full queue is polled first (results added to
  // *polled) and only a queue still full makes the launch wait. Records a begin event when the
  // stream is idle.
  // `banked`: the container's budget holds more than half of the credit it may bank
  // (Controller::Banked): light measurement is allowed then too, where SetBankLight allows it.
  int64_t BeforeLaunch(StreamKey stream, int64_t now, LaunchTicket* ticket, PollResult* polled = nullptr,
                       bool banked = false);

  // After the launch call returned; launched=false when it failed (nothing was enqueued).
  // Returns the launch's estimated busy time (0 when unknown or not launched). May record a mark
  // and may poll (results added to *polled).
  int64_t AfterLaunch(const LaunchTicket& ticket, bool launched, int64_t now, PollResult* polled);

  // Processes the completed marks (asking about each stream's oldest once it may be complete:
  // PendingMark::due_ns).
  PollResult Poll(int64_t now);
  // Records a mark behind every stream's unmarked launches (before a throttle sleep, before a
  // context-wide synchronisation: the points where all streams run dry).
  void Flush(int64_t now);
  // Before the host waits for one stream's work (cuStreamSynchronize: `stream`; cuEventSynchronize:
  // nullptr, the event's stream is not known). Marks the tails that may run dry while it waits and
  // whose marks cost the others nothing: the stream waited for, the stream launched last (its
  // mark lands right behind its own launches), and those Tick() would close now. The other tails
  // stay open: a mark recorded on a stream that other streams launched behind costs their
  // concurrency on a GPU whose streams share hardware queues (docs/compute.md, "Marks from
  // afar"); Tick() closes them as their queues may be about to run dry.
  // Streams whose launches each take at least cheap_mark_launch_ns (at their queue's drain rate)
  // are marked too: a mark's cost is nothing beside such launches, and a tail left open there
  // keeps the queued-work bound from seeing its first launches complete.
  void FlushBeforeWait(int64_t now, const StreamKey* stream);
  // Periodic housekeeping from a background thread (optional): polls, and closes the tails of
  // streams that may have run dry (their last launch tick_flush_age_ns old; behind other streams'
  // launches, also their queue's drain time less tick_flush_margin_ns). Returns what the poll
  // found.
  PollResult Tick(int64_t now);
  // True when some launch is still unmeasured (work may be in flight).
  bool HasPendingWork() const;
  // Light measurement on or off (BusyTrackerOptions::light_window_every), from the thread that
  // knows whether the container runs below its limit (Controller::Unbound); on only once
  // light_hold_ns have passed since the last EndLight. Takes effect at each stream's next launch
  // onto an idle queue, while the process launches on that stream alone.
  void SetLight(bool light, int64_t now);
  // A launch was told to wait: exact measurement at once, and for light_hold_ns.
  void EndLight(int64_t now);
  bool light() const { return light_.load(std::memory_order_relaxed); }
  // Whether a launch may be measured lightly while the container's bank is over half full
  // (BeforeLaunch's `banked`), whatever the whole GPU's busy share and the hold after a wait
  // (SetLight): set by the same thread, from the conditions of its verdict that the bank does not
  // stand for (one process, a hard limit alone). While the bank holds that much, charges that
  // are off by some of it only move the bank: too high, it empties sooner and exact measurement
  // returns; too low, the launches measured alone pull the estimates back.
  void SetBankLight(bool allowed) { bank_light_.store(allowed, std::memory_order_relaxed); }
  bool bank_light() const { return bank_light_.load(std::memory_order_relaxed); }

  // REQUIRES: called BEFORE the stream is destroyed (its tail is marked on it). Its pending marks
  // are still processed; a new stream with the same key starts afresh.
  void OnStreamDestroyed(StreamKey stream, int64_t now);
  // Forgets all streams and marks. destroy_events=false when their context is already gone.
  void Reset(bool destroy_events);

  TrackerStats stats() const;

  // Called with every interval this process adds to the union, on CLOCK_MONOTONIC, once the
  // clocks' offset is known (with a BusyRing; ComputeTrace's B records). Runs under the tracker's
  // lock: it must be quick and must not call into the tracker. Set before the tracker is used.
  using IntervalObserver = void (*)(void* context, int64_t begin_ns, int64_t end_ns);
  void ObserveIntervals(IntervalObserver observer, void* context);

  // How long one launch lasts on its stream (a measured interval's length over its launches; a
  // launch that waits for the GPU's SMs lasts longer), the longest seen in the last one to two
  // span windows, when at least two streams had measured launches in them; 0 otherwise. A
  // process whose concurrent streams run long launches needs longer runs (Controller).
  int64_t LaunchSpanNs(int64_t now) const;

  // How many of the process's launches run at once on the GPU: the lengths of its measured
  // intervals over the time they added to the process's busy union, both decayed over about
  // kOverlapIntervals intervals; 1 with one stream, or before anything was measured.
  double Overlap() const;
  static constexpr int kOverlapIntervals = 64;

 private:
  struct PendingMark {
    EventId event;
    int32_t launches;          // launches covered (since the previous event on the stream)
    bool begin;                // recorded before a launch on an idle stream
    bool unmeasurable;         // an idle gap inside this interval could not be cut out
    bool deep;                 // the previous mark was still pending when this one was recorded:
                               // the queue held the whole interval, so it has no idle gap
    int64_t estimate_ns;       // estimates charged for those launches
    int64_t host_ns;           // when it was recorded (host clock)
    int64_t horizon;           // union horizon when it was recorded (pruning bound)
    int64_t due_ns;            // polls do not ask about it before, unless a launch waits for the
                               // stream's queue (poll_delay_fraction)
    int64_t first_return_ns;   // when the first covered launch's call returned (0: none, or a
                               // launch that may start before it: LaunchTicket)
    int64_t last_return_ns;    // ... and the last one's
    int32_t graphs;            // of `launches`, graph launches (LaunchTicket::starts_after_return false)
    bool light;                // its first launch was submitted under light measurement
    int64_t light_estimate_ns; // its launches' slow estimates (BusyTrackerOptions::light_estimate_gain)
    // Its time against the anchor, as a query that found it complete read it (GpuEventOps::
    // QueryAgainst), valid while the anchor is that of anchor_serial_ (0: not read).
    uint64_t elapsed_anchor = 0;
    float elapsed_ms = 0;
  };
  // Busy time per launch of one kind of launch on a stream: decaying sums, as the stream's own
  // estimate (StreamState::kinds).
  struct KindEstimate {
    double busy_ns = 0;
    double launches = 0;
    double slow_busy_ns = 0;   // the same with light_estimate_gain
    double slow_launches = 0;
  };
  // The least delay of the begins recorded in one delay window (BusyTrackerOptions::
  // delay_window_ns).
  struct DelayWindow {
    int64_t start_ns = 0;
    int64_t least_ns = std::numeric_limits<int64_t>::max();  // max: no begin in it
  };
  // The longest launch span and the streams that had measured launches, per span window: the
  // current window and the one before.
  struct SpanWindow {
    int64_t start_ns = 0;
    int64_t longest_ns = 0;
    int streams = 0;
  };
  struct StreamState {
    StreamKey key = 0;
    uint32_t generation = 0;
    bool in_use = false;
    bool retired = false;            // stream destroyed; draining its pending marks
    std::deque<PendingMark> pending;
    EventId last_event = 0;          // most recent event recorded on the stream
    bool has_last_event = false;     // false: none yet, or it was processed (known complete)
    bool last_event_is_begin = false;
    int32_t tail_launches = 0;       // launches after last_event
    int64_t tail_estimate_ns = 0;
    int64_t last_launch_ns = 0;
    uint64_t last_launch_seq = 0;    // launch_seq_ at its last launch
    int64_t last_mark_ns = 0;
    int32_t mark_interval = 1;       // K
    int32_t pending_launches = 0;    // launches covered by `pending`
    int32_t pending_known_done = 0;  // the first this many of `pending` are known complete
    int64_t pending_estimate_ns = 0; // estimates of those launches
    int32_t window = 0;              // unfinished launches allowed (slow start)
    // How fast the stream's queue drains: its intervals' lengths and launches, summed with a
    // decay per interval (their ratio is the queued-work bound's cost per launch).
    double drain_span_ns = 0;
    double drain_launches = 0;
    bool gap_unmarked = false;       // idle, but the begin could not be recorded
    bool chain_open = false;         // chain_time_ns starts the next interval
    bool chain_from_begin = false;   // ... and it is a begin event (subtract begin_skew_ns)
    int64_t chain_time_ns = 0;
    int64_t chain_host_ns = 0;       // when the event that starts the next interval was recorded
    double estimate_ns = 0;          // busy time per launch: estimate_busy_ns / estimate_launches
    double estimate_busy_ns = 0;     // measured busy time and launches, decaying per interval
    double estimate_launches = 0;
    bool has_estimate = false;
    // The estimate by kind of launch, [0] kernels and [1] graphs, each learned from intervals of
    // its kind alone: on one stream they can differ by orders of magnitude (a server's decode
    // step replayed from a graph, 5 ms, between its prefills' eager kernels of ~20 us), and the
    // stream's own estimate, dominated by the graphs, charged each prefill's first kernels
    // milliseconds apiece at submission (on an H200 ~30 ms too much at every prefill's start):
    // light measurement charges those estimates for good, so at a limit of 99 the server waited
    // ~0.1 s per run, and each wait held light measurement off for light_hold_ns. The stream's
    // estimate stands in for a kind not yet seen.
    KindEstimate kinds[2];
    int32_t tail_graphs = 0;         // of tail_launches, graph launches
    bool tail_light = false;         // the tail's first launch was submitted under light measurement
    int64_t tail_light_estimate_ns = 0;  // PendingMark::light_estimate_ns of the tail (tail_light only)
    // Length per launch of deep (gap-free) intervals only: EWMA and decaying maximum.
    double deep_cost_ns = 0;
    double deep_max_ns = 0;
    int32_t deep_samples = 0;
    double single_max_ns = 0;        // launches measured alone: decaying maximum
    bool sampling = false;           // the launch being submitted gets an interval of its own
    int32_t exact_left = 0;          // launches still to come in a light measurement's exact
                                     // window (BusyTrackerOptions::light_window_every)
    bool last_mark_deep = false;     // the last mark found the one before it pending (and the
                                     // recent intervals were deep: QueuedDeepLocked)
    int64_t last_submit_ns = 0;      // its last launch's LaunchTicket::submit_ns
    int64_t tail_first_return_ns = 0;  // PendingMark::first_return_ns of the tail
    int32_t queued_run = 0;          // measured intervals deep by their launches' return times
                                     // in a row (QueuedDeepLocked)
    double slower_share = 0;         // launches submitted longer than launch_slower_ratio x
                                     // deep_cost_ns after the one before (EWMA, estimate_gain):
                                     // LaunchedSlowerLocked
    int64_t span_window_start_ns = -1;  // the span window this stream was last counted in
  };

  int FindOrCreateLocked(StreamKey stream);
  enum class QueueLimit { kNone, kWindow, kWork, kAge };
  QueueLimit InflightLimitLocked(const StreamState& st, int64_t now) const;
  bool StreamIdleLocked(StreamState& st);
  void CollapseIntervalIfShallowLocked(StreamState& st);
  bool RecordLocked(StreamState& st, bool begin, bool deep, int64_t now);
  void MarkTailLocked(StreamState& st, int64_t now);
  bool AcquireEventLocked(EventId* event);
  void ReleaseEventLocked(EventId event);
  // `mark`'s time against the anchor where a query already read it (PendingMark::elapsed_ms).
  bool AbsoluteTimeLocked(const PendingMark& mark, int64_t* time);
  PollResult DrainStreamLocked(StreamState& st, int64_t now);
  PollResult ProcessMarkLocked(StreamState& st, const PendingMark& mark);
  // What ProcessMarkLocked found in an interval.
  struct Measured {
    bool deep = false;      // no idle gap can hide in it
    bool bounded = false;   // its start was cut to its first launch's return (visible_slack_ns)
    bool alone = false;     // it measured one launch alone
    int64_t own_ns = 0;     // its launches' own time: from the start `bounded` allows, else its length
    int64_t busy_ns = 0;    // what it added to the union
    int64_t span_ns = 0;    // its own length (>= 0)
  };
  void LearnLocked(StreamState& st, const PendingMark& mark, const Measured& m);
  double QueuedCostLocked(const StreamState& st) const;
  int64_t TickFlushAgeLocked(const StreamState& st) const;
  bool TailDueLocked(const StreamState& st, int64_t now) const;
  void DropPendingLocked(StreamState& st, PollResult* result);
  PollResult PollLocked(int64_t now);
  void PruneUnionLocked();
  void FreeSlotLocked(int slot);
  void NoteSpanLocked(StreamState& st, int64_t span_ns, int64_t now);
  void NoteOverlapLocked(int64_t length_ns, int64_t added_ns);
  void NoteOffsetLocked(int64_t host_ns, int64_t seen_ns, int64_t time);
  void NoteBeginDelayLocked(int64_t delay_ns, int64_t now);
  bool LaunchDelayLocked(int64_t* delay_ns) const;
  int64_t AddOwnLocked(int64_t begin, int64_t end);
  void ReadRingLocked();
  double EstimateLocked(const StreamState& st) const;
  double EstimateLocked(const StreamState& st, bool graph) const;
  double SlowEstimateLocked(const StreamState& st, bool graph) const;
  bool QueuedDeepLocked(const StreamState& st) const;
  bool UniformCostLocked(const StreamState& st) const;
  double SingleBoundLocked(const StreamState& st) const;
  bool DrawSampleLocked();
  bool DrawLocked(int every);
  bool LightTailLocked(const StreamState& st) const;
  bool LaunchedSlowerLocked(const StreamState& st) const;
  EventState QueryLastEventLocked(StreamState& st);
  // *mark: the pending mark of `event`, which keeps the time a query against the anchor read.
  EventState QueryEventLocked(EventId event, PendingMark* mark);

  GpuEventOps* const ops_;
  const BusyTrackerOptions options_;

  mutable std::mutex mu_;
  std::vector<StreamState> slots_;                 // guarded by mu_
  std::vector<int> free_slots_;                    // guarded by mu_
  std::unordered_map<StreamKey, int> index_;       // live streams only; guarded by mu_
  std::vector<EventId> free_events_;               // guarded by mu_
  std::vector<EventId> all_events_;                // guarded by mu_
  IntervalUnion union_;                            // guarded by mu_
  EventId anchor_ = 0;                             // guarded by mu_
  bool has_anchor_ = false;                        // guarded by mu_
  uint64_t anchor_serial_ = 0;                     // counts anchors (PendingMark::elapsed_anchor); mu_
  int64_t anchor_time_ns_ = 0;                     // guarded by mu_
  int64_t last_poll_ns_ = 0;                       // guarded by mu_
  uint64_t launch_seq_ = 0;                        // launches on any stream; guarded by mu_
  uint64_t sample_rng_ = 0x9e3779b97f4a7c15ULL;     // xorshift state for uniform samples; guarded by mu_
  std::atomic<bool> light_{false};                  // SetLight
  std::atomic<bool> light_wanted_{false};           // SetLight's argument, held or not (stats)
  std::atomic<int64_t> light_hold_until_{0};        // EndLight
  std::atomic<bool> bank_light_{false};             // SetBankLight
  int32_t last_launch_slot_ = -1;                  // the stream launched on last; guarded by mu_
  int64_t other_stream_ns_ = 0;                    // a launch on another stream than the one
                                                   // before it, last (0: never); guarded by mu_
  double default_estimate_ns_ = 0;                 // guarded by mu_
  bool has_default_estimate_ = false;              // guarded by mu_
  bool events_exhausted_ = false;                  // guarded by mu_
  TrackerStats stats_;                             // guarded by mu_
  SpanWindow span_now_;                            // guarded by mu_
  SpanWindow span_before_;                         // guarded by mu_
  double overlap_length_ns_ = 0;                   // Overlap(): decayed sums; guarded by mu_
  double overlap_added_ns_ = 0;
  // The end of this process's latest interval in the union (others' may end later): the bound
  // for pruning and for a begin's horizon.
  int64_t own_horizon_ = std::numeric_limits<int64_t>::min();  // guarded by mu_
  BusyRing* const ring_;
  IntervalObserver observer_ = nullptr;            // set before use (ObserveIntervals)
  void* observer_context_ = nullptr;
  uint64_t ring_token_ = 0;                        // this tracker's name in the ring
  uint64_t ring_read_ = 0;                         // ring intervals read so far; guarded by mu_
  // CLOCK_MONOTONIC = event time + host_offset_ns_ (valid once has_offset_), between the bounds
  // offset_low_ns_ and offset_high_ns_ (NoteOffsetLocked); guarded by mu_.
  int64_t host_offset_ns_ = 0;
  int64_t offset_low_ns_ = 0;
  int64_t offset_high_ns_ = 0;
  int64_t offset_noted_ns_ = 0;
  bool has_offset_ = false;
  // The least delay of the begins recorded in the current and the previous delay window
  // (NoteBeginDelayLocked, LaunchDelayLocked); guarded by mu_.
  DelayWindow delay_now_;
  DelayWindow delay_before_;
  double delay_excess_ns_ = 0;  // mean delay of the begins above D (start_delay_excess)
};

}  // namespace vgpu::compute
