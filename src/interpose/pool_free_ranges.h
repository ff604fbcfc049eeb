// What a stream-ordered pool's unused reserve is known to hold: the address ranges of blocks the
// process freed back to the pool, less what later blocks took. A pool's reserve is fragmented
// (on an H200 the default pool grows in 32 MiB chunks and a trim releases only whole free ones),
// so its unused total says nothing about whether the next block fits without growing; a block no
// larger than one of these ranges does.
//
// Conservative by construction: ranges are exactly the freed blocks (the pool may hold more
// around them), adjacent ranges are not merged (the pool may not join them), a block taken from
// a range removes it up to the next 2 MiB boundary, and Clear() forgets everything when the pool
// released memory (which ranges went is unknown). Bounded: past kMaxRanges ranges (blocks freed
// and never reused) it forgets them all too. Not thread-safe: memory_pools.cc holds its pools'
// mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>

namespace vgpu::memory {

class PoolFreeRanges {
 public:
  static constexpr std::size_t kMaxRanges = 8192;

  // A block of `bytes` at `address` went back to the pool.
  void Add(uint64_t address, uint64_t bytes);
  // A block of `bytes` was allocated at `address`: whatever range it overlaps shrinks.
  void Take(uint64_t address, uint64_t bytes);
  // The largest range: a block of at most this size is served without growing the pool.
  uint64_t Largest() const { return sizes_.empty() ? 0 : *sizes_.rbegin(); }
  void Clear();
  std::size_t size() const { return ranges_.size(); }

 private:
  void Insert(uint64_t start, uint64_t end);
  std::map<uint64_t, uint64_t> ranges_;  // start -> end (exclusive)
  std::multiset<uint64_t> sizes_;        // end - start of every range
};

}  // namespace vgpu::memory
