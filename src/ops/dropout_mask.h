#pragma once
// The element test of ops/dropout.h, one definition for the CPU reference and the CUDA kernel: element
// `index` of stream `key` is kept when its Philox draw (uniform in (0, 1], 24 bits, exact in float) is above
// p.
#include <cstdint>

#include "core/philox.h"

namespace primus::ops {

PRIMUS_HD bool dropout_keeps(uint64_t key, uint64_t index, float p) {
  return uint_to_unit_float(philox4x32(key, index, 0).v[0]) > p;
}

}  // namespace primus::ops
