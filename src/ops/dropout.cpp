#include "ops/dropout.h"

#include "ops/cpu/dropout_cpu.h"
#include "ops/op_dispatch.h"
#ifdef PRIMUS_WITH_CUDA
#include "ops/cuda/dropout_cuda.h"
#endif

namespace primus::ops {

void dropout_apply(const Tensor& x, float p, uint64_t key, int64_t col_begin, int64_t whole_cols, Tensor& out,
                   const Stream& s) {
  check_same_device("dropout_apply", x.device(), {&x, &out});
  PRIMUS_CHECK(p >= 0.0f && p < 1.0f, "dropout_apply: p {} outside [0, 1)", p);
  PRIMUS_CHECK(x.ndim() == 2 && out.shape() == x.shape() && out.dtype() == x.dtype(),
               "dropout_apply: x must be [rows, cols] and out the same, got {} and {}", x.describe(),
               out.describe());
  PRIMUS_CHECK(col_begin >= 0 && col_begin + x.size(1) <= whole_cols,
               "dropout_apply: columns [{}, {}) outside the whole tensor's {}", col_begin,
               col_begin + x.size(1), whole_cols);
  PRIMUS_DISPATCH(x, dropout_apply, x, p, key, col_begin, whole_cols, out, s);
}

}  // namespace primus::ops
