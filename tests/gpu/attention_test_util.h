#pragma once
// Shared by the attention GPU test files: the shape of a test case, scaled by 1/sqrt(D) as the model does.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/gpu_test.h"
#include "ops/attention.h"
#include "ops/cpu/attention_cpu.h"

namespace primus::gputest {

inline ops::AttentionShape attention_shape(int64_t b, int64_t t, int64_t h, int64_t kv, int64_t d,
                                           bool causal, int64_t dv = 0) {
  ops::AttentionShape s;
  s.batch = b;
  s.seq = t;
  s.heads = h;
  s.kv_heads = kv;
  s.head_dim = d;
  s.v_head_dim = dv;
  s.scale = 1.0f / std::sqrt(static_cast<float>(d));
  s.causal = causal;
  return s;
}

// The CPU reference (the truth) on the bf16-rounded inputs the GPU sees: out, lse and dqkv, all f32.
struct AttentionReference {
  Tensor out, lse, dqkv;
};
inline AttentionReference attention_reference(Context& ctx, const Tensor& qkv_bf, const Tensor& dout_bf,
                                              const ops::AttentionShape& s) {
  const int64_t w = s.qkv_width();
  Tensor qkv_f = ctx.to_cpu_f32(qkv_bf), dout_f = ctx.to_cpu_f32(dout_bf);
  AttentionReference r;
  r.out = Tensor::empty({s.batch, s.seq, s.out_width()}, DType::kF32);
  r.lse = Tensor::empty({s.batch, s.heads, s.seq}, DType::kF32);
  ops::cpu::attention_forward(qkv_f, s, r.out, r.lse, Stream::cpu());
  r.dqkv = Tensor::empty({s.batch, s.seq, w}, DType::kF32);
  ops::cpu::attention_backward(dout_f, qkv_f, r.out, r.lse, s, r.dqkv, Stream::cpu());
  return r;
}

// Columns [c0, c1) of a [rows, w] f32 host tensor, as a new [rows, c1 - c0] tensor.
inline Tensor columns(const Tensor& t, int64_t w, int64_t c0, int64_t c1) {
  const int64_t rows = t.numel() / w;
  Tensor r = Tensor::empty({rows, c1 - c0}, DType::kF32);
  const float* src = t.data<float>();
  float* dst = r.data<float>();
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(dst + i * (c1 - c0), src + i * w + c0, (c1 - c0) * sizeof(float));
  return r;
}

// Gradient check with a floor under the reference norm: ||gpu - ref|| / max(||ref||, 1e-3 sqrt(n)). Some
// gradients are zero in exact arithmetic (dq, dk when T = 1: a single key gets probability 1 and dS = dP -
// delta = 0), and their relative error would compare rounding noise with rounding noise.
inline void check_attention_grad(Context& ctx, const std::string& family, const std::string& name,
                                 const Tensor& got, const Tensor& ref) {
  std::vector<double> a = got.to_vector<double>(), b = ref.to_vector<double>();
  double num = 0, den = 0;
  bool finite = a.size() == b.size();
  for (size_t i = 0; i < a.size() && finite; ++i) {
    finite = std::isfinite(a[i]);
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  const double floor2 = 1e-6 * static_cast<double>(b.size());
  CaseResult r;
  r.family = family;
  r.name = name;
  r.tol = kTolBF16;
  r.rel_err = finite ? std::sqrt(num / std::max(den, floor2)) : INFINITY;
  if (den < floor2) r.note = fmt::format("reference norm {:.1e} under the floor", std::sqrt(den));
  ctx.results.push_back(r);
}

}  // namespace primus::gputest
