#include "data/numpy_random.h"

namespace primus {

NumpyRandomState::NumpyRandomState(uint32_t seed) {
  // mt19937_seed (numpy/random/src/mt19937/mt19937.c), used by RandomState(int seed).
  mt_[0] = seed;
  for (int i = 1; i < 624; ++i)
    mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  pos_ = 624;
}

uint32_t NumpyRandomState::next_u32() {
  constexpr uint32_t kUpper = 0x80000000u, kLower = 0x7fffffffu, kMatrixA = 0x9908b0dfu;
  if (pos_ == 624) {
    int i = 0;
    for (; i < 624 - 397; ++i) {
      const uint32_t y = (mt_[i] & kUpper) | (mt_[i + 1] & kLower);
      mt_[i] = mt_[i + 397] ^ (y >> 1) ^ (-(y & 1u) & kMatrixA);
    }
    for (; i < 623; ++i) {
      const uint32_t y = (mt_[i] & kUpper) | (mt_[i + 1] & kLower);
      mt_[i] = mt_[i + (397 - 624)] ^ (y >> 1) ^ (-(y & 1u) & kMatrixA);
    }
    const uint32_t y = (mt_[623] & kUpper) | (mt_[0] & kLower);
    mt_[623] = mt_[396] ^ (y >> 1) ^ (-(y & 1u) & kMatrixA);
    pos_ = 0;
  }
  uint32_t y = mt_[pos_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint64_t NumpyRandomState::interval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  uint64_t value;
  if (max <= 0xffffffffull) {
    while ((value = (next_u32() & mask)) > max) {
    }
  } else {
    while ((value = (next_u64() & mask)) > max) {
    }
  }
  return value;
}

}  // namespace primus
