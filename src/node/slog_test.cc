#include "node/slog.h"

#include <gtest/gtest.h>

namespace vgpu::node {
namespace {

constexpr int64_t kT = 1795219200123000000;  // 2026-11-21T00:00:00.123Z

TEST(SlogTest, LogfmtQuotesWhatNeedsQuoting) {
  const std::string line = Logger::Format(LogFormat::kLogfmt, kT, Level::kWarn, "registration", "refused",
                                          {{"host_pid", 42}, {"reason", "pid 5 is in \"x\"\nforged=1"}, {"key", "a_b"}});
  EXPECT_EQ(line,
            "time=2026-11-21T00:00:00.123Z level=warn component=registration msg=refused host_pid=42 "
            "reason=\"pid 5 is in \\\"x\\\"\\nforged=1\" key=a_b");
}

TEST(SlogTest, JsonEscapesControlBytes) {
  const std::string line = Logger::Format(LogFormat::kJson, kT, Level::kInfo, "c", "m\x01", {{"n", uint64_t{7}}, {"ok", true}});
  EXPECT_EQ(line, "{\"time\":\"2026-11-21T00:00:00.123Z\",\"level\":\"info\",\"component\":\"c\",\"msg\":\"m\\u0001\",\"n\":7,\"ok\":true}");
}

TEST(SlogTest, LevelsFilterAndSinkReceivesLines) {
  Logger log;
  log.Configure(Level::kWarn, LogFormat::kLogfmt);
  std::vector<std::string> lines;
  log.SetSinkForTesting([&](const std::string& l) { lines.push_back(l); });
  log.Log(Level::kInfo, "x", "hidden");
  log.Log(Level::kError, "x", "shown");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("msg=shown"), std::string::npos);
  Level level;
  EXPECT_TRUE(ParseLevel("WARNING", &level));
  EXPECT_EQ(level, Level::kWarn);
  EXPECT_FALSE(ParseLevel("loud", &level));
}

}  // namespace
}  // namespace vgpu::node
