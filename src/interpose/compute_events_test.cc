// RealEventOps::ElapsedMs picks the driver's cuEventElapsedTime_v2 where the driver has it and
// version 1 otherwise (driver_imports.def says why); QueryAgainst asks _v2 and falls back to
// cuEventQuery. g_cuda is this test's own: the entries are fakes that record what was called.
#include "interpose/compute_events.h"

#include <cmath>

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

int g_query_calls = 0;
CUresult g_query_result = CUDA_SUCCESS;

CUresult FakeQuery(CUevent) {
  ++g_query_calls;
  return g_query_result;
}

class ElapsedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_v1_calls = g_v2_calls = g_query_calls = 0;
    g_result = g_query_result = CUDA_SUCCESS;
    g_cuda.cuEventElapsedTime = nullptr;
    g_cuda.cuEventElapsedTime_v2 = nullptr;
    g_cuda.cuEventQuery = FakeQuery;
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

// Completion asked against a completed event: _v2's answer where it has one (no cuEventQuery,
// whose first look at a completed event costs far more), the query otherwise.
TEST_F(ElapsedTest, QueryAgainstAsksVersion2AndFallsBackToTheQuery) {
  g_cuda.cuEventElapsedTime = FakeV1;
  g_cuda.cuEventElapsedTime_v2 = FakeV2;
  float ms = 0;
  EXPECT_EQ(ops_.QueryAgainst(1, 2, &ms), compute::EventState::kReady);
  EXPECT_EQ(ms, 2.0f);  // _v2's answer comes with the time: no second call for it
  g_result = CUDA_ERROR_NOT_READY;
  EXPECT_EQ(ops_.QueryAgainst(1, 2, &ms), compute::EventState::kNotReady);
  EXPECT_TRUE(std::isnan(ms));
  EXPECT_EQ(g_v2_calls, 2);
  EXPECT_EQ(g_query_calls, 0);
  // Any other answer of _v2: the query decides, errors included, and no time comes with it.
  g_result = CUDA_ERROR_INVALID_HANDLE;
  g_query_result = CUDA_ERROR_NOT_READY;
  EXPECT_EQ(ops_.QueryAgainst(1, 2, &ms), compute::EventState::kNotReady);
  g_query_result = CUDA_ERROR_LAUNCH_FAILED;
  EXPECT_EQ(ops_.QueryAgainst(1, 2, &ms), compute::EventState::kError);
  EXPECT_EQ(g_query_calls, 2);
  g_query_result = CUDA_SUCCESS;
  EXPECT_EQ(ops_.QueryAgainst(1, 2, &ms), compute::EventState::kReady);
  EXPECT_TRUE(std::isnan(ms));
  // Version 1 looks for earlier asynchronous errors (microseconds): never used for this.
  g_cuda.cuEventElapsedTime_v2 = nullptr;
  EXPECT_EQ(ops_.QueryAgainst(1, 2, &ms), compute::EventState::kReady);
  EXPECT_TRUE(std::isnan(ms));
  EXPECT_EQ(g_v1_calls, 0);
  EXPECT_EQ(g_query_calls, 4);
}

}  // namespace
}  // namespace vgpu::compute_limit
