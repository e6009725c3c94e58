#include "ops/dropout.h"

#include <algorithm>

#include "ops/cpu/dropout_cpu.h"
#include "ops/op_dispatch.h"
#ifdef PRIMUS_WITH_CUDA
#include "ops/cuda/dropout_cuda.h"
#endif

namespace primus::ops {

void dropout_apply(const Tensor& x, float p, uint64_t key, int64_t col_begin, int64_t whole_cols, Tensor& out,
                   const Stream& s, const DropoutRows& rows) {
  check_same_device("dropout_apply", x.device(), {&x, &out});
  PRIMUS_CHECK(p >= 0.0f && p < 1.0f, "dropout_apply: p {} outside [0, 1)", p);
  PRIMUS_CHECK(x.ndim() == 2 && out.shape() == x.shape() && out.dtype() == x.dtype(),
               "dropout_apply: x must be [rows, cols] and out the same, got {} and {}", x.describe(),
               out.describe());
  PRIMUS_CHECK(col_begin >= 0 && col_begin + x.size(1) <= whole_cols,
               "dropout_apply: columns [{}, {}) outside the whole tensor's {}", col_begin,
               col_begin + x.size(1), whole_cols);
  PRIMUS_CHECK(
      rows.chunk == 0 || (rows.chunk > 0 && rows.batch > 0 && x.size(0) == 2 * rows.batch * rows.chunk &&
                          rows.chunks[0] >= 0 && rows.chunks[1] >= 0 &&
                          (std::max(rows.chunks[0], rows.chunks[1]) + 1) * rows.chunk <= rows.seq),
      "dropout_apply: a chunk-major row map needs [2 B C] rows of chunks inside T, got {} rows for B {} "
      "C {} T {} chunks {}, {}",
      x.size(0), rows.batch, rows.chunk, rows.seq, rows.chunks[0], rows.chunks[1]);
  PRIMUS_DISPATCH(x, dropout_apply, x, p, key, col_begin, whole_cols, out, s, rows);
}

}  // namespace primus::ops
