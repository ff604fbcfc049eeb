// IntervalUnion: the busy time that new intervals add to a union of earlier ones.
//
// The busy tracker measures each stream's busy intervals on the GPU's clock; a device is busy
// while ANY of the process's streams is, so each interval is charged only for the part of it
// that no earlier interval covered. Intervals arrive in roughly, not strictly, increasing time
// (streams complete out of order), so the union of recent intervals is kept as a sorted list of
// disjoint intervals.
//
// Memory is bounded: PruneBefore() forgets everything that ends before a time the caller knows no
// future interval can reach back to; past `capacity` disjoint pieces the oldest are dropped too
// (and time before the dropped piece's end counts as covered: the union may then undercount, it
// never double counts).
//
// Thread safety: none (the tracker's mutex guards it). No allocation after construction.
#pragma once

#include <cstdint>
#include <vector>

namespace vgpu::compute {

class IntervalUnion {
 public:
  explicit IntervalUnion(int capacity = 512);

  // Adds [begin, end) and returns how many ns of it were not covered yet (0 when end <= begin).
  int64_t Add(int64_t begin, int64_t end);

  // Forgets pieces that end at or before `time` (coverage before `time` is then considered
  // known: a later interval reaching back before `time` only adds its part after `time`).
  void PruneBefore(int64_t time);

  // The latest end of any interval added (INT64_MIN when none was).
  int64_t horizon() const { return horizon_; }
  int pieces() const { return static_cast<int>(pieces_.size()); }

 private:
  struct Piece {
    int64_t begin;
    int64_t end;
  };
  int64_t CoveredIn(int64_t begin, int64_t end) const;
  void Insert(int64_t begin, int64_t end);

  int capacity_;
  int64_t floor_;                // everything before floor_ counts as covered
  int64_t horizon_;
  std::vector<Piece> pieces_;    // sorted by begin, disjoint, non-adjacent, all end > floor_
};

}  // namespace vgpu::compute
