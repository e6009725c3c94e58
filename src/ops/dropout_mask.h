#pragma once
// The element test of ops/dropout.h, one definition for the CPU reference and the CUDA kernel: element
// `index` of stream `key` is kept when its Philox draw (uniform in (0, 1], 24 bits, exact in float) is above
// p. One Philox call gives four 32-bit draws, for four consecutive indices, so the kernel spends one call per
// four elements (10 rounds per element made it compute-bound at a quarter of the memory bandwidth).
#include <cstdint>

#include "core/philox.h"

namespace primus::ops {

// Where the rows of a dropout input sit in the whole batch, whose place keys the mask. Default: the rows are
// the batch's own. Context parallelism (parallel/context_parallel.h) holds a rank's chunk-major tokens:
// local row (h B + b) C + j is row b T + chunks[h] C + j of the whole [B, T] batch (T = 2 CP C), so a rank
// drops what one process drops at those tokens.
struct DropoutRows {
  int64_t chunk = 0;  // C; 0 = the rows are the whole batch's
  int64_t batch = 1;  // B
  int64_t seq = 0;    // T
  int64_t chunks[2] = {0, 0};
  PRIMUS_HD int64_t whole_row(int64_t row) const {
    if (chunk == 0) return row;
    const int64_t j = row % chunk, block = row / chunk;  // block = h B + b
    const int64_t h = block / batch, b = block - h * batch;
    return b * seq + chunks[h] * chunk + j;
  }
};

PRIMUS_HD bool dropout_keeps(uint64_t key, uint64_t index, float p) {
  return uint_to_unit_float(philox4x32(key, index >> 2, 0).v[index & 3]) > p;
}

// The tests of indices 4 group .. 4 group + 3, from one call.
PRIMUS_HD void dropout_keeps4(uint64_t key, uint64_t group, float p, bool keep[4]) {
  const Philox4 r = philox4x32(key, group, 0);
  for (int k = 0; k < 4; ++k) keep[k] = uint_to_unit_float(r.v[k]) > p;
}

}  // namespace primus::ops
