// CPU reference for AdamW, the master split / join and the gradient-norm reduction. The update is computed in
// double and stored in the element type; sum_squares uses a fixed chunking so the result is bitwise
// independent of the thread count. The split variant of AdamW is literally join -> adamw_step -> split.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>

#include "core/master_split.h"
#include "ops/cpu/cpu_common.h"
#include "ops/cpu/optimizer_cpu.h"

namespace primus::ops::cpu {

using namespace detail;

namespace {

// A moment element as a double, and back in its storage type: the master's type, or bf16 (precision-aware
// optimizer state) rounded to nearest even from the f32 value, as the CUDA kernel stores it.
template <typename M>
double moment_load(M x) {
  if constexpr (std::is_same_v<M, bf16_t>) {
    return static_cast<double>(bf16_to_float(x));
  } else {
    return static_cast<double>(x);
  }
}
template <typename M>
M moment_store(double x) {
  if constexpr (std::is_same_v<M, bf16_t>) {
    return float_to_bf16(static_cast<float>(x));
  } else {
    return static_cast<M>(x);
  }
}

// The update uses the moments as computed in this step; only what is stored for the next one is rounded to
// the moments' dtype.
template <typename T, typename P, typename MM, typename MV>
void adamw_impl(T* master, const T* grad, MM* m, MV* v, const AdamWParams& p, P* copy, int64_t n) {
  const double b1 = p.beta1, b2 = p.beta2, lr = p.lr, eps = p.eps, wd = p.weight_decay, gs = p.grad_scale;
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(p.step));
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(grad[i]) * gs;
    const double mi = b1 * moment_load(m[i]) + (1.0 - b1) * g;
    const double vi = b2 * moment_load(v[i]) + (1.0 - b2) * g * g;
    const double w = static_cast<double>(master[i]);
    const double upd = (mi / bc1) / (std::sqrt(vi / bc2) + eps) + wd * w;
    const T nw = static_cast<T>(w - lr * upd);
    m[i] = moment_store<MM>(mi);
    v[i] = moment_store<MV>(vi);
    master[i] = nw;
    if constexpr (!std::is_same_v<P, void>) {
      if constexpr (std::is_same_v<P, bf16_t>) {
        copy[i] = compute_round(static_cast<float>(nw));
      } else {
        copy[i] = static_cast<P>(nw);
      }
    }
  }
}

// adamw_impl for m and v each in T or bf16.
template <typename T, typename P>
void adamw_moments(T* master, const T* grad, Tensor& m, Tensor& v, const AdamWParams& p, P* copy, int64_t n) {
  const bool mb = m.dtype() == DType::kBF16, vb = v.dtype() == DType::kBF16;
  if (mb && vb) {
    adamw_impl<T, P>(master, grad, m.data<bf16_t>(), v.data<bf16_t>(), p, copy, n);
  } else if (mb) {
    adamw_impl<T, P>(master, grad, m.data<bf16_t>(), v.data<T>(), p, copy, n);
  } else if (vb) {
    adamw_impl<T, P>(master, grad, m.data<T>(), v.data<bf16_t>(), p, copy, n);
  } else {
    adamw_impl<T, P>(master, grad, m.data<T>(), v.data<T>(), p, copy, n);
  }
}

}  // namespace

void adamw_step(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p,
                Tensor* param_copy, const Stream& s) {
  constexpr const char* op = "adamw_step";
  const DType dt = check_float(op, "master", master);
  const int64_t n = master.numel();
  auto check_flat = [&](const char* name, const Tensor& t) {
    check_host(op, name, t);
    check_dtype(op, name, t, dt);
    PRIMUS_CHECK(t.numel() == n, "{}: {} must have {} elements like master, got {}", op, name, n,
                 t.describe());
  };
  check_flat("grad", grad);
  // The moments: the master's dtype, or bf16 beside an f32 master (the precision-aware optimizer).
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"m", &m}, {"v", &v}}) {
    check_host(op, name, *t);
    PRIMUS_CHECK(t->dtype() == dt || (dt == DType::kF32 && t->dtype() == DType::kBF16),
                 "{}: {} must be {} (or bf16 beside an f32 master), got {}", op, name, dtype_name(dt),
                 t->describe());
    PRIMUS_CHECK(t->numel() == n, "{}: {} must have {} elements like master, got {}", op, name, n,
                 t->describe());
  }
  PRIMUS_CHECK(!overlaps(master, grad) && !overlaps(master, m) && !overlaps(master, v) && !overlaps(m, v) &&
                   !overlaps(m, grad) && !overlaps(v, grad),
               "adamw_step: master, grad, m and v must not overlap");
  PRIMUS_CHECK(p.step >= 1, "adamw_step: step is 1-based, got {}", p.step);
  PRIMUS_CHECK(p.beta1 >= 0.0f && p.beta1 < 1.0f && p.beta2 >= 0.0f && p.beta2 < 1.0f,
               "adamw_step: betas must be in [0, 1), got {} and {}", p.beta1, p.beta2);
  // A param_copy that is master itself (same storage) has nothing to receive.
  const bool write_copy = param_copy != nullptr && param_copy->defined() && !same_data(*param_copy, master);
  if (write_copy) {
    check_host(op, "param_copy", *param_copy);
    PRIMUS_CHECK(param_copy->numel() == n, "adamw_step: param_copy must have {} elements like master, got {}",
                 n, param_copy->describe());
    const DType cd = param_copy->dtype();
    PRIMUS_CHECK(cd == DType::kF32 || cd == DType::kBF16 || cd == dt,
                 "adamw_step: param_copy must be f32, bf16 or {}, got {}", dtype_name(dt),
                 param_copy->describe());
    PRIMUS_CHECK(!overlaps(*param_copy, master) && !overlaps(*param_copy, grad) &&
                     !overlaps(*param_copy, m) && !overlaps(*param_copy, v),
                 "adamw_step: param_copy must be master itself or not overlap master, grad, m, v");
  }
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    T* w = master.data<T>();
    const T* g = grad.data<T>();
    if (!write_copy) {
      adamw_moments<T, void>(w, g, m, v, p, nullptr, n);
    } else if (param_copy->dtype() == DType::kBF16) {
      adamw_moments<T, bf16_t>(w, g, m, v, p, param_copy->data<bf16_t>(), n);
    } else if (param_copy->dtype() == DType::kF32) {
      adamw_moments<T, float>(w, g, m, v, p, param_copy->data<float>(), n);
    } else {
      adamw_moments<T, double>(w, g, m, v, p, param_copy->data<double>(), n);
    }
  });
}

void master_split(const Tensor& master, Tensor& hi, Tensor* rem, const Stream& s) {
  constexpr const char* op = "master_split";
  const int64_t n = master.numel();
  check_host(op, "master", master);
  check_dtype(op, "master", master, DType::kF32);
  check_host(op, "hi", hi);
  check_dtype(op, "hi", hi, DType::kBF16);
  PRIMUS_CHECK(hi.numel() == n, "{}: hi must have {} elements like master, got {}", op, n, hi.describe());
  PRIMUS_CHECK(!overlaps(hi, master), "{}: hi must not overlap master", op);
  const bool with_rem = rem != nullptr && rem->defined();
  if (with_rem) {
    check_host(op, "rem", *rem);
    check_dtype(op, "rem", *rem, DType::kI16);
    PRIMUS_CHECK(rem->numel() == n, "{}: rem must have {} elements like master, got {}", op, n,
                 rem->describe());
    PRIMUS_CHECK(!overlaps(*rem, master) && !overlaps(*rem, hi), "{}: rem must not overlap master or hi", op);
  }
  const auto* b = static_cast<const uint32_t*>(master.data_ptr());
  auto* h = static_cast<uint16_t*>(hi.data_ptr());
  int16_t* r = with_rem ? rem->data<int16_t>() : nullptr;
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    h[i] = compute_bits(b[i]);
    if (r) r[i] = remainder_bits(b[i], h[i]);
  }
}

void master_join(const Tensor& hi, const Tensor& rem, Tensor& master, const Stream& s) {
  constexpr const char* op = "master_join";
  const int64_t n = master.numel();
  check_host(op, "master", master);
  check_dtype(op, "master", master, DType::kF32);
  check_host(op, "hi", hi);
  check_dtype(op, "hi", hi, DType::kBF16);
  check_host(op, "rem", rem);
  check_dtype(op, "rem", rem, DType::kI16);
  PRIMUS_CHECK(hi.numel() == n && rem.numel() == n,
               "{}: hi ({}) and rem ({}) must have {} elements like master", op, hi.describe(),
               rem.describe(), n);
  PRIMUS_CHECK(!overlaps(master, hi) && !overlaps(master, rem), "{}: master must not overlap hi or rem", op);
  const auto* h = static_cast<const uint16_t*>(hi.data_ptr());
  const int16_t* r = rem.data<int16_t>();
  auto* b = static_cast<uint32_t*>(master.data_ptr());
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) b[i] = join_bits(h[i], r[i]);
}

void adamw_step_split(Tensor& hi, Tensor& rem, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p,
                      const Stream& s) {
  constexpr const char* op = "adamw_step_split";
  check_dtype(op, "grad", grad, DType::kF32);
  PRIMUS_CHECK(!overlaps(hi, grad) && !overlaps(hi, m) && !overlaps(hi, v) && !overlaps(rem, grad) &&
                   !overlaps(rem, m) && !overlaps(rem, v),
               "{}: hi and rem must not overlap grad, m or v", op);
  // The reference is the definition: the f32 master, updated by the f32 reference AdamW, split again.
  Tensor master = Tensor::empty({hi.numel()}, DType::kF32);
  cpu::master_join(hi, rem, master, s);
  cpu::adamw_step(master, grad, m, v, p, nullptr, s);
  cpu::master_split(master, hi, &rem, s);
}

void sum_squares(const Tensor& x, Tensor& out, bool accumulate, const Stream& s, Tensor* /*scratch*/) {
  constexpr const char* op = "sum_squares";
  const DType dt = check_float(op, "x", x);
  check_tensor(op, "out", out, dt, {1});
  PRIMUS_CHECK(!overlaps(out, x), "sum_squares: out must not overlap x");
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    const double ss = deterministic_sum(x.numel(), [xp](int64_t i) {
      const double e = static_cast<double>(xp[i]);
      return e * e;
    });
    T* o = out.data<T>();
    o[0] = static_cast<T>(accumulate ? static_cast<double>(o[0]) + ss : ss);
  });
}

void sum_squares_chunks(const Tensor& x, int64_t chunk, Tensor& out, const Stream& s, Tensor* scratch) {
  constexpr const char* op = "sum_squares_chunks";
  PRIMUS_CHECK(chunk > 0, "{}: chunk must be positive, got {}", op, chunk);
  const int64_t n = x.numel(), chunks = std::max<int64_t>(1, (n + chunk - 1) / chunk);
  check_tensor(op, "out", out, check_float(op, "x", x), {chunks});
  Tensor flat = x.view({n});
  for (int64_t c = 0; c < chunks; ++c) {
    Tensor o = out.slice(c, c + 1);
    sum_squares(flat.slice(c * chunk, std::min(n, (c + 1) * chunk)), o, /*accumulate=*/false, s, scratch);
  }
}

}  // namespace primus::ops::cpu
