#include "compute/interval_union.h"

#include <gtest/gtest.h>

namespace vgpu::compute {
namespace {

TEST(IntervalUnionTest, DisjointIntervalsAddTheirLengths) {
  IntervalUnion u;
  EXPECT_EQ(u.Add(0, 10), 10);
  EXPECT_EQ(u.Add(20, 25), 5);
  EXPECT_EQ(u.horizon(), 25);
  EXPECT_EQ(u.pieces(), 2);
}

TEST(IntervalUnionTest, OverlapIsCountedOnce) {
  IntervalUnion u;
  EXPECT_EQ(u.Add(0, 10), 10);
  EXPECT_EQ(u.Add(5, 15), 5);    // [10, 15) is new
  EXPECT_EQ(u.Add(0, 15), 0);    // fully covered
  EXPECT_EQ(u.Add(2, 3), 0);
  EXPECT_EQ(u.pieces(), 1);
}

TEST(IntervalUnionTest, LateIntervalFillsGapsBetweenEarlierOnes) {
  // Stream A reported [0,1) and [5,6); stream B's long interval [0,10) completes later.
  IntervalUnion u;
  u.Add(0, 1);
  u.Add(5, 6);
  EXPECT_EQ(u.Add(0, 10), 8);
  EXPECT_EQ(u.pieces(), 1);
}

TEST(IntervalUnionTest, AdjacentIntervalsMerge) {
  IntervalUnion u;
  u.Add(0, 10);
  u.Add(10, 20);
  EXPECT_EQ(u.pieces(), 1);
  EXPECT_EQ(u.Add(0, 20), 0);
}

TEST(IntervalUnionTest, EmptyAndReversedIntervalsAddNothing) {
  IntervalUnion u;
  EXPECT_EQ(u.Add(10, 10), 0);
  EXPECT_EQ(u.Add(10, 5), 0);
  EXPECT_EQ(u.pieces(), 0);
}

TEST(IntervalUnionTest, PruneTreatsTimeBeforeTheFloorAsCovered) {
  IntervalUnion u;
  u.Add(0, 10);
  u.Add(20, 30);
  u.PruneBefore(15);
  EXPECT_EQ(u.pieces(), 1);
  EXPECT_EQ(u.Add(12, 22), 5);  // [12,15) is before the floor, [20,22) covered: [15,20) new
}

TEST(IntervalUnionTest, CapacityDropsOldestPiecesWithoutDoubleCounting) {
  IntervalUnion u(4);
  for (int i = 0; i < 10; ++i) u.Add(i * 10, i * 10 + 5);
  EXPECT_LE(u.pieces(), 4);
  EXPECT_EQ(u.Add(0, 5), 0);     // forgotten, counted as covered: never twice
  EXPECT_EQ(u.Add(95, 100), 5);  // recent gaps still exact
}

}  // namespace
}  // namespace vgpu::compute
