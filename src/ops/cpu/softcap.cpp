// CPU reference for soft-capping: cap * tanh(x / cap) and its backward from the capped values, in f64.
#include <cmath>

#include "ops/cpu/cpu_common.h"
#include "ops/cpu/softcap_cpu.h"

namespace primus::ops::cpu {

using namespace detail;

namespace {

// A tensor the same dtype and shape as `like`; `out` may be `like` itself, but not partly overlap it.
void check_elementwise(const char* op, const char* name, const Tensor& out, const Tensor& like, DType dt) {
  check_tensor(op, name, out, dt, like.shape());
  PRIMUS_CHECK(same_data(out, like) || !overlaps(out, like), "{}: {} must be {} itself or not overlap it", op,
               name, like.describe());
}

void check_cap(const char* op, float cap) {
  PRIMUS_CHECK(cap > 0.0f && std::isfinite(cap), "{}: the cap must be positive and finite, got {}", op, cap);
}

}  // namespace

void softcap_forward(const Tensor& x, float cap, Tensor& y, const Stream&) {
  constexpr const char* op = "softcap_forward";
  const DType dt = check_float(op, "x", x);
  check_cap(op, cap);
  check_elementwise(op, "y", y, x, dt);
  const int64_t n = x.numel();
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    const double c = cap;
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) yp[i] = static_cast<T>(c * std::tanh(static_cast<double>(xp[i]) / c));
  });
}

void softcap_backward(const Tensor& y, const Tensor& dy, float cap, Tensor& dx, const Stream&) {
  constexpr const char* op = "softcap_backward";
  const DType dt = check_float(op, "y", y);
  check_cap(op, cap);
  check_tensor(op, "dy", dy, dt, y.shape());
  check_elementwise(op, "dx", dx, dy, dt);
  PRIMUS_CHECK(!overlaps(dx, y), "{}: dx must not overlap y", op);
  const int64_t n = y.numel();
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* yp = y.data<T>();
    const T* gp = dy.data<T>();
    T* out = dx.data<T>();
    const double c = cap;
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const double t = static_cast<double>(yp[i]) / c;
      out[i] = static_cast<T>(static_cast<double>(gp[i]) * (1.0 - t * t));
    }
  });
}

}  // namespace primus::ops::cpu
