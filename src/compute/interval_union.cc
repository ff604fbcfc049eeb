#include "compute/interval_union.h"

#include <algorithm>
#include <limits>

namespace vgpu::compute {

IntervalUnion::IntervalUnion(int capacity)
    : capacity_(capacity < 2 ? 2 : capacity),
      floor_(std::numeric_limits<int64_t>::min()),
      horizon_(std::numeric_limits<int64_t>::min()) {
  pieces_.reserve(static_cast<size_t>(capacity_) + 1);
}

int64_t IntervalUnion::CoveredIn(int64_t begin, int64_t end) const {
  int64_t covered = 0;
  for (const Piece& p : pieces_) {
    if (p.begin >= end) break;
    int64_t lo = std::max(begin, p.begin);
    int64_t hi = std::min(end, p.end);
    if (hi > lo) covered += hi - lo;
  }
  return covered;
}

// Inserts [begin, end) merging every piece it overlaps or touches.
void IntervalUnion::Insert(int64_t begin, int64_t end) {
  auto first = std::lower_bound(pieces_.begin(), pieces_.end(), begin,
                                [](const Piece& p, int64_t b) { return p.end < b; });
  auto last = first;
  while (last != pieces_.end() && last->begin <= end) {
    begin = std::min(begin, last->begin);
    end = std::max(end, last->end);
    ++last;
  }
  first = pieces_.erase(first, last);
  pieces_.insert(first, Piece{begin, end});
  if (static_cast<int>(pieces_.size()) > capacity_) {
    floor_ = std::max(floor_, pieces_.front().end);
    pieces_.erase(pieces_.begin());
  }
}

int64_t IntervalUnion::Add(int64_t begin, int64_t end) {
  begin = std::max(begin, floor_);
  if (end <= begin) return 0;
  horizon_ = std::max(horizon_, end);
  int64_t fresh = (end - begin) - CoveredIn(begin, end);
  Insert(begin, end);
  return fresh;
}

void IntervalUnion::PruneBefore(int64_t time) {
  if (time <= floor_) return;
  floor_ = time;
  auto keep = std::find_if(pieces_.begin(), pieces_.end(),
                           [time](const Piece& p) { return p.end > time; });
  pieces_.erase(pieces_.begin(), keep);
}

}  // namespace vgpu::compute
