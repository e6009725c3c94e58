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

void copy_cast(const Tensor& src, Tensor& dst, const Stream& s) {
  if (src.dtype() == dst.dtype()) {
    dst.copy_from(src, s);
    return;
  }
  PRIMUS_CHECK(src.numel() == dst.numel() && src.is_contiguous() && dst.is_contiguous(),
               "copy_cast: {} <- {} (same number of elements, both contiguous)", dst.describe(),
               src.describe());
  if (src.device().is_cuda() && s.device == src.device()) {
    Tensor on_src = dst.device() == src.device() ? dst : Tensor::empty(dst.shape(), dst.dtype(), s);
    cast(src, on_src, s);
    if (on_src.data_ptr() != dst.data_ptr()) dst.copy_from(on_src, s);
    return;
  }
  const Tensor host = src.device().is_cpu() ? src : src.to(Stream::cpu());
  dst.copy_from(cpu_cast(host, dst.dtype()).view(dst.shape()), s);
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
