// CPU reference for SwiGLU over the packed [gate | up] layout.
#include <cmath>

#include "ops/cpu/activation_cpu.h"
#include "ops/cpu/cpu_common.h"

namespace primus::ops::cpu {

using namespace detail;

namespace {

// 1 / (1 + e^-g); e^-g overflows to inf for very negative g, which still gives the right limit 0.
template <typename T>
inline T sigmoid(T g) {
  return T(1) / (T(1) + std::exp(-g));
}

// Returns F, the width of out, after checking gu [R, 2F].
int64_t check_gu(const char* op, const char* name, const Tensor& gu) {
  check_ndim(op, name, gu, 2);
  PRIMUS_CHECK(gu.size(1) % 2 == 0 && gu.size(1) >= 2, "{}: {} must be [R, 2F] with F >= 1, got {}", op, name,
               gu.describe());
  return gu.size(1) / 2;
}

}  // namespace

void swiglu_forward(const Tensor& gu, Tensor& out, const Stream& s) {
  constexpr const char* op = "swiglu_forward";
  const DType dt = check_float(op, "gu", gu);
  const int64_t f = check_gu(op, "gu", gu);
  const int64_t rows = gu.size(0);
  check_tensor(op, "out", out, dt, {rows, f});
  PRIMUS_CHECK(!overlaps(out, gu), "swiglu_forward: out must not overlap gu");
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* in = gu.data<T>();
    T* o = out.data<T>();
#pragma omp parallel for schedule(static) if (rows * f > kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const T* g = in + r * 2 * f;
      const T* u = g + f;
      T* orow = o + r * f;
      for (int64_t i = 0; i < f; ++i) orow[i] = g[i] * sigmoid(g[i]) * u[i];
    }
  });
}

void swiglu_backward(const Tensor& dout, const Tensor& gu, Tensor& dgu, const Stream& s) {
  constexpr const char* op = "swiglu_backward";
  const DType dt = check_float(op, "gu", gu);
  const int64_t f = check_gu(op, "gu", gu);
  const int64_t rows = gu.size(0);
  check_tensor(op, "dout", dout, dt, {rows, f});
  check_tensor(op, "dgu", dgu, dt, {rows, 2 * f});
  PRIMUS_CHECK(same_data(dgu, gu) || !overlaps(dgu, gu),
               "swiglu_backward: dgu must be gu itself or not overlap it");
  PRIMUS_CHECK(!overlaps(dgu, dout), "swiglu_backward: dgu must not overlap dout");
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* in = gu.data<T>();
    const T* go = dout.data<T>();
    T* d = dgu.data<T>();
#pragma omp parallel for schedule(static) if (rows * f > kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const T* g = in + r * 2 * f;
      const T* u = g + f;
      const T* grow = go + r * f;
      T* dg = d + r * 2 * f;
      T* du = dg + f;
      for (int64_t i = 0; i < f; ++i) {
        // Both inputs are read before either gradient is written, so dgu may be gu (in place).
        const T gi = g[i], ui = u[i], sg = sigmoid(gi);
        const T silu = gi * sg;
        dg[i] = grow[i] * ui * sg * (T(1) + gi * (T(1) - sg));
        du[i] = grow[i] * silu;
      }
    }
  });
}

}  // namespace primus::ops::cpu
