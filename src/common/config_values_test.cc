// Unit tests for the value syntax shared by every dialect: ParseSize, FormatSize, ParsePercent,
// ParseBool, ParseDurationMs (config_values.cc).

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "common/config.h"

namespace vgpu {
namespace {

constexpr uint64_t kKiB = uint64_t{1} << 10;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kTiB = uint64_t{1} << 40;
constexpr uint64_t kPiB = uint64_t{1} << 50;
constexpr uint64_t kEiB = uint64_t{1} << 60;
constexpr char kSizeExpected[] = "expected a size such as 4GiB, 512MiB, 1g or 1073741824";

// ---- ParseSize ----------------------------------------------------------------------------------

struct SizeCase {
  const char* text;
  std::optional<uint64_t> expected;
  const char* reason_part;  // for rejects: a substring of the reason ("" = the bare kSizeExpected)
};

TEST(ParseSizeTest, Table) {
  const SizeCase cases[] = {
      {"1g", kGiB, nullptr},
      {"1024m", kGiB, nullptr},
      {"1048576k", kGiB, nullptr},
      {"1073741824", kGiB, nullptr},
      {"4GiB", 4 * kGiB, nullptr},
      {"1.5GiB", 3 * kGiB / 2, nullptr},
      {"0", 0, nullptr},
      {"00001g", kGiB, nullptr},
      {"1G", kGiB, nullptr},
      {"1Gi", kGiB, nullptr},
      {"1GB", kGiB, nullptr},
      {"1gb", kGiB, nullptr},
      {"1gib", kGiB, nullptr},
      {"1GIB", kGiB, nullptr},
      {"1KB", kKiB, nullptr},
      {"512k", 512 * kKiB, nullptr},
      {"512MiB", 512 * kMiB, nullptr},
      {"2T", 2 * kTiB, nullptr},
      {"2TiB", 2 * kTiB, nullptr},
      {"3p", 3 * kPiB, nullptr},
      {"15EiB", 15 * kEiB, nullptr},
      {"123B", 123, nullptr},
      {"123 B", 123, nullptr},
      {"  4GiB  ", 4 * kGiB, nullptr},
      {"4 GiB", 4 * kGiB, nullptr},
      {"4\tGiB", 4 * kGiB, nullptr},
      {"\n4GiB\r\n", 4 * kGiB, nullptr},
      {"0.5k", 512, nullptr},
      {"0.1k", 102, nullptr},  // 102.4 rounded down
      {"1.0000000000000000000000000001g", kGiB, nullptr},
      {"0.9999999999999999999999999999k", 1023, nullptr},
      {"18446744073709551615", UINT64_MAX, nullptr},
      {"17179869183.99999999999g", UINT64_MAX, nullptr},  // (2^34-1) GiB + floor(0.99.. GiB)
      {"-1", std::nullopt, "negative"},
      {"-0", std::nullopt, "negative"},
      {" -1g", std::nullopt, "negative"},
      {"1e9", std::nullopt, "exponent"},
      {"1E+9", std::nullopt, "exponent"},
      {"18446744073709551616", std::nullopt, "64 bits"},
      {"99999999999999999999999", std::nullopt, "64 bits"},
      {"16EiB", std::nullopt, "64 bits"},
      {"17179869184g", std::nullopt, "64 bits"},
      {"1.5", std::nullopt, "fraction needs a unit"},
      {"1.5B", std::nullopt, "fraction needs a unit"},
      {"", std::nullopt, "blank"},
      {"   ", std::nullopt, "blank"},
      {"12x", std::nullopt, ""},
      {"1.g", std::nullopt, ""},
      {".5g", std::nullopt, ""},
      {"1..5g", std::nullopt, ""},
      {"1.5.5g", std::nullopt, ""},
      {"1.5x", std::nullopt, ""},
      {"g", std::nullopt, ""},
      {"GiB", std::nullopt, ""},
      {"1gibb", std::nullopt, ""},
      {"1ib", std::nullopt, ""},
      {"1i", std::nullopt, ""},
      {"1 g b", std::nullopt, ""},
      {"+1", std::nullopt, ""},
      {"-", std::nullopt, ""},
      {"0x10", std::nullopt, ""},
      {"1,000", std::nullopt, ""},
      {"1_000", std::nullopt, ""},
      {"1 000", std::nullopt, ""},
      {"1g junk", std::nullopt, ""},
      {"1e", std::nullopt, "exponent"},
      {"1E", std::nullopt, "exponent"},
      {"1EB", kEiB, nullptr},
      {"1ei", kEiB, nullptr},
      {"1z", std::nullopt, ""},
  };
  for (const SizeCase& c : cases) {
    SCOPED_TRACE(std::string("input \"") + c.text + "\"");
    std::string error;
    const std::optional<uint64_t> got = ParseSize(c.text, &error);
    EXPECT_EQ(got, c.expected);
    EXPECT_EQ(ParseSize(c.text), c.expected);  // the error argument is optional
    if (c.expected) {
      EXPECT_EQ(error, "");
    } else if (c.reason_part[0] == '\0') {
      EXPECT_EQ(error, kSizeExpected);
    } else {
      EXPECT_EQ(error.rfind(kSizeExpected, 0), 0u) << error;
      EXPECT_NE(error.find(c.reason_part), std::string::npos) << error;
    }
  }
}

TEST(FormatSizeTest, Table) {
  const std::pair<uint64_t, const char*> cases[] = {
      {0, "0 B"},
      {1, "1 B"},
      {123, "123 B"},
      {1023, "1023 B"},
      {kKiB, "1 KiB"},
      {1536, "1.50 KiB"},
      {512 * kMiB, "512 MiB"},
      {4 * kGiB, "4 GiB"},
      {3 * kGiB / 2, "1.50 GiB"},
      {kGiB - 1, "1023.99 MiB"},  // rounded down, never "1024.00 MiB"
      {kGiB + 1, "1.00 GiB"},
      {kTiB, "1 TiB"},
      {kEiB, "1 EiB"},
      {UINT64_MAX, "15.99 EiB"},
  };
  for (const auto& [bytes, text] : cases) {
    EXPECT_EQ(FormatSize(bytes), text) << bytes;
  }
}

TEST(FormatSizeTest, ParsesBackToAtMostTheValue) {
  for (uint64_t bytes : {uint64_t{0}, uint64_t{1}, uint64_t{1000}, kGiB - 1, kGiB, 3 * kGiB / 2 + 7,
                         kEiB + 12345, UINT64_MAX}) {
    const std::optional<uint64_t> back = ParseSize(FormatSize(bytes));
    ASSERT_TRUE(back.has_value()) << FormatSize(bytes);
    EXPECT_LE(*back, bytes);
    uint64_t unit = 1;
    while (unit < kEiB && bytes / unit >= 1024) unit *= 1024;
    EXPECT_LE(bytes - *back, unit / 100 + 1) << FormatSize(bytes);
  }
}

// ---- ParsePercent / ParseBool -------------------------------------------------------------------

TEST(ParsePercentTest, Table) {
  const std::pair<const char*, std::optional<int>> cases[] = {
      {"0", 0},          {"30", 30},           {"100", 100},         {"30%", 30},
      {" 30 % ", 30},    {"0100", 100},        {"101", std::nullopt}, {"-1", std::nullopt},
      {"30.5", std::nullopt}, {"", std::nullopt}, {"%", std::nullopt}, {"abc", std::nullopt},
      {"1e2", std::nullopt},  {"30%%", std::nullopt}, {"99999999999999999999999", std::nullopt},
  };
  for (const auto& [text, expected] : cases) EXPECT_EQ(ParsePercent(text), expected) << text;
}

TEST(ParseBoolTest, Table) {
  const std::pair<const char*, std::optional<bool>> cases[] = {
      {"true", true},   {"TRUE", true},   {"True", true},  {"1", true},    {"yes", true},
      {"on", true},     {"t", true},      {" true ", true}, {"false", false}, {"FALSE", false},
      {"0", false},     {"no", false},    {"off", false},  {"f", false},   {"", std::nullopt},
      {"maybe", std::nullopt}, {"2", std::nullopt}, {"truee", std::nullopt}, {"yes please", std::nullopt},
  };
  for (const auto& [text, expected] : cases) EXPECT_EQ(ParseBool(text), expected) << text;
}

TEST(ParseDurationMsTest, Table) {
  const std::pair<const char*, std::optional<int64_t>> cases[] = {
      {"500ms", 500},          {"2s", 2'000},          {" 1s ", 1'000},       {"10m", 600'000},
      {"1h", 3'600'000},       {"0ms", 0},             {"5", std::nullopt},   {"-1s", std::nullopt},
      {"1.5s", std::nullopt},  {"", std::nullopt},     {"s", std::nullopt},   {"1 s", std::nullopt},
      {"1S", std::nullopt},    {"2d", std::nullopt},   {"8000h", 8000LL * 3'600'000},
      {"9000h", std::nullopt}, {"99999999999999999999ms", std::nullopt},
  };
  for (const auto& [text, expected] : cases) EXPECT_EQ(ParseDurationMs(text), expected) << text;
}

}  // namespace
}  // namespace vgpu
