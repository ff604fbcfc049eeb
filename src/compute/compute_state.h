// Shared state of the compute limiter: plain, fixed-layout structs of lock-free atomics that
// live in memory mapped by several processes. This header IS their format (docs/compute.md
// describes every field); every offset is pinned by a static_assert below.
//
//   ComputeShareState  one per (container, GPU). Every process of the container that launches on
//                      that GPU maps the same one (the ledger file is the natural home: one per
//                      device record). Holds the container's budget clock and the controller's
//                      state, so the container's processes share ONE budget.
//   PriorityBoard      one per physical GPU, node-wide (every container on the node that uses the
//                      GPU maps it). Holds one activity heartbeat per priority bucket, so a
//                      low-priority container can see that a higher-priority one is active.
//   GpuTurn            one per physical GPU, node-wide, beside the PriorityBoard: which limited
//                      container's burst the GPU is running, and until when (estimated).
//   BusyRing           one per (container, GPU), beside its ComputeShareState: the busy intervals
//                      its processes measured lately, so that each process charges only the time
//                      no other process of the container covered.
//
// Rules (same as the ledger's):
//   - All-zero bytes are a valid initial state (a freshly created, zero-filled file needs no
//     initialisation); readers treat 0 as "not set yet".
//   - Every field is a lock-free, hence address-free, std::atomic: processes may map the file at
//     different addresses. No pointers, no locks: a process killed at any instruction leaves a
//     usable state behind (at worst one charge is lost or one controller update is skipped).
//   - Times are CLOCK_MONOTONIC nanoseconds. That clock is system-wide (not per container, unless
//     a time namespace is used, which vgpu does not support), so all processes agree on it.
//   - Writers: "any" fields are updated with atomic read-modify-write by any process; "updater"
//     fields are written only by the process that won the election for the current update period
//     (a CAS on next_update_ns), so they have one writer at a time in practice. A second updater
//     can only overlap if the first one stalls for a whole period; the effect is one sample
//     counted twice, never a torn value.
//   - Changing a size, an offset or a field's meaning requires a new layout version of the
//     containing file.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace vgpu::compute {

// Controller modes, as stored in ComputeShareState::mode.
enum class Mode : uint32_t {
  kHard = 0,   // share = the hard limit (sm_limit)
  kSoft = 1,   // share = the soft limit (the GPU is otherwise idle)
  kYield = 2,  // share = the yield share (a higher-priority container is active)
};
inline constexpr uint32_t kMaxMode = 2;

struct alignas(64) ComputeShareState {
  // --- line 0: read on every launch, written on every charge ------------------------- writer
  // Virtual time at which the container's measured GPU work would be paid for at its current
  // share (GCRA "theoretical arrival time"). Debt = vclock_ns - now; a launch is admitted while
  // the debt is within the admission tolerance. 0 = no charge yet.
  std::atomic<int64_t> vclock_ns;            //  0  any (CAS)
  // When the next controller update is due; the process whose CAS moves it forward runs it.
  std::atomic<int64_t> next_update_ns;       //  8  any (CAS)
  // Share that charges are converted at, in parts per million of GPU time (limit, soft limit or
  // yield share, plus the feedback correction). 0 = not computed yet: use the hard limit.
  std::atomic<uint32_t> rate_ppm;            // 16  updater
  std::atomic<uint32_t> mode;                // 20  updater (Mode)
  // Measured busy time (union of the process's streams, summed over processes), ns, monotonic.
  std::atomic<uint64_t> busy_total_ns;       // 24  any (add)
  // Total waits handed to launching threads (sum over threads), ns, monotonic.
  std::atomic<uint64_t> throttled_total_ns;  // 32  any (add)
  // Last launch admitted by any process of the container on this GPU.
  std::atomic<int64_t> last_launch_ns;       // 40  any (store, at most every heartbeat period)
  // Start of the current measurement (the share EWMA averages from here until it spans a whole
  // window, so that it does not start from zero).
  std::atomic<int64_t> measure_since_ns;     // 48  updater
  // The container's name in the GPU's turn (GpuTurn::holder): drawn by the first process that
  // needs it (CAS from 0), shared by all, so that a container's processes never wait for each
  // other's turn. 0 = not drawn yet.
  std::atomic<uint64_t> turn_token;          // 56  any (CAS once)
  // --- line 1: controller state ------------------------------------------------------------
  std::atomic<int64_t> last_update_ns;       // 64  updater: time of the last update
  std::atomic<uint64_t> busy_at_update;      // 72  updater: busy_total_ns at the last update
  std::atomic<int32_t> saturated_ewma_ppm;   // 80  updater: fraction of saturated periods, same
                                             //     EWMA as share_ewma_ppm (the sensor's window)
  std::atomic<int32_t> reserved1;            // 84  zero
  std::atomic<int32_t> share_ewma_ppm;       // 88  updater: measured share, EWMA (share_window)
  std::atomic<int32_t> integral_ppm;         // 92  updater: integral term of the PI correction
  std::atomic<int64_t> mode_since_ns;        // 96  updater: when `mode` (or the measurement)
                                             //     last (re)started: feedback settles from here
  std::atomic<int64_t> others_idle_since_ns; // 104 updater: since when others are idle (0 = busy)
  std::atomic<int64_t> signals_read_ns;      // 112 updater: last read of the injected signals
  // Last values of the injected signals, ppm; negative = unknown. Meaningful only once
  // signals_read_ns != 0 (an all-zero state reads as "unknown", never as "others idle").
  std::atomic<int32_t> others_busy_ppm;      // 120 updater: last OthersBusy()
  std::atomic<int32_t> reference_ppm;        // 124 updater: last ReferenceShare()
  // --- line 2: the container's run (ControllerOptions::period_ns) ---------------------------
  // Until when the current run admits every launch of every process of the container (0 = no
  // run): one run for all, opened by the first launch that finds the debt paid (CAS), so that
  // the processes run together and rest together.
  std::atomic<int64_t> run_end_ns;           // 128 any (CAS; store 0 to end it early)
  // The current run's start (0 = none, or its end already settled), the estimates its processes
  // claimed during it, and whether another container waited for the turn during it: a run
  // another container waited through is charged the wall time it held the GPU
  // (ControllerOptions::charge_held_runs).
  std::atomic<int64_t> run_start_ns;         // 136 opener (store); CAS to 0 by the process that settles it
  std::atomic<int64_t> run_claimed_ns;       // 144 any (add)
  std::atomic<uint32_t> run_contended;       // 152 any (store 1)
  std::atomic<uint32_t> reserved3;           // 156 zero
  std::atomic<uint64_t> reserved2[4];        // 160 zero
};

// Priority buckets: CUDA_TASK_PRIORITY p (0 = highest) maps to bucket min(p, kPriorityBuckets-1).
// A container yields while any bucket below its own has a fresh heartbeat.
inline constexpr int kPriorityBuckets = 8;

struct alignas(64) PriorityBoard {
  // Last time a container of each bucket was active on this GPU (launching, or with work in
  // flight). Written by any process of any container (store, at most every heartbeat period).
  std::atomic<int64_t> heartbeat_ns[kPriorityBuckets];  // 0
};

// One per physical GPU, node-wide, beside its PriorityBoard: the GPU "turn" of limited containers.
// Contexts (processes) time-slice: while two of them both have work queued, each one's timing
// events also cover the other's slices, and switching costs GPU time (two unlimited contexts of
// 50 us kernels together did 93% of one context's work on an H200). A limited process whose
// budget admits a launch therefore waits while another container's estimated work is still in
// flight (until_ns), then claims the turn for its own burst; limited containers end up taking
// turns instead of overlapping (docs/compute.md, "Turns"). The processes of one container share
// its token (ComputeShareState::turn_token): they run together, as they do natively, and their
// BusyRing keeps each one's events from charging the others' slices twice.
// Scheduling hints only: a stale or forged value costs at most one bounded wait
// (ControllerOptions::max_turn_wait_ns).
struct alignas(16) GpuTurn {
  // Token of the container (ComputeShareState::turn_token) that claimed last (0 = nobody yet).
  std::atomic<uint64_t> holder;  // 0  any (store)
  // CLOCK_MONOTONIC estimate of when all work claimed so far is done (max(until, now) + the
  // estimate of each launch, at submission).
  std::atomic<int64_t> until_ns;  // 8  any (store)
  // A container waiting for the turn (its token; 0 = none, or the last waiter took the turn) and
  // the last time it said so (every wait for the turn, at most turn_poll_ns apart). A holder
  // whose run has ended does not open another while a waiter is fresh: it lets the waiter go
  // first (ControllerOptions::max_yield_ns bounds that). Zero in boards written by the first
  // libraries, which neither read nor write it. Its low bit (with ControllerOptions::
  // light_waiter_queue_ns, on by default): the waiter runs below its limit, and a run that fills
  // its share gives way to it; tokens are drawn with that bit clear and compared without it.
  std::atomic<uint64_t> waiter;        // 16 any (store)
  std::atomic<int64_t> waiter_seen_ns;  // 24 any (store)
};

// One per (container, GPU), beside its ComputeShareState: the last kBusyRingSlots busy intervals
// the container's processes measured, on CLOCK_MONOTONIC. A process adds the others' intervals
// to its own union before it charges its own, so that time already charged by another process
// of the container (their contexts time-slice, and each one's events cover the other's slices)
// is not charged twice. Each slot is a sequence lock: interval i goes to slot i % kBusyRingSlots,
// whose seq is 2i + 1 while it is written and 2i + 2 once complete. A reader that finds another
// value skips the slot: at worst an overlap is charged twice (the container then gets less,
// never more). Only the container's own processes write it, as they write the rest of its
// compute state: a process that forged an interval would spare its own container charges, as a
// forged budget clock would; the container's ledger is its own (docs/ledger.md).
inline constexpr int kBusyRingSlots = 256;

struct BusyRingSlot {
  std::atomic<uint64_t> seq;       //  0 writer: 2i + 1 while writing interval i, 2i + 2 done
  std::atomic<int64_t> begin_ns;   //  8 writer
  std::atomic<int64_t> end_ns;     // 16 writer
  std::atomic<uint64_t> writer;    // 24 writer: the writing process's random token
};

struct alignas(64) BusyRing {
  std::atomic<uint64_t> head;      //  0 any (fetch_add): intervals written so far
  std::atomic<uint64_t> reserved[7];  // 8 zero
  BusyRingSlot slots[kBusyRingSlots];  // 64
};

inline int PriorityBucket(int task_priority) {
  if (task_priority < 0) return 0;
  return task_priority < kPriorityBuckets ? task_priority : kPriorityBuckets - 1;
}

// --- The format, pinned ----------------------------------------------------------------------
static_assert(std::atomic<int64_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<int32_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::is_standard_layout_v<ComputeShareState> && std::is_standard_layout_v<PriorityBoard>);
static_assert(sizeof(ComputeShareState) == 192 && alignof(ComputeShareState) == 64);
static_assert(offsetof(ComputeShareState, vclock_ns) == 0);
static_assert(offsetof(ComputeShareState, next_update_ns) == 8);
static_assert(offsetof(ComputeShareState, rate_ppm) == 16);
static_assert(offsetof(ComputeShareState, mode) == 20);
static_assert(offsetof(ComputeShareState, busy_total_ns) == 24);
static_assert(offsetof(ComputeShareState, throttled_total_ns) == 32);
static_assert(offsetof(ComputeShareState, last_launch_ns) == 40);
static_assert(offsetof(ComputeShareState, measure_since_ns) == 48);
static_assert(offsetof(ComputeShareState, turn_token) == 56);
static_assert(offsetof(ComputeShareState, last_update_ns) == 64);
static_assert(offsetof(ComputeShareState, busy_at_update) == 72);
static_assert(offsetof(ComputeShareState, saturated_ewma_ppm) == 80);
static_assert(offsetof(ComputeShareState, reserved1) == 84);
static_assert(offsetof(ComputeShareState, share_ewma_ppm) == 88);
static_assert(offsetof(ComputeShareState, integral_ppm) == 92);
static_assert(offsetof(ComputeShareState, mode_since_ns) == 96);
static_assert(offsetof(ComputeShareState, others_idle_since_ns) == 104);
static_assert(offsetof(ComputeShareState, signals_read_ns) == 112);
static_assert(offsetof(ComputeShareState, others_busy_ppm) == 120);
static_assert(offsetof(ComputeShareState, reference_ppm) == 124);
static_assert(offsetof(ComputeShareState, run_end_ns) == 128 && offsetof(ComputeShareState, run_start_ns) == 136);
static_assert(offsetof(ComputeShareState, run_claimed_ns) == 144 && offsetof(ComputeShareState, run_contended) == 152);
static_assert(offsetof(ComputeShareState, reserved3) == 156 && offsetof(ComputeShareState, reserved2) == 160);
static_assert(sizeof(PriorityBoard) == 64 && offsetof(PriorityBoard, heartbeat_ns) == 0);
static_assert(std::is_standard_layout_v<GpuTurn> && sizeof(GpuTurn) == 32);
static_assert(offsetof(GpuTurn, holder) == 0 && offsetof(GpuTurn, until_ns) == 8);
static_assert(offsetof(GpuTurn, waiter) == 16 && offsetof(GpuTurn, waiter_seen_ns) == 24);
static_assert(std::is_standard_layout_v<BusyRing> && sizeof(BusyRingSlot) == 32);
static_assert(offsetof(BusyRingSlot, begin_ns) == 8 && offsetof(BusyRingSlot, end_ns) == 16 &&
              offsetof(BusyRingSlot, writer) == 24);
static_assert(offsetof(BusyRing, slots) == 64 && sizeof(BusyRing) == 64 + 32 * kBusyRingSlots);

}  // namespace vgpu::compute
