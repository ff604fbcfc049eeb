#include "interpose/pool_free_ranges.h"

#include <gtest/gtest.h>

namespace vgpu::memory {
namespace {

constexpr uint64_t kMiB = 1ULL << 20;
constexpr uint64_t kBase = 0x7f0000000000ULL;

TEST(PoolFreeRanges, EmptyServesNothing) {
  PoolFreeRanges r;
  EXPECT_EQ(r.Largest(), 0u);
  r.Take(kBase, 8 * kMiB);
  EXPECT_EQ(r.Largest(), 0u);
}

TEST(PoolFreeRanges, FreedBlocksAreNotMerged) {
  PoolFreeRanges r;
  r.Add(kBase, 24 * kMiB);
  r.Add(kBase + 24 * kMiB, 24 * kMiB);  // adjacent: the pool may not join them
  EXPECT_EQ(r.Largest(), 24 * kMiB);
  EXPECT_EQ(r.size(), 2u);
}

TEST(PoolFreeRanges, TakingFromARangeKeepsBothSidesUpToTwoMiB) {
  PoolFreeRanges r;
  r.Add(kBase, 100 * kMiB);
  r.Take(kBase + 10 * kMiB, 5 * kMiB + 1);  // padded to kBase + 16 MiB
  EXPECT_EQ(r.size(), 2u);
  EXPECT_EQ(r.Largest(), 84 * kMiB);
  r.Take(kBase + 16 * kMiB, 84 * kMiB);
  EXPECT_EQ(r.Largest(), 10 * kMiB);
  r.Take(kBase, 10 * kMiB);
  EXPECT_EQ(r.Largest(), 0u);
  EXPECT_EQ(r.size(), 0u);
}

TEST(PoolFreeRanges, ABlockSpanningSeveralRangesRemovesEachPart) {
  PoolFreeRanges r;
  r.Add(kBase, 4 * kMiB);
  r.Add(kBase + 4 * kMiB, 4 * kMiB);
  r.Add(kBase + 8 * kMiB, 30 * kMiB);
  r.Take(kBase + 2 * kMiB, 8 * kMiB);  // [2, 10) MiB
  EXPECT_EQ(r.size(), 2u);
  EXPECT_EQ(r.Largest(), 28 * kMiB);  // [10, 38)
}

TEST(PoolFreeRanges, ABlockOutsideEveryRangeChangesNothing) {
  PoolFreeRanges r;
  r.Add(kBase + 64 * kMiB, 32 * kMiB);
  r.Take(kBase, 32 * kMiB);
  r.Take(kBase + 96 * kMiB, 32 * kMiB);
  EXPECT_EQ(r.Largest(), 32 * kMiB);
}

TEST(PoolFreeRanges, ClearForgetsEverything) {
  PoolFreeRanges r;
  r.Add(kBase, 64 * kMiB);
  r.Clear();
  EXPECT_EQ(r.Largest(), 0u);
  r.Add(kBase, 8 * kMiB);
  EXPECT_EQ(r.Largest(), 8 * kMiB);
}

TEST(PoolFreeRanges, StaysBounded) {
  PoolFreeRanges r;
  for (uint64_t i = 0; i <= PoolFreeRanges::kMaxRanges; ++i) r.Add(kBase + i * 4 * kMiB, 2 * kMiB);
  EXPECT_EQ(r.size(), 1u);  // the last one, after the others were forgotten
  EXPECT_EQ(r.Largest(), 2 * kMiB);
}

TEST(PoolFreeRanges, AddReplacesAStaleOverlap) {
  PoolFreeRanges r;
  r.Add(kBase, 64 * kMiB);
  r.Add(kBase + 32 * kMiB, 8 * kMiB);  // the block was handed out without us seeing it
  EXPECT_EQ(r.Largest(), 32 * kMiB);
  EXPECT_EQ(r.size(), 3u);  // [0, 32), [32, 40), [40, 64)
}

}  // namespace
}  // namespace vgpu::memory
