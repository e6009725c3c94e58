#pragma once
// Causal grouped-query attention over a packed QKV buffer. Per token the buffer holds the q heads, then the k
// heads, then the v heads: qkv[B, T, (H + KV) * D + KV * Dv]. Query head h attends with kv head h / (H / KV).
// q and k heads have D elements, v heads (and the output) Dv, which equals D except in multi-latent attention
// (DeepSeek MLA: D = nope + rope = 192, Dv = 128). Never builds the full T x T score matrix: the GPU runs
// flash attention; the CPU reference works on blocks of 64 query rows.
#include "core/tensor.h"

namespace primus::ops {

struct AttentionShape {
  int64_t batch = 1;
  int64_t seq = 1;
  int64_t heads = 1;       // H, query heads
  int64_t kv_heads = 1;    // KV, must divide H
  int64_t head_dim = 64;   // D, of q and k
  int64_t v_head_dim = 0;  // Dv, of v and the output (0: = D)
  float scale = 0.125f;    // softmax scale, usually 1/sqrt(D)
  bool causal = true;
  int64_t dv() const { return v_head_dim > 0 ? v_head_dim : head_dim; }
  int64_t qkv_width() const { return (heads + kv_heads) * head_dim + kv_heads * dv(); }  // per token
  int64_t out_width() const { return heads * dv(); }
};

// out[B, T, H*Dv]; lse[B, H, T] (f32) = log-sum-exp of the scaled scores per query, saved for backward.
void attention_forward(const Tensor& qkv, const AttentionShape& shape, Tensor& out, Tensor& lse,
                       const Stream& s);
// dqkv (qkv's shape, overwritten) from dout[B, T, H*Dv].
void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const AttentionShape& shape, Tensor& dqkv, const Stream& s);

// Folds one partial attention result into a running one (context parallelism's ring attention). A query
// block attends to the key/value blocks one at a time; each partial result (out_p, lse_p) is
// softmax-normalised over that block's keys only, with lse_p = log sum over the block's keys of exp(score).
// The exact attention over all blocks is out = sum_p exp(lse_p - lse) out_p with lse = log sum_p exp(lse_p).
//   acc [B, T, H*D] f32 (f64 when part is f64), acc_lse [B, H, T] f32 (f64): the running result, updated in
//   place; part [B, T, H*D] (f32 or f64 on the CPU, bf16 or f32 on CUDA), part_lse [B, H, T] f32 (f64).
// lse' = log(exp(acc_lse) + exp(part_lse)); acc' = acc * exp(acc_lse - lse') + part * exp(part_lse - lse'),
// computed with the larger of the two lse values subtracted. A side whose lse is -inf (no keys seen yet, or a
// fully masked row) contributes nothing, whatever its values (even NaN); both -inf leaves acc = 0 and
// lse = -inf (no NaN). Start a merge with acc = 0 and acc_lse = -inf. H comes from acc_lse; D = acc's last
// dimension / H. The lse layout is attention_forward's.
void attention_merge(Tensor& acc, Tensor& acc_lse, const Tensor& part, const Tensor& part_lse,
                     const Stream& s);

// Deterministic mode (config `deterministic_mode`; off by default, as in Megatron). cuDNN's default fused
// backward accumulates dQ in f32 from many thread blocks at once, so the order of the additions, and with it
// the last bits of dQ, can change from run to run. On, the GPU backward is bitwise reproducible: cuDNN's
// dP-workspace variant (no cross-block dQ accumulation) or, where cuDNN refuses it, our flash backward. The
// CPU reference is deterministic either way. Process-wide; set it before the first attention call of a shape
// (plans are cached per shape and mode).
void set_deterministic_attention(bool on);
bool deterministic_attention();

}  // namespace primus::ops
