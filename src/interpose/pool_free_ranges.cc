#include "interpose/pool_free_ranges.h"

#include <iterator>

namespace vgpu::memory {
namespace {

constexpr uint64_t kCarveAlignment = 2ULL << 20;

}  // namespace

void PoolFreeRanges::Insert(uint64_t start, uint64_t end) {
  if (end <= start) return;
  ranges_[start] = end;
  sizes_.insert(end - start);
}

void PoolFreeRanges::Add(uint64_t address, uint64_t bytes) {
  if (bytes == 0 || address + bytes < address) return;
  Take(address, bytes);  // a stale range overlapping the block (never expected) goes first
  if (ranges_.size() >= kMaxRanges) Clear();
  Insert(address, address + bytes);
}

void PoolFreeRanges::Take(uint64_t address, uint64_t bytes) {
  if (ranges_.empty()) return;
  uint64_t end = address + bytes;
  if (end < address) end = UINT64_MAX;
  // The pool may pad the block: up to the next 2 MiB boundary counts as taken.
  if (end % kCarveAlignment != 0 && end <= UINT64_MAX - kCarveAlignment) end += kCarveAlignment - end % kCarveAlignment;
  auto it = ranges_.upper_bound(address);
  if (it != ranges_.begin() && std::prev(it)->second > address) --it;
  while (it != ranges_.end() && it->first < end) {
    const uint64_t start = it->first, stop = it->second;
    sizes_.erase(sizes_.find(stop - start));
    it = ranges_.erase(it);
    if (start < address) Insert(start, address);
    if (stop > end) Insert(end, stop);
  }
}

void PoolFreeRanges::Clear() {
  ranges_.clear();
  sizes_.clear();
}

}  // namespace vgpu::memory
