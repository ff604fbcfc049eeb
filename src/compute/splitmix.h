// splitmix64: one step of Steele, Lea and Flood's generator, used to turn a seed (a time, a pid,
// an address, a counter) into a well-mixed 64-bit value: the turn's and the busy ring's tokens,
// and the simulated GPU's jitter draws. Not for anything secret.
#pragma once

#include <cstdint>

namespace vgpu::compute {

inline constexpr uint64_t kSplitMixGamma = 0x9e3779b97f4a7c15ULL;

// The value splitmix64 yields for state `x` (the state then advances by kSplitMixGamma).
inline uint64_t SplitMix64(uint64_t x) {
  uint64_t z = x + kSplitMixGamma;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace vgpu::compute
