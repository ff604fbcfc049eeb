// Small text helpers shared by config.cc and config_values.cc. Not part of the public API.
#pragma once

#include <cstdint>
#include <string_view>

namespace vgpu::internal {

bool IsBlank(char c);  // ' ', \t, \n, \r, \v, \f
bool IsDigit(char c);  // ASCII 0-9 only, independent of locale
std::string_view Trim(std::string_view s);
bool EqualsIgnoreCase(std::string_view a, std::string_view b);  // ASCII only

enum class UintStatus { kOk, kMalformed, kTooLarge };

// `digits` must be one or more ASCII digits and nothing else (no sign, no blanks); leading zeros
// are fine. kTooLarge when the value exceeds `max`; *out is written only on kOk.
UintStatus ParseUint(std::string_view digits, uint64_t max, uint64_t* out);

}  // namespace vgpu::internal
