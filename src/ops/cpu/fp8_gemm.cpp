// CPU reference of the FP8 GEMM: c = alpha * sum_k deq(a)[m, k] deq(b)[n, k] + beta * c_in, each element
// computed on its own in f64 and rounded once to c's dtype.
//
// The sum is taken per scaling group along K, as the GPU does it: the raw FP8 values (fp8_to_float, exact in
// f64) are multiplied and summed over the group -- all of K for tensorwise and rowwise, each 128-run of K for
// the blockwise scalings -- and each group's partial sum is multiplied by the product of its two f32
// multipliers (exact in f64) and added up. For e4m3 x e4m3 every product is a multiple of 2^-18 below 2^18,
// so the partial sums are exact in f64 up to K = 2^17; with an e5m2 operand the subnormal products reach
// 2^-25 and a partial sum may round, by 2^-53 relative. Either way the reference is exact to f64 rounding
// (~1e-16 relative) before the single rounding to c's dtype -- no BLAS, no dequantised f32 copy. fast_accum
// is a GPU-only knob and is ignored.
//
// Work is split into tiles of one row by kTileCols columns over OpenMP threads; every element is the same
// loop whatever the thread count, so results do not depend on it.
//
// That exact loop serves f64 outputs (the references of the tests). An f32 output -- the CPU backend's
// training, which runs every FP8 projection through here -- takes the GPU's own arithmetic instead: the raw
// FP8 values (exact in f32) multiplied by OpenBLAS sgemm per K-group with f32 accumulation, each group's
// product scaled by its two multipliers and summed in f32. Orders of magnitude faster than the loop, and
// within f32 rounding of it (checked in tests/ops/fp8_gemm_test.cpp).
#include <algorithm>
#include <array>
#include <cstdint>

#include "ops/cpu/cpu_common.h"
#include "ops/cpu/fp8_gemm_cpu.h"
#include "ops/cpu/gemm_cpu.h"

namespace primus::ops::cpu {

using namespace detail;

namespace {

constexpr int64_t kTileCols = 64;

std::array<double, 256> value_table(Fp8Format f) {
  std::array<double, 256> t{};
  for (int i = 0; i < 256; ++i) t[i] = static_cast<double>(fp8_to_float(static_cast<uint8_t>(i), f));
  return t;
}

// The f32 multiplier of element (row, k-group g) of an operand [rows, K] (see ops/fp8.h for the layouts).
struct Scales {
  const float* p = nullptr;
  Fp8Granularity g = Fp8Granularity::kTensorwise;
  int64_t rows = 0, k_blocks = 0;
  double at(int64_t row, int64_t group) const {
    switch (g) {
      case Fp8Granularity::kTensorwise:
        return p[0];
      case Fp8Granularity::kRowwise:
        return p[row];
      case Fp8Granularity::kBlock1x128:
        return p[group * rows + row];  // [ceil(K / 128), rows], rows fastest
      case Fp8Granularity::kBlock128x128:
        return p[(row / 128) * k_blocks + group];  // [ceil(rows / 128), ceil(K / 128)], row-major
    }
    return 0.0;
  }
};

Scales scales_of(const Fp8Tensor& t) {
  return {t.scale_inv.data<float>(), t.granularity, t.rows(), (t.cols() + 127) / 128};
}

bool is_block(Fp8Granularity g) {
  return g == Fp8Granularity::kBlock1x128 || g == Fp8Granularity::kBlock128x128;
}

template <typename T>
void fp8_gemm_typed(const Fp8Tensor& a, const Fp8Tensor& b, T* c, const T* c_in, double alpha, double beta) {
  const int64_t m = a.rows(), n = b.rows(), k = a.cols();
  // One group spans all of K unless an operand has a multiplier per 128-run of K.
  const int64_t group = is_block(a.granularity) || is_block(b.granularity) ? 128 : k;
  const int64_t groups = (k + group - 1) / group;
  const std::array<double, 256> va = value_table(a.format), vb = value_table(b.format);
  const auto* qa = static_cast<const uint8_t*>(a.data.data_ptr());
  const auto* qb = static_cast<const uint8_t*>(b.data.data_ptr());
  const Scales sa = scales_of(a), sb = scales_of(b);
  const int64_t col_tiles = (n + kTileCols - 1) / kTileCols;
  const int64_t tiles = m * col_tiles;
  const bool parallel = static_cast<double>(m) * n * k >= kParallelGrain;
#pragma omp parallel if (parallel)
  {
    std::vector<double> arow(static_cast<size_t>(k));
#pragma omp for schedule(dynamic, 4)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t i = t / col_tiles, j0 = (t % col_tiles) * kTileCols, j1 = std::min(n, j0 + kTileCols);
      const uint8_t* ar = qa + i * k;
      for (int64_t kk = 0; kk < k; ++kk) arow[kk] = va[ar[kk]];
      for (int64_t j = j0; j < j1; ++j) {
        const uint8_t* br = qb + j * k;
        double acc = 0.0;
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t k0 = g * group, k1 = std::min(k, k0 + group);
          double partial = 0.0;
          for (int64_t kk = k0; kk < k1; ++kk) partial += arow[kk] * vb[br[kk]];
          acc += partial * (sa.at(i, g) * sb.at(j, g));
        }
        const int64_t idx = i * n + j;
        double v = alpha * acc;
        if (beta != 0.0) v += beta * static_cast<double>(c_in[idx]);
        c[idx] = static_cast<T>(v);
      }
    }
  }
}

// c (f32) = alpha * sum over K-groups of (A_g B_g^T) * sa * sb + beta * c_in, A_g / B_g the raw FP8 values
// of the group's K columns in f32.
void fp8_gemm_f32_blas(const Fp8Tensor& a, const Fp8Tensor& b, Tensor& c, const Tensor& cin, float alpha,
                       float beta) {
  const int64_t m = a.rows(), n = b.rows(), k = a.cols();
  const int64_t group = is_block(a.granularity) || is_block(b.granularity) ? 128 : k;
  const int64_t groups = (k + group - 1) / group;
  const Scales sa = scales_of(a), sb = scales_of(b);
  auto raw = [](const Fp8Tensor& t, int64_t k0, int64_t kg) {
    std::array<float, 256> v{};
    for (int i = 0; i < 256; ++i) v[i] = fp8_to_float(static_cast<uint8_t>(i), t.format);
    const int64_t rows = t.rows(), cols = t.cols();
    Tensor out = Tensor::empty({rows, kg}, DType::kF32);
    const auto* q = static_cast<const uint8_t*>(t.data.data_ptr());
    float* o = out.data<float>();
#pragma omp parallel for schedule(static) if (rows * kg >= kParallelGrain)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < kg; ++j) o[r * kg + j] = v[q[r * cols + k0 + j]];
    return out;
  };
  std::vector<float> acc(static_cast<size_t>(m * n), 0.0f);
  Tensor p = Tensor::empty({m, n}, DType::kF32);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t k0 = g * group, kg = std::min(k, k0 + group) - k0;
    const Tensor ag = raw(a, k0, kg), bg = raw(b, k0, kg);
    gemm(ag, false, bg, true, p, 1.0f, 0.0f, Stream::cpu(), nullptr);
    const float* pp = p.data<float>();
#pragma omp parallel for schedule(static) if (m * n >= kParallelGrain)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        acc[i * n + j] += pp[i * n + j] * (static_cast<float>(sa.at(i, g)) * static_cast<float>(sb.at(j, g)));
  }
  float* cp = c.data<float>();
  const float* ci = cin.data<float>();
  for (int64_t idx = 0; idx < m * n; ++idx)
    cp[idx] = beta != 0.0f ? alpha * acc[idx] + beta * ci[idx] : alpha * acc[idx];
}

}  // namespace

void fp8_gemm(const Fp8Tensor& a, const Fp8Tensor& b, Tensor& c, float alpha, float beta, bool fast_accum,
              const Stream& s, const Tensor* c_in) {
  constexpr const char* op = "fp8_gemm";
  (void)fast_accum;
  (void)s;
  check_fp8_gemm(a, b, op);
  check_host(op, "a.data", a.data);
  check_host(op, "a.scale_inv", a.scale_inv);
  check_host(op, "b.data", b.data);
  check_host(op, "b.scale_inv", b.scale_inv);
  const int64_t m = a.rows(), n = b.rows();
  const DType dt = check_float(op, "c", c);
  check_shape(op, "c", c, {m, n});
  if (c_in != nullptr) check_tensor(op, "c_in", *c_in, dt, {m, n});
  // c_in defaults to c; beta == 0 reads neither (an uninitialised, even NaN, c is fine).
  const Tensor& cin = c_in != nullptr ? *c_in : c;
  if (dt == DType::kF32) {
    fp8_gemm_f32_blas(a, b, c, cin, alpha, beta);
    return;
  }
  with_float_type(dt, [&](auto zero) {
    using T = decltype(zero);
    fp8_gemm_typed<T>(a, b, c.data<T>(), cin.data<T>(), alpha, beta);
  });
}

}  // namespace primus::ops::cpu
