// RealEventOps::ElapsedMs picks the driver's cuEventElapsedTime_v2 where the driver has it and
// version 1 otherwise (driver_imports.def says why). g_cuda is this test's own: the entries are
// fakes that record which version was called.
#include "interpose/compute_events.h"

#include <gtest/gtest.h>

#include "interpose/driver_imports.h"

namespace vgpu {
CudaImports g_cuda;
NvmlImports g_nvml;
}  // namespace vgpu

namespace vgpu::compute_limit {
namespace {

int g_v1_calls = 0;
int g_v2_calls = 0;
CUresult g_result = CUDA_SUCCESS;

CUresult FakeV1(float* ms, CUevent, CUevent) {
  ++g_v1_calls;
  *ms = 1.0f;
  return g_result;
}

CUresult FakeV2(float* ms, CUevent, CUevent) {
  ++g_v2_calls;
  *ms = 2.0f;
  return g_result;
}

class ElapsedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_v1_calls = g_v2_calls = 0;
    g_result = CUDA_SUCCESS;
    g_cuda.cuEventElapsedTime = nullptr;
    g_cuda.cuEventElapsedTime_v2 = nullptr;
  }
  RealEventOps ops_;
};

TEST_F(ElapsedTest, PrefersVersion2WhereTheDriverHasIt) {
  g_cuda.cuEventElapsedTime = FakeV1;
  g_cuda.cuEventElapsedTime_v2 = FakeV2;
  float ms = 0;
  ASSERT_TRUE(ops_.ElapsedMs(1, 2, &ms));
  EXPECT_EQ(ms, 2.0f);
  EXPECT_EQ(g_v2_calls, 1);
  EXPECT_EQ(g_v1_calls, 0);
}

TEST_F(ElapsedTest, FallsBackToVersion1OnOlderDrivers) {
  g_cuda.cuEventElapsedTime = FakeV1;
  float ms = 0;
  ASSERT_TRUE(ops_.ElapsedMs(1, 2, &ms));
  EXPECT_EQ(ms, 1.0f);
  EXPECT_EQ(g_v1_calls, 1);
}

TEST_F(ElapsedTest, FailsWithoutEitherEntryOrOnADriverError) {
  float ms = 0;
  EXPECT_FALSE(ops_.ElapsedMs(1, 2, &ms));
  g_cuda.cuEventElapsedTime_v2 = FakeV2;
  g_result = CUDA_ERROR_NOT_READY;
  EXPECT_FALSE(ops_.ElapsedMs(1, 2, &ms));
  EXPECT_EQ(g_v2_calls, 1);
}

}  // namespace
}  // namespace vgpu::compute_limit
