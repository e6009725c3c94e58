// CPU reference for the small elementwise ops: add, scale, cast, fill and the non-finite count.
#include <cmath>
#include <cstring>

#include "ops/cpu/cpu_common.h"
#include "ops/cpu/elementwise_cpu.h"

namespace primus::ops::cpu {

using namespace detail;

namespace {

template <typename T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, bf16_t>) {
    return static_cast<double>(bf16_to_float(v));
  } else {
    return static_cast<double>(v);
  }
}

// f64 -> f32 rounding to odd: truncate toward zero and set the last bit when inexact. Rounding that f32 to
// bf16 (nearest even) then equals rounding the f64 straight to bf16, which plain f64 -> f32 -> bf16 does not
// (a value just above a bf16 tie would round onto the tie first and then to even).
inline float to_float_round_odd(double d) {
  float f = static_cast<float>(d);
  if (!std::isfinite(d) || static_cast<double>(f) == d) return f;
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) --bits;  // rounded away from zero: step back
  bits |= 1u;
  std::memcpy(&f, &bits, 4);
  return f;
}

template <typename D, typename S>
D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<D, bf16_t> && std::is_same_v<S, double>) {
    return float_to_bf16(to_float_round_odd(v));
  } else if constexpr (std::is_same_v<D, bf16_t>) {
    return float_to_bf16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<S, bf16_t>) {
    return static_cast<D>(bf16_to_float(v));
  } else {
    return static_cast<D>(v);
  }
}

template <typename D, typename S>
void cast_impl(const S* src, D* dst, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) dst[i] = convert<D>(src[i]);
}

// Calls f(T{}) for T in f32, f64, bf16.
template <typename F>
void with_cast_type(const char* op, const char* name, const Tensor& t, F&& f) {
  switch (t.dtype()) {
    case DType::kF32:
      f(float{});
      return;
    case DType::kF64:
      f(double{});
      return;
    case DType::kBF16:
      f(bf16_t{});
      return;
    default:
      PRIMUS_FAIL("{}: {} must be f32, f64 or bf16, got {}", op, name, t.describe());
  }
}

}  // namespace

void add(const Tensor& a, const Tensor& b, Tensor& out, const Stream& s) {
  constexpr const char* op = "add";
  const DType dt = check_float(op, "a", a);
  check_tensor(op, "b", b, dt, a.shape());
  check_tensor(op, "out", out, dt, a.shape());
  PRIMUS_CHECK((same_data(out, a) || !overlaps(out, a)) && (same_data(out, b) || !overlaps(out, b)),
               "add: out must be a, b or not overlap them");
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    T* op_ = out.data<T>();
    const int64_t n = a.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) op_[i] = ap[i] + bp[i];
  });
}

void scale_(Tensor& x, float factor, const Stream& s) {
  const DType dt = check_float("scale_", "x", x);
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    T* p = x.data<T>();
    const T f = static_cast<T>(factor);
    const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) p[i] *= f;
  });
}

void cast(const Tensor& src, Tensor& dst, const Stream& s) {
  constexpr const char* op = "cast";
  check_host(op, "src", src);
  check_host(op, "dst", dst);
  PRIMUS_CHECK(src.numel() == dst.numel(), "cast: dst must have {} elements like src, got {}", src.numel(),
               dst.describe());
  PRIMUS_CHECK(same_data(src, dst) ? src.dtype() == dst.dtype() : !overlaps(src, dst),
               "cast: src and dst must not overlap");
  if (same_data(src, dst)) return;  // same dtype, same memory: nothing to do
  with_cast_type(op, "src", src, [&](auto stag) {
    using S = decltype(stag);
    with_cast_type(op, "dst", dst, [&](auto dtag) {
      using D = decltype(dtag);
      cast_impl<D, S>(src.data<S>(), dst.data<D>(), src.numel());
    });
  });
}

void fill_(Tensor& x, float value, const Stream& s) {
  const DType dt = check_float("fill_", "x", x);
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    T* p = x.data<T>();
    const T v = static_cast<T>(value);
    const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) p[i] = v;
  });
}

int64_t count_nonfinite(const Tensor& x, const Stream& s) {
  constexpr const char* op = "count_nonfinite";
  check_host(op, "x", x);
  int64_t count = 0;
  with_cast_type(op, "x", x, [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    const int64_t n = x.numel();
    int64_t c = 0;
#pragma omp parallel for schedule(static) reduction(+ : c) if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) c += std::isfinite(to_double(p[i])) ? 0 : 1;
    count = c;
  });
  return count;
}

namespace {
// The shared shape rule of concat_columns / split_columns: wide [R, Ca + Cb], a [R, Ca], b [R, Cb].
void check_columns(const char* op, const char* wide_name, const Tensor& wide, const Tensor& a,
                   const Tensor& b, DType dt) {
  check_ndim(op, "a", a, 2);
  check_ndim(op, "b", b, 2);
  check_tensor(op, "a", a, dt, a.shape());
  check_tensor(op, "b", b, dt, {a.size(0), b.size(1)});
  check_tensor(op, wide_name, wide, dt, {a.size(0), a.size(1) + b.size(1)});
  PRIMUS_CHECK(!overlaps(wide, a) && !overlaps(wide, b), "{}: {} must not overlap a or b", op, wide_name);
}
}  // namespace

void concat_columns(const Tensor& a, const Tensor& b, Tensor& out, const Stream& s) {
  constexpr const char* op = "concat_columns";
  const DType dt = check_float(op, "a", a);
  check_columns(op, "out", out, a, b, dt);
  const int64_t rows = a.size(0), ca = a.size(1), cb = b.size(1);
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    T* o = out.data<T>();
#pragma omp parallel for schedule(static) if (rows * (ca + cb) > kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(ap + r * ca, ca, o + r * (ca + cb));
      std::copy_n(bp + r * cb, cb, o + r * (ca + cb) + ca);
    }
  });
}

void split_columns(const Tensor& x, Tensor& a, Tensor& b, const Stream& s) {
  constexpr const char* op = "split_columns";
  const DType dt = check_float(op, "x", x);
  check_columns(op, "x", x, a, b, dt);
  const int64_t rows = a.size(0), ca = a.size(1), cb = b.size(1);
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* ap = a.data<T>();
    T* bp = b.data<T>();
#pragma omp parallel for schedule(static) if (rows * (ca + cb) > kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(xp + r * (ca + cb), ca, ap + r * ca);
      std::copy_n(xp + r * (ca + cb) + ca, cb, bp + r * cb);
    }
  });
}

}  // namespace primus::ops::cpu
