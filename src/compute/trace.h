// ComputeTrace: what a limited process's compute limiter did, record by record, for offline
// analysis (bench/compute/trace_report.py; docs/compute.md, "Tracing"). Enabled per process with
// VGPU_COMPUTE_TRACE=FILE; off, nothing is allocated and the launch path pays one branch.
//
// Records, all times CLOCK_MONOTONIC nanoseconds:
//   L device start end   a launch: from the hook's entry (before admission) to the end of its
//                        bookkeeping after the real launch (marks, polls, ticks), so end - start
//                        is the limiter's and the driver's time
//   S device time wait   the launching thread goes to sleep for `wait` (a rest, a turn, a full
//                        queue); a run starts at the first launch after a sleep
//   B device begin end   an interval the tracker added to the container's busy union (the GPU
//                        time of this process's kernels, on CLOCK_MONOTONIC through the clocks'
//                        offset; needs the container's busy ring)
//   C device time estimated measured
//                        a charge to the container's budget clock: a launch's estimate at its
//                        submission (measured 0), or a batch of completed intervals, which
//                        measured `measured` of busy time for launches charged `estimated`
//                        (the clock is corrected by the difference)
//   U device time unmeasured
//                        of the batch charged at `time` (its C record), this much was an estimate
//                        standing where nothing could be measured (a light tail that may hold
//                        idle gaps, an interval whose start is unknown, a broken event)
//   Y device start end wait
//                        a synchronising call (cuCtxSynchronize(_v2), cuStreamSynchronize(_ptsz),
//                        cuEventSynchronize): from the hook's entry to its exit; `wait` is the
//                        time inside the driver's call, so end - start - wait is the limiter's
//                        own time around it (marks before, polls and ticks after)
//
// Add() is lock-free (one atomic increment per record) and drops records once the buffer is full
// (counted). WriteTo() is for exit time: it must not race with Add() for a complete file.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace vgpu::compute {

class ComputeTrace {
 public:
  enum Kind : char { kLaunch = 'L', kSleep = 'S', kBusy = 'B', kCharge = 'C', kUnmeasured = 'U', kSync = 'Y' };
  static constexpr size_t kDefaultCapacity = size_t{1} << 21;  // records (64 MiB, touched as used)

  explicit ComputeTrace(size_t capacity = kDefaultCapacity);
  ComputeTrace(const ComputeTrace&) = delete;
  ComputeTrace& operator=(const ComputeTrace&) = delete;

  void Add(Kind kind, int device, int64_t a, int64_t b, int64_t c = 0);  // c: kCharge's, kSync's third value
  // Writes "# vgpu compute trace 1: N records, D dropped" and one line per record
  // ("L 0 123 456", "C 0 123 456 789", "Y 0 123 456 78"), in the order they were added. False
  // (and *error) when the file cannot be written.
  bool WriteTo(const std::string& path, std::string* error) const;

  size_t records() const;
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  struct Record {
    int64_t a;
    int64_t b;
    int64_t c;
    int32_t device;
    char kind;
  };
  std::unique_ptr<Record[]> records_;
  const size_t capacity_;
  std::atomic<size_t> next_{0};
  std::atomic<uint64_t> dropped_{0};
};

// VGPU_COMPUTE_TRACE's file name: every "%p" replaced by `pid` (one file per process of a
// container), everything else as given.
std::string TracePath(const std::string& pattern, long pid);

}  // namespace vgpu::compute
