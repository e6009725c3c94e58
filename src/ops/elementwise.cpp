#include "ops/elementwise.h"

#include "ops/cpu/elementwise_cpu.h"
#include "ops/op_dispatch.h"
#ifdef PRIMUS_WITH_CUDA
#include "ops/cuda/elementwise_cuda.h"
#endif

namespace primus::ops {

void add(const Tensor& a, const Tensor& b, Tensor& out, const Stream& s) {
  check_same_device("add", a.device(), {&a, &b, &out});
  PRIMUS_DISPATCH(a, add, a, b, out, s);
}

void scale_(Tensor& x, float factor, const Stream& s) {
  check_same_device("scale_", x.device(), {&x});
  PRIMUS_DISPATCH(x, scale_, x, factor, s);
}

void cast(const Tensor& src, Tensor& dst, const Stream& s) {
  check_same_device("cast", src.device(), {&src, &dst});
  PRIMUS_DISPATCH(src, cast, src, dst, s);
}

void fill_(Tensor& x, float value, const Stream& s) {
  check_same_device("fill_", x.device(), {&x});
  PRIMUS_DISPATCH(x, fill_, x, value, s);
}

int64_t count_nonfinite(const Tensor& x, const Stream& s) {
  check_same_device("count_nonfinite", x.device(), {&x});
  PRIMUS_DISPATCH(x, count_nonfinite, x, s);
}

void concat_columns(const Tensor& a, const Tensor& b, Tensor& out, const Stream& s) {
  check_same_device("concat_columns", a.device(), {&a, &b, &out});
  PRIMUS_DISPATCH(a, concat_columns, a, b, out, s);
}

void split_columns(const Tensor& x, Tensor& a, Tensor& b, const Stream& s) {
  check_same_device("split_columns", x.device(), {&x, &a, &b});
  PRIMUS_DISPATCH(x, split_columns, x, a, b, s);
}

}  // namespace primus::ops
