#pragma once
// Causal grouped-query attention over a packed QKV buffer. Per token the buffer holds the q heads, then the k
// heads, then the v heads: qkv[B, T, (H + KV) * D + KV * Dv]. Query head h attends with kv head h / (H / KV).
// q and k heads have D elements, v heads (and the output) Dv, which equals D except in multi-latent attention
// (DeepSeek MLA: D = nope + rope = 192, Dv = 128). Never builds the full T x T score matrix: the GPU runs
// flash attention; the CPU reference works on blocks of 64 query rows.
//
// Packed sequences (SFT, Megatron's THD / cu_seqlens packing): several training samples share one row of T
// tokens and a token attends only to earlier tokens of its own sample (causal + document mask). The samples
// are described per token by AttentionShape::seg_starts (below).
#include <cstdint>
#include <vector>

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
  // Packed sequences: null (the default) is plain attention over the whole row. Otherwise an int32 [B, T]
  // tensor on qkv's device holding, for every token, the index within its row of the first token of its
  // sample; query t then attends key s iff seg_starts[b, t] <= s <= t (requires causal). Samples are
  // contiguous runs: seg_starts[b, 0] = 0 and seg_starts[b, t] is seg_starts[b, t - 1] (same sample) or t (a
  // new one starts); all zeros is plain causal attention. Padding after the last sample is a sample of its
  // own (its outputs are finite; the loss ignores them). Per token rather than cu_seqlens offsets because
  // every lookup the kernels make is then O(1) or one binary search (a query row's first key, a query block's
  // first key block, the last query that sees a key block) and the tensor's shape does not depend on the
  // number of samples. The CPU reference checks the values; the CUDA path does not read them back (no host
  // sync) and only clamps them into [0, t], so malformed values give wrong results but no stray memory
  // access.
  const Tensor* seg_starts = nullptr;
  bool segmented() const { return seg_starts != nullptr; }
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

// seg_starts for AttentionShape from the sample lengths of each row: a CPU int32 [B, T] tensor with
// B = lengths.size(). Each row's lengths (each >= 1) must sum to at most T; the tokens after them form one
// padding sample.
Tensor attention_segment_starts(const std::vector<std::vector<int64_t>>& lengths, int64_t seq);
// Checks host sample starts (CPU int32 [batch, seq]) against AttentionShape::seg_starts' rule (each row
// starts at 0; each token continues the previous token's sample or starts one at itself); throws naming `op`,
// the row, the token and the values.
void check_segment_starts(const char* op, const Tensor& seg_starts, int64_t batch, int64_t seq);

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
