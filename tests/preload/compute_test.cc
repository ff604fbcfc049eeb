// The compute limit, end to end against the simulated driver: programs/compute_loop.cc runs a
// saturating loop of `sim_sleep` kernels with libvgpu.so preloaded, and the share it achieves,
// (modelled kernel time completed) / (wall time), must be the limit.
//
// The simulated GPU is coarser than a real one (a kernel is a modelled interval on one engine
// per device, events time-stamp at max(record time, stream tail), and the host's sleeps and
// scheduling on a loaded CI machine add jitter), and each run is only 1.5 s, of which the first
// tens of milliseconds are a burst on banked credit: hence a tolerance of +-5 points. The NVML
// utilisation the simulation reports (busy fraction of the last second) is an independent check
// of the same quantity.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "memory_harness.h"

namespace vgpu::testing {
namespace {

constexpr int kRunMs = 1500;
constexpr double kTolerance = 5.0;  // percentage points

struct Achieved {
  double share = 0;      // percent, from the program's kernel count
  double nvml = 0;       // percent, the simulated NVML utilisation
  uint64_t kernels = 0;
};

class ComputeTest : public MemoryTest {
 protected:
  Achieved RunLoop(int kernel_us, const std::string& variant, const Env& env) {
    const RunResult run = Run({"compute_loop", std::to_string(kernel_us), std::to_string(kRunMs), variant}, env);
    EXPECT_EQ(run.exit_code, 0) << Describe(run);
    const Transcript t(run);
    Achieved a;
    a.kernels = t.U64("kernels");
    const double wall = static_cast<double>(t.U64("wall_ns"));
    a.share = wall > 0 ? 100.0 * static_cast<double>(t.U64("busy_ns")) / wall : 0;
    a.nvml = static_cast<double>(t.U64("nvml_util_percent"));
    std::printf("[ compute  ] %s %d us %s: share %.1f%%, NVML %.0f%%, %llu kernels\n",
                env.count("CUDA_DEVICE_SM_LIMIT") ? ("limit " + env.at("CUDA_DEVICE_SM_LIMIT")).c_str()
                                                  : (env.count("LD_PRELOAD") ? "vgpu, no limit" : "native"),
                kernel_us, variant.c_str(), a.share, a.nvml, static_cast<unsigned long long>(a.kernels));
    return a;
  }
  Env Native() const { return SimEnv(); }
};

struct LimitCase {
  int limit = 0;
  int kernel_us = 0;
  std::string variant = "plain";
};

void PrintTo(const LimitCase& c, std::ostream* os) {
  *os << "limit " << c.limit << ", " << c.kernel_us << " us, " << c.variant;
}

class ComputeLimitTest : public ComputeTest, public ::testing::WithParamInterface<LimitCase> {};

TEST_P(ComputeLimitTest, AchievedShareIsTheLimit) {
  const LimitCase& c = GetParam();
  const Achieved a = RunLoop(c.kernel_us, c.variant, VgpuEnv({{"CUDA_DEVICE_SM_LIMIT", std::to_string(c.limit)}}));
  EXPECT_NEAR(a.share, c.limit, kTolerance) << "kernel time / wall time";
  EXPECT_NEAR(a.nvml, c.limit, kTolerance) << "simulated NVML utilisation over the last second";
}

INSTANTIATE_TEST_SUITE_P(Loops, ComputeLimitTest,
                         ::testing::Values(LimitCase{30, 2000}, LimitCase{30, 200}, LimitCase{60, 2000},
                                           LimitCase{60, 200}, LimitCase{30, 200, "ptsz"}));

// Without a compute limit the launch hooks are plain forwarders: the GPU stays saturated and the
// throughput is the native one.
TEST_F(ComputeTest, NoLimitRunsAtNativeThroughput) {
  const Achieved native = RunLoop(200, "plain", Native());
  const Achieved hooked = RunLoop(200, "plain", VgpuEnv({}));
  EXPECT_GT(native.share, 95.0);
  EXPECT_GT(hooked.share, 95.0);
  EXPECT_NEAR(hooked.share, native.share, 2.0);
  EXPECT_NEAR(static_cast<double>(hooked.kernels), static_cast<double>(native.kernels),
              0.02 * static_cast<double>(native.kernels));
}

}  // namespace
}  // namespace vgpu::testing
