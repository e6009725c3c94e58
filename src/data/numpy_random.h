#pragma once
// numpy's legacy RandomState(seed) (MT19937 seeded by init_genrand) and its shuffle, bit for bit, so that the
// GPT dataset's document and shuffle indices equal Megatron's (which draws them from
// numpy.random.RandomState(config.random_seed)).
#include <cstdint>
#include <utility>

namespace primus {

class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed);
  uint32_t next_u32();
  uint64_t next_u64() {
    const uint64_t hi = next_u32();
    return (hi << 32) | next_u32();
  }
  // numpy's random_interval: a uniform value in [0, max] by masked rejection.
  uint64_t interval(uint64_t max);
  // RandomState.shuffle of a 1-D array: Fisher-Yates from the end, j = interval(i).
  template <typename T>
  void shuffle(T* data, int64_t n) {
    for (int64_t i = n - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(interval(static_cast<uint64_t>(i)));
      std::swap(data[i], data[j]);
    }
  }

 private:
  uint32_t mt_[624];
  int pos_;
};

}  // namespace primus
