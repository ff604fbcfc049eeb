// Controller: decides how long a launching thread waits so that the container's measured GPU
// busy time on one device stays at its share of wall time. All of its state that must be common
// to the container's processes lives in a ComputeShareState (compute_state.h); this object only
// holds per-process constants and pointers.
//
// Control law (docs/compute.md has the derivation):
//   Budget clock (GCRA). Every ns of busy time b charged at share s advances the shared virtual
//   clock V by b/s:  V <- max(V, now - credit) + b/s, capped at now + max_debt. A launch is
//   admitted while the debt V - now is at most admit_ahead_ns; otherwise the thread sleeps
//   V - now (proportional to the debt, at most max_sleep_ns per sleep) and asks again. Charges
//   are estimates at submission plus corrections (measured - estimated) after completion, so the
//   long-run busy/elapsed is exactly s for a saturating workload whatever the kernel sizes. The
//   credit bound (banked budget after idleness, at most max_credit_busy_ns of busy time and
//   what max_credit_burst_ns at full speed spends; none before the first charge) and the debt
//   bound keep old history from dominating.
//   Feedback (PI). Every update_period_ns one process (elected by CAS) updates the share actually
//   applied: rate = target * (1 + kp*e + I), I += ki*e*dt, e = (target - measured)/target, where
//   measured is the reference share when the injected signals provide one (e.g. NVML per-process
//   utilisation; gain ki_reference), else the event-measured share averaged over
//   share_window_ns (gain ki). Anti-windup: it acts only while the container is saturated (less
//   than half the maximum credit banked: a workload that wants less than its share is never
//   boosted) and was so in at least saturated_window_ppm of the averaged window (a start-up
//   below the share leaves low samples in the average), not within settle_ns of a mode change
//   or a restart of the measurement, and not on an over-delivery the budget clock already owes
//   (debt > 10 * admit_ahead_ns). With events alone the budget clock is already exact for
//   saturating workloads; the loop removes what it leaves: budget lost to the credit bound,
//   forgiven debt, and above all a biased sensor when a reference is available (time-slicing
//   with other contexts, see docs/compute.md).
//   Turns. Limited containers on one GPU take turns instead of overlapping: time-slicing between
//   contexts costs GPU time and makes each one's events count the other's slices. An admitted
//   launch still waits while another container's claimed work is estimated to be in flight
//   (GpuTurn::until_ns, at most max_turn_wait_ns per holder and max_turn_waits of those per
//   burst), and every launch extends the claim by its estimate. The processes of one container
//   share its token and run together, as they do natively (their BusyRing keeps their events
//   from charging each other's slices). While another container took a turn recently, bursts
//   are longer (turn_admit_ahead_ns): fewer hand-overs, each of which leaves the GPU idle ~0.1 ms.
//   Runs (period_ns > 0, the default). Once the debt is paid (and the GPU's turn is free), every
//   launch of the container, from any process, stream or thread, is admitted for rate *
//   period_ns of wall time (a run, ComputeShareState::run_end_ns), then the container rests
//   until the debt is paid again: it runs share * period and rests the rest of each period, and
//   during a run its kernels overlap (and its processes time-slice) as they do natively. Gating
//   launch by launch instead (period 0: bursts of admit_ahead_ns) serialises concurrent
//   streams: each launch's charge holds back the others. Beside other containers, one about to
//   open a run lets a container that waits for the turn go first (YieldNs), and one in a run
//   that fills its share gives way to a waiter below its limit (LightWaiterDelayNs). Only under a
//   hard limit without a soft one (see Running()). The feedback is off: a sensor's average
//   ripples with the runs, and the budget clock alone is exact for a saturating container.
//   Modes. Hard: target = hard limit. Soft: target = soft limit, entered once OthersBusy() has
//   stayed below others_idle_ppm for soft_hold_ns, left as soon as it rises. Yield: a container of
//   a higher priority bucket beat its heartbeat within heartbeat_expiry_ns; target = yield_ppm,
//   banked credit is dropped on entry so the drop takes effect at once.
//
// Thread safety: every method may be called from any thread of any process sharing the state.
// Cost: AdmitDelayNs is two or three relaxed atomic loads when there is no debt (plus, once per
// update period in one process, the update, which may call the injected signals at most once per
// signal_period_ns). Charge is one CAS loop on the shared clock.
#pragma once

#include <atomic>
#include <cstdint>

#include "compute/compute_state.h"

namespace vgpu::compute {

inline constexpr int32_t kFullShare = 1'000'000;  // ppm

// Signals from outside the container's own measurements. The controller calls them from the
// elected updater (a launching thread) at most once per signal_period_ns; an implementation
// backed by NVML should return values cached by a background thread rather than call NVML
// inline (an NVML query can take milliseconds).
class LoadSignals {
 public:
  virtual ~LoadSignals() = default;
  // Fraction 0..1 of recent wall time during which OTHER containers kept this GPU busy (e.g. NVML
  // device utilisation minus this container's share). Negative = unknown (treated as busy).
  virtual double OthersBusy(int64_t now) = 0;
  // This container's share 0..1 over a recent window from an independent sensor (e.g. NVML
  // per-process SM utilisation summed over the container's processes). Negative = unavailable:
  // the controller then regulates the share measured from events.
  virtual double ReferenceShare(int64_t now) = 0;
};

struct ComputeLimits {
  int32_t hard_ppm = 0;    // 0 or >= kFullShare: no limit
  int32_t soft_ppm = 0;    // 0: none; only used when > hard_ppm
  int task_priority = 1;   // CUDA_TASK_PRIORITY: 0 = highest
  // From the ledger's percent values (sm_limit 0 or 100 = unlimited, soft 0 = none).
  static ComputeLimits FromPercent(int sm_limit, int sm_soft_limit, int task_priority);
};

struct ControllerOptions {
  int64_t update_period_ns = 20'000'000;
  int64_t admit_ahead_ns = 2'000'000;           // debt tolerated at admission (burst size)
  int64_t max_sleep_ns = 20'000'000;            // one wait is at most this
  // Banked budget (credit): a container that used less than its share may run above it until
  // this much busy time is spent, so that a server's bursts (a prefill, a batch of requests) need
  // not wait while its average is below the limit. The price: any window of T seconds holds at
  // most share x T + the credit (+10 points of a second's average). A container starts without
  // credit: a saturating one never has any.
  int64_t max_credit_busy_ns = 100'000'000;
  int64_t max_credit_wall_ns = 500'000'000;     // ... and never more than this much wall time
  // ... and spent at full speed it lasts at most this long: at share s the bank holds at most
  // (1 - s) x this of busy time (at 90% 100 ms took a second to spend: a training job that banked
  // during its set-up ran 3 points over a limit of 90 in a 1.6 s window that began 0.5 s in) ...
  int64_t max_credit_burst_ns = 250'000'000;
  // ... but never less than this much wall time (above a share of 83% this floor is the bound:
  // at 90% 45 ms of busy time, spent in 450 ms): busy time is charged once measured, up to tens
  // of ms after it ran (20 ms queued per stream, 16 streams drained 8 at a time), and a bank
  // smaller than that lag takes budget a saturating container is owed (16 streams of 50 us at 99
  // did 81% of their native work in the simulation with 2.5 ms).
  int64_t min_credit_ns = 50'000'000;
  int64_t max_debt_ns = 5'000'000'000;          // debt beyond this is forgiven
  int64_t share_window_ns = 1'000'000'000;      // EWMA window of the measured share
  double kp = 0.1;                              // proportional gain (relative error)
  double ki = 0.3;                              // integral gain, per second (event share, EWMA)
  double ki_reference = 3.0;                    // ... when a reference share is available
  double min_correction = -0.5;                 // rate stays within target * [1+min, 1+max]
  double max_correction = 2.0;
  double max_headroom = 0.25;                   // ... and below target + this * (1 - target)
                                                // (without a reference signal)
  int64_t settle_ns = 500'000'000;              // no feedback this long after a mode change or
                                                // a restart of the measurement
  int32_t saturated_window_ppm = 950'000;       // ... nor while less of the share's averaging
                                                // window than this was saturated
  int32_t others_idle_ppm = 100'000;            // OthersBusy below 10%: the GPU is otherwise idle
  int64_t soft_hold_ns = 300'000'000;           // ... for this long before bursting
  int64_t signal_period_ns = 100'000'000;       // LoadSignals polled at most this often
  int64_t heartbeat_period_ns = 10'000'000;     // PriorityBoard written at most this often
  int64_t heartbeat_expiry_ns = 200'000'000;    // a heartbeat older than this is inactive
  int32_t yield_ppm = 20'000;                   // share while yielding (2%)
  bool take_turns = true;                       // wait for other containers' bursts (GpuTurn)
  int64_t turn_admit_ahead_ns = 8'000'000;      // admit_ahead_ns while another container took a
                                                // turn within turn_recent_ns
  int64_t turn_recent_ns = 200'000'000;
  int64_t max_turn_wait_ns = 20'000'000;        // a burst waits at most this long for another
                                                // container's turn (with runs: a period)
  int max_turn_waits = 4;                       // ... and this many such waits in all while the
                                                // turn passes from holder to holder
  int64_t turn_poll_ns = 500'000;               // a wait for the turn sleeps at most this long at
                                                // once: a holder done early releases it
  // While a run is open, the turn it holds is published as lasting this long after the end of
  // the work the process claimed (its launches' estimates), never past the run's end: a
  // synchronisation inside the run (a step's end, a copy to the host) otherwise left the GPU
  // free for a few microseconds, a waiting neighbour took the turn, and the two then alternated
  // at every synchronisation, each hand-over leaving the GPU idle (simulated 3 x 30 of 20 us
  // kernels synchronised every 8: 21.0 each where 32.2 is due). The hold ends with the run (its
  // first launch told to wait publishes the claim itself) or this long after the claimed work
  // with nothing launched since. 0: no hold.
  int64_t run_hold_ns = 300'000;
  // A run through which another container waited for the turn is charged the wall time it held
  // the GPU, not only its busy time: the part its launches' estimates did not claim is charged
  // when the run ends. Runs are exclusive, so a container whose program leaves the GPU idle
  // inside its runs (synchronisations, host work) held it all the same; charged only its busy
  // time it took more than its share of the wall time, and beside others someone got less
  // (simulated 3 x 30 of 20 us kernels each synchronised, 64% busy alone: 37.8 / 41.5 / 15.8 of
  // their native rates; 30 + 60 + 10: 17.7 / 71.8 / 6.0). Alone, or with nobody waiting, a run
  // is charged its busy time, and a container that cannot fill the GPU gets more of its native
  // rate than its share.
  bool charge_held_runs = true;
  // A container that waits for the turn while it banked at least half of its maximum credit (it
  // runs below its limit: a server between requests) says so on the turn (the low bit of
  // GpuTurn::waiter, LightWaiterSeen()). A run that sees such a waiter neither holds the turn past its
  // claimed work nor counts as contended for it, and admits launches only while its claimed work
  // ends within this long, so the waiter gets the GPU after about one of its kernels rather than
  // at the run's end. Without it a server of steps 25% busy alone at 30, beside a trainer of 2 ms
  // kernels at 60, got 40.5% of its native rate in the simulation (the trainer's run held the
  // turn, and its queue reached 20 ms); with it 55.1, the trainer 57.9. A saturating neighbour
  // banks nothing and never sets the bit: the hold and held runs' charge apply to it as before.
  // On the H200 (2026-11-28) that server got 55.4% of its native rate with it and 41.4 without,
  // the trainer 60.0 / 59.9, and the concurrency matrix, co-located groups included, passed
  // whole with it. kGiveWayQueueNs (the default): on (VGPU_COMPUTE_GIVE_WAY, default true); 0: off.
  static constexpr int64_t kGiveWayQueueNs = 1'000'000;
  int64_t light_waiter_queue_ns = kGiveWayQueueNs;
  // ... but not while the process's launches overlap on the GPU (SetOverlap, BusyTracker::Overlap)
  // this much or more, until they overlap less than give_way_resume_overlap again: giving way
  // drains its queues at every step of the waiter, which costs a launcher of concurrent narrow
  // kernels its parallelism (simulated, a server beside 16 streams of 50 us kernels at 60: the
  // trainer did 42% of the work it did without giving way, 4 streams 61%; one stream of such
  // kernels, or two of full-width 1.6 ms ones, lost nothing, and their overlap read 1.0 and 1.96,
  // 1.3 while giving way; 16 and 4 streams read 16 and 4, 3.6 and 2.4 while giving way). A
  // process that stops giving way is charged as before (its runs hold the turn and are charged
  // whole when the waiter waits through them).
  double give_way_max_overlap = 2.0;
  double give_way_resume_overlap = 1.5;
  // With runs, a container about to open a run while another container waits for the turn
  // (GpuTurn::waiter) lets it go first, for at most this long in all (a waiter that never takes
  // the turn, or a forged one, costs no more). 0: never.
  int64_t max_yield_ns = 50'000'000;
  // > 0: runs. Once the debt is paid, every launch of the container (any process, stream or
  // thread) is admitted for share * period_ns of wall time, then it rests until the debt is paid
  // again: its kernels overlap as they do natively during a run. Longer periods let the GPU's power
  // management see the load as it would natively (a power-capped workload then gains no clock
  // boost from the rests); the price is latency, up to (1 - share) * period per request.
  // Hard limits only: not while yielding, not with a soft limit (those use bursts).
  // 0: bursts of admit_ahead_ns, launch by launch (serialises a process's concurrent kernels).
  int64_t period_ns = 50'000'000;
  int64_t min_run_ns = 1'000'000;               // a run is at least this long
  // Long launches on concurrent streams stretch the period (SetLaunchSpan): at a run's end the
  // streams finish their last launches one after another, and while they do the GPU counts as
  // busy but runs fewer kernels at once than natively, for about one launch span per run (on an
  // H200, 16 streams of 5 ms kernels at a limit of 90: 84% of the throughput with 50 ms periods,
  // 89.4% with 200 ms). The period is at least spans_per_period launch spans, at most
  // max_period_ns (or period_ns, if longer); not beside other containers that take turns.
  // At most 200 ms: a longer period makes each second's share swing by a run's length, and
  // beside neighbours that it does not see taking turns a longer run holds the GPU longer.
  int64_t spans_per_period = 40;
  int64_t max_period_ns = 200'000'000;
  // Unbound(): the whole GPU busy less than the hard limit minus this (ppm); < 0: never. 0: below
  // the limit itself. A container whose demand is at its limit (a server at 90 whose natives run
  // 88-92% busy) is throttled little or not at all, and exact measurement cost such a launcher
  // 6-8% of its rate in the simulation (ConcurrencyTest.ALauncherAtItsLimitKeepsItsRate); with a
  // margin of 10 points it was never measured lightly. The first launch told to wait still ends
  // light measurement, so a container held at its limit is measured exactly.
  int32_t light_margin_ppm = 0;
};

// What the controller currently does, for tests, logs and `vgpu top`.
struct ControllerSnapshot {
  Mode mode = Mode::kHard;
  int32_t target_ppm = 0;
  int32_t rate_ppm = 0;
  int32_t measured_ppm = 0;    // EWMA of the event-measured share
  int32_t correction_ppm = 0;  // integral term, relative to the target
  int64_t debt_ns = 0;         // V - now
  uint64_t busy_total_ns = 0;
  uint64_t throttled_total_ns = 0;
};

class Controller {
 public:
  // `state` (required), `board`, `signals` and `turn` (optional, may be null) must outlive the
  // controller. Several Controllers (one per process) may share `state`.
  Controller(ComputeShareState* state, PriorityBoard* board, LoadSignals* signals,
             const ControllerOptions& options, const ComputeLimits& limits, GpuTurn* turn = nullptr);

  // New limits from the ledger (the authority rewrote them). Takes effect at the next update.
  void SetLimits(const ComputeLimits& limits);

  // 0: submit now. > 0: wait this long (sleep, never spin), then ask again. Also beats the
  // priority heartbeat and runs the periodic update when due.
  int64_t AdmitDelayNs(int64_t now);

  // Charges busy time (negative: a refund) at the current rate.
  void Charge(int64_t busy_ns, int64_t now);
  // A launch estimated at busy_ns was submitted: extends this process's turn on the GPU by it.
  void ClaimTurn(int64_t busy_ns, int64_t now);
  // Ends the process's turn early if it is still the holder: `idle`, it has no work in flight
  // (at a Tick, or at a launch told to wait); else only the run's hold (run_hold_ns) is given
  // back, down to its claimed work. An open run keeps its hold (run_hold_ns past its work).
  void ReleaseTurn(int64_t now, bool idle = true);
  // Measured busy time (the sensor the feedback loop reads).
  void AddMeasured(int64_t busy_ns);
  // Time a thread was told to wait.
  void AddThrottled(int64_t wait_ns);
  // The longest launch span of the process's concurrent streams (BusyTracker::LaunchSpanNs; 0:
  // none, or one stream): runs lengthen the period to spans_per_period of them.
  void SetLaunchSpan(int64_t span_ns);
  // How many of the process's launches overlap on the GPU (BusyTracker::Overlap, >= 1): whether
  // its runs may give way (give_way_max_overlap).
  void SetOverlap(double overlap);
  // Whether this process's runs would give way to a waiter below its limit now: give way on
  // (light_waiter_queue_ns) and its launches' overlap below the line (SetOverlap).
  bool GivesWayByOverlap() const {
    return options_.light_waiter_queue_ns > 0 && give_way_overlap_ok_.load(std::memory_order_relaxed);
  }
  // The period runs use now: period_ns, or longer for long concurrent launches while no other
  // process took a turn on the GPU within turn_recent_ns.
  int64_t PeriodNs(int64_t now) const;
  // Marks the container active on this GPU for the priority board (rate-limited).
  void NoteActivity(int64_t now);
  // Runs the periodic update if due (AdmitDelayNs calls it; a background tick may too).
  void MaybeUpdate(int64_t now);

  ControllerSnapshot Snapshot(int64_t now) const;
  // Whether the container surely runs below its limit, by a sensor it does not produce itself:
  // `device_busy` (0..1; negative: unknown), the share of recent time the whole GPU was busy
  // (NVML's GPU-Util: the container's own share is at most that), is below the hard limit by more
  // than light_margin_ppm (default 0: below it), the container owes nothing, it is under a hard
  // limit alone (no soft limit, not yielding), and it is at most one process (`processes`, the
  // ledger's: the processes' estimates are not in the busy ring they share, so each would count
  // the time they overlap). Its busy time then need not be measured exactly (BusyTracker::SetLight).
  bool Unbound(double device_busy, int processes, int64_t now) const {
    return LightRefusalOf(device_busy, processes, now) == LightRefusal::kNone;
  }
  // Whether more than half of the most credit the container may bank is banked (V more than
  // half of CreditNs behind now, a clock charged at least once): it used well under its share
  // lately (BusyTracker::SetBankLight).
  bool Banked(int64_t now) const;
  // Why Unbound() is false (the first reason that applies, in the order below), for the
  // summary at exit: a container measured exactly where it was expected to be measured lightly
  // says which condition held it.
  enum class LightRefusal : int {
    kNone = 0,   // unbound
    kOff,        // light_margin_ppm < 0, or no device busy figure (NVML unavailable)
    kProcesses,  // more than one process in the container
    kMode,       // not under a hard limit alone (soft limit, yielding, no limit)
    kDebt,       // the container owes budget
    kBusy,       // the whole GPU busy at or above the hard limit (less the margin)
  };
  static constexpr int kLightRefusals = 6;
  // Whether a verdict leaves light measurement to the bank (BusyTracker::SetBankLight): refused
  // only for the GPU's busy share or a debt, which the bank stands for.
  static bool BankMayDecide(LightRefusal why) {
    return why == LightRefusal::kNone || why == LightRefusal::kDebt || why == LightRefusal::kBusy;
  }
  LightRefusal LightRefusalOf(double device_busy, int processes, int64_t now) const;
  // Last time any process of the container noted activity on this GPU (0 = never).
  int64_t LastActivityNs() const { return state_->last_launch_ns.load(std::memory_order_relaxed); }

 private:
  struct Sample;
  void Update(int64_t now);
  Sample TakeSample(int64_t now, int64_t dt, uint64_t busy_delta);
  void ReadSignals(int64_t now);
  Mode DecideMode(int64_t now, Mode current);
  bool HigherPriorityActive(int64_t now) const;
  int32_t TargetPpm(Mode mode) const;
  double MaxCorrection(int32_t target, bool have_reference) const;
  void EnterMode(Mode mode, int64_t now);
  void UpdateCorrection(const Sample& sample, Mode mode, int64_t now);
  int32_t CurrentRatePpm() const;
  int64_t CreditNs(int32_t rate) const;
  void CutCredit(int64_t now);
  void RescaleDebt(int32_t old_ppm, int32_t new_ppm, int64_t now);
  bool TakesTurns() const;
  uint64_t TurnToken(int64_t now);
  int64_t TurnDelayNs(int64_t now);
  // The earliest end of the turn an open run holds (run_hold_ns after its claimed work, at most
  // the run's end; the run's end once another container waited: charge_held_runs); 0: none.
  int64_t RunHoldUntil(int64_t now);
  // Another container waits for the turn: GpuTurn::waiter set, not this container, and seen
  // within two polls (not later than a poll ahead: a forged time is not believed).
  bool WaiterSeen(int64_t now);
  // WaiterSeen, and the waiter runs below its limit (light_waiter_queue_ns), and this process's
  // launches overlap little enough to give way (give_way_max_overlap).
  bool LightWaiterSeen(int64_t now);
  // LightWaiterSeen, and this container fills its share (not BelowLimit): its run gives way.
  bool GivesWay(int64_t now);
  // Within a run: how long to wait for a waiter below its limit (light_waiter_queue_ns); 0: go.
  int64_t LightWaiterDelayNs(int64_t now);
  // This container banked at least half its maximum credit: it runs below its limit.
  bool BelowLimit(int64_t now) const;
  int64_t YieldNs(int64_t now);
  void ResetTurnWait();
  bool Running() const;
  bool SharingGpu(int64_t now) const;
  int64_t RunDelayNs(int64_t now, int64_t debt);
  // The run that ended at `end` (0: ended early): charges it the wall time it held the GPU beyond
  // its claims when another container waited through it (charge_held_runs); once per run.
  void SettleRun(int64_t end, int64_t now);
  void NoteRunClaim(int64_t busy_ns);

  ComputeShareState* const state_;
  PriorityBoard* const board_;
  LoadSignals* const signals_;
  const ControllerOptions options_;
  std::atomic<int32_t> hard_ppm_;
  std::atomic<int32_t> soft_ppm_;
  std::atomic<int> bucket_;
  std::atomic<int64_t> last_beat_ns_{0};  // process-local: throttles board writes
  GpuTurn* const turn_;
  std::atomic<uint64_t> token_{0};         // the container's name in the turn (0 = not read yet)
  std::atomic<int64_t> other_turn_ns_{0};  // last time another container held the turn
  std::atomic<int64_t> turn_wait_since_{0};    // start of the current wait for others, 0 = none
  std::atomic<uint64_t> turn_wait_holder_{0};  // ... for this holder
  std::atomic<int64_t> turn_queue_since_{0};   // start of the waits since the turn was last free
  std::atomic<int64_t> claimed_until_{0};  // this process's claim, ahead of the published one
  std::atomic<int64_t> published_until_{0};  // what this process last published (its claim or
                                             // its run's hold)
  // NoteRunClaim: the run this process's unshared claims belong to, and their sum (a race
  // between its launching threads loses at most one launch's estimate).
  std::atomic<int64_t> run_claim_start_{0};
  std::atomic<int64_t> run_claim_pending_{0};
  std::atomic<int64_t> light_waiter_ns_{0};          // a waiter below its limit last seen in a run
  std::atomic<int64_t> light_waiter_ignored_run_{0};  // the run (start) in which it is no longer waited for
  std::atomic<int64_t> yield_since_{0};    // start of the current yield to a waiter, 0 = none
  std::atomic<int64_t> launch_span_ns_{0};  // SetLaunchSpan
  std::atomic<bool> give_way_overlap_ok_{true};  // SetOverlap: below give_way_max_overlap
};

}  // namespace vgpu::compute
