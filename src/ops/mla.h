#pragma once
// Multi-latent attention (DeepSeek-V2/V3, model/mla_attention.h): the step between MLA's projections and the
// attention op. Per token, the projections give
//   q    [H * (dn + dr)]  per head [q_nope (dn) | q_pe (dr)]
//   kv   [H * (dn + dv)]  per head [k_nope (dn) | v (dv)]
//   k_pe [dr]             one rotary key shared by every head
// and attention reads the packed layout of ops/attention.h with KV = H heads, D = dn + dr and Dv = dv:
//   qkv  [H (dn + dr) | H (dn + dr) | H dv] = [q heads | k heads [k_nope | k_pe] | v heads].
// Packing applies RoPE (rotate-half, positions pos_offset + t % seq) to the q_pe and k_pe slices on the way,
// so the whole step is one pass; unpacking is its transpose (the backward), summing the k_pe gradient over
// heads in a fixed order.
#include "core/tensor.h"

namespace primus::ops {

struct MlaDims {
  int64_t batch = 1, seq = 1, heads = 1;
  int64_t nope = 0;   // dn
  int64_t rope = 2;   // dr (even)
  int64_t v_dim = 1;  // dv
  int64_t tokens() const { return batch * seq; }
  int64_t qk_dim() const { return nope + rope; }
  int64_t q_width() const { return heads * qk_dim(); }
  int64_t kv_width() const { return heads * (nope + v_dim); }
  int64_t qkv_width() const { return heads * (2 * qk_dim() + v_dim); }
};

// q [N, q_width], kv [N, kv_width], k_pe [N, dr] -> qkv [N, qkv_width] (N = batch * seq, overwritten).
// table [max_pos, dr] (ops/rope.h's cos | sin layout) on the tensors' device. positions: per-token positions
// (packed SFT rows, each sample from 0), an int32 [batch, seq] tensor on the same device, as ops/rope.h's
// rope_apply takes them (pos_offset then 0; the CPU reference checks the values, the CUDA path clamps them).
void mla_pack_qkv(const Tensor& q, const Tensor& kv, const Tensor& k_pe, const MlaDims& d,
                  const Tensor& table, int64_t pos_offset, Tensor& qkv, const Stream& s,
                  const Tensor* positions = nullptr);
// The transpose of mla_pack_qkv: dq [N, q_width], dkv [N, kv_width] and dk_pe [N, dr], all overwritten, from
// dqkv [N, qkv_width].
void mla_unpack_dqkv(const Tensor& dqkv, const MlaDims& d, const Tensor& table, int64_t pos_offset,
                     Tensor& dq, Tensor& dkv, Tensor& dk_pe, const Stream& s,
                     const Tensor* positions = nullptr);

}  // namespace primus::ops
