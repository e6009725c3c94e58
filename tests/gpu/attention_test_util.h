#pragma once
// Shared by the attention GPU test files: the shape of a test case, scaled by 1/sqrt(D) as the model does.
#include <cmath>
#include <cstdint>

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

}  // namespace primus::gputest
