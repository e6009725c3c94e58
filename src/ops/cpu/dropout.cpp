// CPU reference of the position-keyed dropout (LoRA's input dropout).
#include "ops/cpu/cpu_common.h"
#include "ops/cpu/dropout_cpu.h"
#include "ops/dropout_mask.h"

namespace primus::ops::cpu {

using namespace detail;

void dropout_apply(const Tensor& x, float p, uint64_t key, int64_t col_begin, int64_t whole_cols, Tensor& out,
                   const Stream&, const DropoutRows& place) {
  constexpr const char* op = "dropout_apply";
  const DType dt = check_float(op, "x", x);
  const int64_t rows = x.size(0), cols = x.size(1);
  check_tensor(op, "out", out, dt, {rows, cols});
  PRIMUS_CHECK(same_data(out, x) || !overlaps(out, x), "{}: out must be x itself or not overlap it", op);
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* op_ = out.data<T>();
    const T scale = T(1) / (T(1) - static_cast<T>(p));
#pragma omp parallel for schedule(static) if (rows * cols > kParallelGrain)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const uint64_t index = static_cast<uint64_t>(place.whole_row(i) * whole_cols + col_begin + j);
        op_[i * cols + j] = dropout_keeps(key, index, p) ? xp[i * cols + j] * scale : T(0);
      }
  });
}

}  // namespace primus::ops::cpu
