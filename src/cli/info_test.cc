#include "cli/info.h"

#include <gtest/gtest.h>

namespace vgpu::cli {
namespace {

constexpr uint64_t kGiB = 1024ull * 1024 * 1024;

InfoReport BaseReport() {
  InfoReport report;
  report.library.path = "/opt/vgpu/lib/vgpu/libvgpu.so";
  report.library.source = "install tree";
  return report;
}

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(InfoTest, CudaVersion) {
  EXPECT_EQ(FormatCudaVersion(13000), "13.0");
  EXPECT_EQ(FormatCudaVersion(12040), "12.4");
  EXPECT_EQ(FormatCudaVersion(11080), "11.8");
}

TEST(InfoTest, NoDriver) {
  InfoReport report = BaseReport();
  report.driver.error = "libcuda.so.1: cannot open shared object file";
  const std::string text = FormatInfo(report);
  EXPECT_TRUE(Contains(text, "library:  /opt/vgpu/lib/vgpu/libvgpu.so (install tree)")) << text;
  EXPECT_TRUE(Contains(text, "driver:   no NVIDIA driver found (libcuda.so.1: libcuda.so.1: cannot open")) << text;
  EXPECT_FALSE(Contains(text, "devices:")) << text;  // no NVML probe without a driver
  EXPECT_TRUE(Contains(text, "configuration from the environment:")) << text;
}

TEST(InfoTest, LibraryNotFound) {
  InfoReport report = BaseReport();
  report.library.path.clear();
  report.library.error = "libvgpu.so not found (tried /a)";
  EXPECT_TRUE(Contains(FormatInfo(report), "library:  none: libvgpu.so not found (tried /a)"));
}

TEST(InfoTest, SimulatedDriverAndDevices) {
  InfoReport report = BaseReport();
  report.driver.found = true;
  report.driver.path = "/build/sim/libcuda.so.1";
  report.driver.simulated = true;
  report.driver.version = 13000;
  report.nvml.loaded = true;
  report.nvml.driver_version = "580.65.06";
  NvmlDeviceInfo gpu;
  gpu.index = 0;
  gpu.name = "NVIDIA H200";
  gpu.uuid = "GPU-1234";
  gpu.memory_total = 141 * kGiB;
  gpu.memory_free = 140 * kGiB;
  gpu.memory_used = 1 * kGiB;
  NvmlDeviceInfo broken;
  broken.index = 1;
  broken.error = "nvmlDeviceGetHandleByIndex_v2 failed (15: GPU is lost)";
  report.nvml.devices = {gpu, broken};
  const std::string text = FormatInfo(report);
  EXPECT_TRUE(Contains(text, "driver:   /build/sim/libcuda.so.1 (SIMULATED: the project's test double, not a GPU), CUDA 13.0"))
      << text;
  EXPECT_TRUE(Contains(text, "NVML:     driver 580.65.06")) << text;
  EXPECT_TRUE(Contains(text, "GPU 0: NVIDIA H200  GPU-1234")) << text;
  EXPECT_TRUE(Contains(text, "memory 141 GiB total, 140 GiB free, 1 GiB used")) << text;
  EXPECT_TRUE(Contains(text, "GPU 1: ?")) << text;
  EXPECT_TRUE(Contains(text, "error: nvmlDeviceGetHandleByIndex_v2 failed (15: GPU is lost)")) << text;
}

TEST(InfoTest, RealDriverWithoutNvml) {
  InfoReport report = BaseReport();
  report.driver.found = true;
  report.driver.path = "/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06";
  report.nvml.error = "libnvidia-ml.so.1: cannot open shared object file";
  const std::string text = FormatInfo(report);
  EXPECT_TRUE(Contains(text, "libcuda.so.580.65.06 (NVIDIA)")) << text;
  EXPECT_FALSE(Contains(text, "CUDA ")) << text;  // version unknown: not printed
  EXPECT_TRUE(Contains(text, "devices:  unknown (NVML: libnvidia-ml.so.1: cannot open")) << text;
}

TEST(InfoTest, ConfigurationIsDescribedAndErrorsListed) {
  InfoReport report = BaseReport();
  report.config = ParseConfig([](const char* name) -> const char* {
    if (std::string(name) == "CUDA_DEVICE_MEMORY_LIMIT") return "2GiB";
    if (std::string(name) == "CUDA_DEVICE_SM_LIMIT") return "300";
    return nullptr;
  });
  ASSERT_FALSE(report.config.ok());
  const std::string text = FormatInfo(report);
  EXPECT_TRUE(Contains(text, "CUDA_DEVICE_SM_LIMIT=\"300\"")) << text;
  // Every line of Describe() appears, indented.
  const std::string described = report.config.config.Describe();
  ASSERT_FALSE(described.empty());
  EXPECT_TRUE(Contains(text, "  " + described.substr(0, described.find('\n')))) << text;
}

}  // namespace
}  // namespace vgpu::cli
