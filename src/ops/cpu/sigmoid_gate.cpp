// CPU reference for the sigmoid-gated row sum (Qwen2-MoE's shared-expert gate).
#include <cmath>

#include "ops/cpu/cpu_common.h"
#include "ops/cpu/sigmoid_gate_cpu.h"

namespace primus::ops::cpu {

using namespace detail;

namespace {

// 1 / (1 + e^-g): e^-g overflows to inf for very negative g, which still gives the right limit 0.
template <typename T>
inline T sigmoid(T g) {
  return T(1) / (T(1) + std::exp(-g));
}

// Returns {n, d} after checking x [n, d] and g [n] of x's dtype.
std::pair<int64_t, int64_t> check_gx(const char* op, const Tensor& g, const Tensor& x, DType dt) {
  check_ndim(op, "x", x, 2);
  const int64_t n = x.size(0), d = x.size(1);
  check_tensor(op, "g", g, dt, {n});
  return {n, d};
}

}  // namespace

void sigmoid_gate_forward(const Tensor& g, const Tensor& x, Tensor& y, const Stream&) {
  constexpr const char* op = "sigmoid_gate_forward";
  const DType dt = check_float(op, "x", x);
  const auto [n, d] = check_gx(op, g, x, dt);
  check_tensor(op, "y", y, dt, {n, d});
  PRIMUS_CHECK(!overlaps(y, x) && !overlaps(y, g), "{}: y must not overlap x or g", op);
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* gp = g.data<T>();
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
#pragma omp parallel for schedule(static) if (n * d > kParallelGrain)
    for (int64_t t = 0; t < n; ++t) {
      const T s = sigmoid(gp[t]);
      for (int64_t j = 0; j < d; ++j) yp[t * d + j] += s * xp[t * d + j];
    }
  });
}

void sigmoid_gate_backward(const Tensor& g, const Tensor& x, const Tensor& dy, Tensor& dx, Tensor& dg,
                           const Stream&) {
  constexpr const char* op = "sigmoid_gate_backward";
  const DType dt = check_float(op, "x", x);
  const auto [n, d] = check_gx(op, g, x, dt);
  check_tensor(op, "dy", dy, dt, {n, d});
  check_tensor(op, "dx", dx, dt, {n, d});
  check_tensor(op, "dg", dg, dt, {n});
  PRIMUS_CHECK(!overlaps(dx, x) && !overlaps(dx, dy) && !overlaps(dg, dx),
               "{}: dx must not overlap x, dy or dg", op);
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* gp = g.data<T>();
    const T* xp = x.data<T>();
    const T* dyp = dy.data<T>();
    T* dxp = dx.data<T>();
    T* dgp = dg.data<T>();
#pragma omp parallel for schedule(static) if (n * d > kParallelGrain)
    for (int64_t t = 0; t < n; ++t) {
      const T s = sigmoid(gp[t]);
      double acc = 0.0;  // the row's dot product in double, on one thread: reproducible
      for (int64_t j = 0; j < d; ++j) {
        acc += static_cast<double>(dyp[t * d + j]) * static_cast<double>(xp[t * d + j]);
        dxp[t * d + j] = s * dyp[t * d + j];
      }
      dgp[t] = static_cast<T>(static_cast<double>(s) * (1.0 - static_cast<double>(s)) * acc);
    }
  });
}

}  // namespace primus::ops::cpu
