// Value syntax shared by every dialect: sizes, percents, booleans, and size formatting.
// Declared in config.h. No allocation except in FormatSize / error strings; no locale use.

#include <cinttypes>
#include <cstdio>
#include <string>
#include <string_view>

#include "common/config.h"
#include "common/config_internal.h"

namespace vgpu {
namespace internal {

bool IsBlank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsBlank(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsBlank(s.back())) s.remove_suffix(1);
  return s;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

UintStatus ParseUint(std::string_view digits, uint64_t max, uint64_t* out) {
  if (digits.empty()) return UintStatus::kMalformed;
  for (char c : digits) {
    if (!IsDigit(c)) return UintStatus::kMalformed;
  }
  uint64_t value = 0;
  for (char c : digits) {
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (value > max / 10) return UintStatus::kTooLarge;
    value *= 10;
    if (d > max - value) return UintStatus::kTooLarge;
    value += d;
  }
  *out = value;
  return UintStatus::kOk;
}

}  // namespace internal

namespace {

using internal::EqualsIgnoreCase;
using internal::IsDigit;
using internal::Trim;

constexpr char kSizeExpected[] = "expected a size such as 4GiB, 512MiB, 1g or 1073741824";

enum class SizeStatus { kOk, kEmpty, kNegative, kMalformed, kExponent, kFractionNeedsUnit, kOverflow };

// Multiplier of a unit: "" or "B" = 1; k, m, g, t, p, e with optional "i" and optional "B"
// (any case) = 1024^n. 0 when the unit is unknown.
uint64_t UnitMultiplier(std::string_view unit) {
  if (unit.empty() || EqualsIgnoreCase(unit, "b")) return 1;
  constexpr std::string_view kPrefixes = "kmgtpe";
  char first = unit[0];
  if (first >= 'A' && first <= 'Z') first = static_cast<char>(first - 'A' + 'a');
  const size_t index = kPrefixes.find(first);
  if (index == std::string_view::npos) return 0;
  const std::string_view rest = unit.substr(1);
  if (!(rest.empty() || EqualsIgnoreCase(rest, "i") || EqualsIgnoreCase(rest, "b") ||
        EqualsIgnoreCase(rest, "ib"))) {
    return 0;
  }
  return uint64_t{1} << (10 * (index + 1));
}

// "1e9", "1E+9", and a bare "e": the last is refused rather than read as 1 EiB, since it is far
// more likely a cut exponent than an exbibyte limit (which would silently mean "no limit").
bool LooksLikeExponent(std::string_view unit) {
  if (unit.empty() || (unit[0] != 'e' && unit[0] != 'E')) return false;
  return unit.size() == 1 || IsDigit(unit[1]) || unit[1] == '+' || unit[1] == '-';
}

// floor(0.<digits> * multiplier), exactly, for multiplier <= 2^60: schoolbook multiplication of
// the digit string by `multiplier`, from the last digit, keeping only the carry. Each step
// stays below 10 * multiplier <= 10 * 2^60 < 2^64.
uint64_t FractionTimes(std::string_view digits, uint64_t multiplier) {
  uint64_t carry = 0;
  for (size_t i = digits.size(); i-- > 0;) {
    carry = (static_cast<uint64_t>(digits[i] - '0') * multiplier + carry) / 10;
  }
  return carry;
}

SizeStatus ParseSizeStatus(std::string_view text, uint64_t* out) {
  const std::string_view s = Trim(text);
  if (s.empty()) return SizeStatus::kEmpty;
  if (s[0] == '-') {
    const bool number_follows = s.size() > 1 && (IsDigit(s[1]) || s[1] == '.');
    return number_follows ? SizeStatus::kNegative : SizeStatus::kMalformed;
  }
  size_t i = 0;
  while (i < s.size() && IsDigit(s[i])) ++i;
  const std::string_view whole_digits = s.substr(0, i);
  if (whole_digits.empty()) return SizeStatus::kMalformed;
  std::string_view fraction_digits;
  const bool has_fraction = i < s.size() && s[i] == '.';
  if (has_fraction) {
    const size_t start = ++i;
    while (i < s.size() && IsDigit(s[i])) ++i;
    fraction_digits = s.substr(start, i - start);
    if (fraction_digits.empty()) return SizeStatus::kMalformed;
  }
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  const std::string_view unit = s.substr(i);
  if (LooksLikeExponent(unit)) return SizeStatus::kExponent;
  const uint64_t multiplier = UnitMultiplier(unit);
  if (multiplier == 0) return SizeStatus::kMalformed;
  if (has_fraction && multiplier == 1) return SizeStatus::kFractionNeedsUnit;

  uint64_t whole = 0;
  if (internal::ParseUint(whole_digits, UINT64_MAX, &whole) != internal::UintStatus::kOk) {
    return SizeStatus::kOverflow;
  }
  if (whole > UINT64_MAX / multiplier) return SizeStatus::kOverflow;
  const uint64_t total = whole * multiplier;
  const uint64_t fraction = has_fraction ? FractionTimes(fraction_digits, multiplier) : 0;
  if (fraction > UINT64_MAX - total) return SizeStatus::kOverflow;
  *out = total + fraction;
  return SizeStatus::kOk;
}

const char* SizeProblem(SizeStatus status) {
  switch (status) {
    case SizeStatus::kOk:
    case SizeStatus::kMalformed:
      return "";
    case SizeStatus::kEmpty:
      return "; the value is blank";
    case SizeStatus::kNegative:
      return "; negative sizes are not allowed";
    case SizeStatus::kExponent:
      return "; exponent notation such as 1e9 is not supported (for exbibytes write EiB)";
    case SizeStatus::kFractionNeedsUnit:
      return "; a fraction needs a unit, as in 1.5GiB";
    case SizeStatus::kOverflow:
      return "; the value does not fit in 64 bits (at most 16 EiB - 1 byte)";
  }
  return "";
}

}  // namespace

std::optional<uint64_t> ParseSize(std::string_view text, std::string* error) {
  uint64_t value = 0;
  const SizeStatus status = ParseSizeStatus(text, &value);
  if (status == SizeStatus::kOk) return value;
  if (error != nullptr) *error = std::string(kSizeExpected) + SizeProblem(status);
  return std::nullopt;
}

std::optional<int> ParsePercent(std::string_view text) {
  std::string_view s = Trim(text);
  if (!s.empty() && s.back() == '%') s = Trim(s.substr(0, s.size() - 1));
  uint64_t value = 0;
  if (internal::ParseUint(s, 100, &value) != internal::UintStatus::kOk) return std::nullopt;
  return static_cast<int>(value);
}

std::optional<bool> ParseBool(std::string_view text) {
  const std::string_view s = Trim(text);
  for (std::string_view yes : {"true", "1", "yes", "on", "t"}) {
    if (EqualsIgnoreCase(s, yes)) return true;
  }
  for (std::string_view no : {"false", "0", "no", "off", "f"}) {
    if (EqualsIgnoreCase(s, no)) return false;
  }
  return std::nullopt;
}

std::optional<int64_t> ParseDurationMs(std::string_view text) {
  const std::string_view s = Trim(text);
  size_t digits = 0;
  while (digits < s.size() && IsDigit(s[digits])) ++digits;
  constexpr uint64_t kYearMs = 366ULL * 24 * 3'600'000;
  uint64_t value = 0;
  if (digits == 0 || internal::ParseUint(s.substr(0, digits), kYearMs, &value) != internal::UintStatus::kOk) {
    return std::nullopt;
  }
  const std::string_view unit = s.substr(digits);
  uint64_t scale = 0;
  if (unit == "ms") {
    scale = 1;
  } else if (unit == "s") {
    scale = 1'000;
  } else if (unit == "m") {
    scale = 60'000;
  } else if (unit == "h") {
    scale = 3'600'000;
  } else {
    return std::nullopt;
  }
  if (value > kYearMs / scale) return std::nullopt;
  return static_cast<int64_t>(value * scale);
}

std::string FormatSize(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  while (unit < 6 && (bytes >> (10 * (unit + 1))) != 0) ++unit;
  const int shift = 10 * unit;
  const uint64_t whole = bytes >> shift;
  const uint64_t remainder = bytes - (whole << shift);
  char buffer[48];
  if (remainder == 0) {
    std::snprintf(buffer, sizeof(buffer), "%" PRIu64 " %s", whole, kUnits[unit]);
  } else {
    // remainder < 2^60, so remainder * 100 needs more than 64 bits.
    const auto hundredths = static_cast<unsigned>((static_cast<unsigned __int128>(remainder) * 100) >> shift);
    std::snprintf(buffer, sizeof(buffer), "%" PRIu64 ".%02u %s", whole, hundredths, kUnits[unit]);
  }
  return buffer;
}

}  // namespace vgpu
