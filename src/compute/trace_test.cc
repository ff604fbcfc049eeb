#include "compute/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace vgpu::compute {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string TempPath(const char* name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name + "." + std::to_string(getpid());
}

TEST(ComputeTraceTest, WritesTheRecordsInTheOrderAdded) {
  ComputeTrace trace(16);
  trace.Add(ComputeTrace::kLaunch, 0, 100, 250);
  trace.Add(ComputeTrace::kSleep, 0, 300, 5'000'000);
  trace.Add(ComputeTrace::kBusy, 1, -5, 1'234'567'890'123);
  trace.Add(ComputeTrace::kCharge, 0, 400, 2'000'000, 1'500'000);
  trace.Add(ComputeTrace::kUnmeasured, 0, 400, 300'000);
  trace.Add(ComputeTrace::kSync, 0, 500, 9'000, 7'000);
  const std::string path = TempPath("vgpu-trace-test");
  std::string error;
  ASSERT_TRUE(trace.WriteTo(path, &error)) << error;
  EXPECT_EQ(ReadFile(path),
            "# vgpu compute trace 1: 6 records, 0 dropped\n"
            "L 0 100 250\n"
            "S 0 300 5000000\n"
            "B 1 -5 1234567890123\n"
            "C 0 400 2000000 1500000\n"
            "U 0 400 300000\n"
            "Y 0 500 9000 7000\n");
  std::remove(path.c_str());
}

TEST(ComputeTraceTest, DropsAndCountsRecordsBeyondItsCapacity) {
  ComputeTrace trace(100);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&trace, t] {
      for (int i = 0; i < 50; ++i) trace.Add(ComputeTrace::kLaunch, t, i, i + 1);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(trace.records(), 100u);
  EXPECT_EQ(trace.dropped(), 100u);
  const std::string path = TempPath("vgpu-trace-full");
  std::string error;
  ASSERT_TRUE(trace.WriteTo(path, &error)) << error;
  const std::string text = ReadFile(path);
  EXPECT_EQ(text.rfind("# vgpu compute trace 1: 100 records, 100 dropped\n", 0), 0u) << text.substr(0, 80);
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  EXPECT_EQ(lines, 101u);
  std::remove(path.c_str());
}

TEST(ComputeTraceTest, AnUnwritableFileIsAnErrorNamingIt) {
  ComputeTrace trace(4);
  trace.Add(ComputeTrace::kLaunch, 0, 1, 2);
  std::string error;
  EXPECT_FALSE(trace.WriteTo("/nonexistent-dir/trace", &error));
  EXPECT_NE(error.find("/nonexistent-dir/trace"), std::string::npos) << error;
}

TEST(ComputeTraceTest, PercentPIsThePid) {
  EXPECT_EQ(TracePath("/tmp/trace.%p", 4321), "/tmp/trace.4321");
  EXPECT_EQ(TracePath("/tmp/%p/t-%p", 7), "/tmp/7/t-7");
  EXPECT_EQ(TracePath("/tmp/trace", 7), "/tmp/trace");
  EXPECT_EQ(TracePath("/tmp/100%", 7), "/tmp/100%");
}

}  // namespace
}  // namespace vgpu::compute
