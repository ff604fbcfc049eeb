#include "k8s/virtual_devices.h"

#include <gtest/gtest.h>

#include <set>

namespace vgpu::k8s {
namespace {

std::vector<GpuInfo> Gpus() {
  return {{"GPU-aaaa-1111", 0, 80ull << 30, "A", 0, true}, {"GPU-bbbb-2222", 1, 80ull << 30, "A", 1, true}};
}

std::vector<std::string> Units(UnitIdStyle style, const GpuInfo& gpu, int from, int to) {
  std::vector<std::string> out;
  for (int n = from; n < to; ++n) out.push_back(UnitId(style, gpu, n));
  return out;
}

TEST(VirtualDevicesTest, IdsRoundTrip) {
  const auto gpus = Gpus();
  EXPECT_EQ(UnitId(UnitIdStyle::kUuidDash, gpus[1], 3), "GPU-bbbb-2222-3");
  EXPECT_EQ(UnitId(UnitIdStyle::kIndexDash, gpus[1], 3), "1-3");
  EXPECT_EQ(UnitId(UnitIdStyle::kUuidUnderscore, gpus[1], 3), "GPU-bbbb-2222_3");
  for (UnitIdStyle style : {UnitIdStyle::kUuidDash, UnitIdStyle::kIndexDash, UnitIdStyle::kUuidUnderscore}) {
    EXPECT_EQ(GpuOfUnit(style, UnitId(style, gpus[1], 17), gpus), &gpus[1]);
    EXPECT_EQ(GpuOfUnit(style, UnitId(style, gpus[0], 0), gpus), &gpus[0]);
  }
  EXPECT_EQ(GpuOfUnit(UnitIdStyle::kUuidDash, "GPU-cccc-3333-1", gpus), nullptr);
  EXPECT_EQ(GpuOfUnit(UnitIdStyle::kUuidDash, "GPU-aaaa-1111", gpus), nullptr);  // "1111" is not a unit of "GPU-aaaa"
  EXPECT_EQ(GpuOfUnit(UnitIdStyle::kUuidDash, "GPU-aaaa-1111-x", gpus), nullptr);
  EXPECT_EQ(GpuOfUnit(UnitIdStyle::kUuidUnderscore, "_3", gpus), nullptr);
}

TEST(VirtualDevicesTest, SameGpuPacksIntoTheFullestGpuThatFits) {
  const auto gpus = Gpus();
  // GPU a has 3 free units, GPU b 10: a request for 2 goes to a (pack), for 5 to b.
  std::vector<std::string> available = Units(UnitIdStyle::kUuidUnderscore, gpus[1], 0, 10);
  for (const auto& id : Units(UnitIdStyle::kUuidUnderscore, gpus[0], 7, 10)) available.push_back(id);
  auto two = PreferredUnits(UnitIdStyle::kUuidUnderscore, Placement::kSameGpu, gpus, available, {}, 2);
  ASSERT_EQ(two.size(), 2u);
  for (const auto& id : two) EXPECT_EQ(GpuOfUnit(UnitIdStyle::kUuidUnderscore, id, gpus), &gpus[0]) << id;
  auto five = PreferredUnits(UnitIdStyle::kUuidUnderscore, Placement::kSameGpu, gpus, available, {}, 5);
  ASSERT_EQ(five.size(), 5u);
  for (const auto& id : five) EXPECT_EQ(GpuOfUnit(UnitIdStyle::kUuidUnderscore, id, gpus), &gpus[1]) << id;
}

TEST(VirtualDevicesTest, SameGpuFollowsThePreferredGpuAndMustInclude) {
  const auto gpus = Gpus();
  std::vector<std::string> available = Units(UnitIdStyle::kUuidUnderscore, gpus[0], 0, 100);
  for (const auto& id : Units(UnitIdStyle::kUuidUnderscore, gpus[1], 0, 100)) available.push_back(id);
  auto preferred = PreferredUnits(UnitIdStyle::kUuidUnderscore, Placement::kSameGpu, gpus, available, {}, 50, "GPU-bbbb-2222");
  ASSERT_EQ(preferred.size(), 50u);
  for (const auto& id : preferred) EXPECT_EQ(GpuOfUnit(UnitIdStyle::kUuidUnderscore, id, gpus), &gpus[1]);
  const std::string must = UnitId(UnitIdStyle::kUuidUnderscore, gpus[0], 42);
  auto with_must = PreferredUnits(UnitIdStyle::kUuidUnderscore, Placement::kSameGpu, gpus, available, {must}, 3, "GPU-bbbb-2222");
  ASSERT_EQ(with_must.size(), 3u);
  EXPECT_EQ(with_must[0], must);
  for (const auto& id : with_must) EXPECT_EQ(GpuOfUnit(UnitIdStyle::kUuidUnderscore, id, gpus), &gpus[0]);
}

TEST(VirtualDevicesTest, SameGpuSpillsOnlyWhenNoGpuHoldsTheRequest) {
  const auto gpus = Gpus();
  std::vector<std::string> available = Units(UnitIdStyle::kUuidUnderscore, gpus[0], 0, 3);
  for (const auto& id : Units(UnitIdStyle::kUuidUnderscore, gpus[1], 0, 2)) available.push_back(id);
  auto four = PreferredUnits(UnitIdStyle::kUuidUnderscore, Placement::kSameGpu, gpus, available, {}, 4);
  EXPECT_EQ(four.size(), 4u);
  EXPECT_EQ(std::set<std::string>(four.begin(), four.end()).size(), 4u);
}

TEST(VirtualDevicesTest, DistinctGpusSpreads) {
  const auto gpus = Gpus();
  std::vector<std::string> available = Units(UnitIdStyle::kUuidDash, gpus[0], 0, 10);
  for (const auto& id : Units(UnitIdStyle::kUuidDash, gpus[1], 0, 10)) available.push_back(id);
  auto two = PreferredUnits(UnitIdStyle::kUuidDash, Placement::kDistinctGpus, gpus, available, {}, 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_NE(GpuOfUnit(UnitIdStyle::kUuidDash, two[0], gpus), GpuOfUnit(UnitIdStyle::kUuidDash, two[1], gpus));
  auto too_many = PreferredUnits(UnitIdStyle::kUuidDash, Placement::kDistinctGpus, gpus, available, {}, 25);
  EXPECT_EQ(too_many.size(), 20u);
}

}  // namespace
}  // namespace vgpu::k8s
