#pragma once
#include "core/tensor.h"
#include "ops/optimizer.h"

namespace primus::ops {

// out[N, D] = table[tokens[n]]; tokens i32 [N], every id in [0, V) (checked on the CPU; on the GPU an id out
// of range raises a device-side error flag that the op reports).
void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out, const Stream& s);
// dtable[V, D] += scatter of dout rows by token id. Deterministic: the same inputs give bitwise the same
// result.
void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable, const Stream& s);
// out[N, D] = rows tokens[n] of the table as one AdamW step with `p` would leave them: computed from the f32
// master rows, their gradients and moments (all [V, D]) without storing anything, and converted to out's
// dtype (bf16: the compute rounding of core/master_split.h). The first forward op can then run before the
// table's update has (train/overlapped_update.h); on CUDA the rows are bitwise those adamw_step writes to the
// bf16 copy (one shared element update). Forward only: the gradient flows through embedding_backward as for a
// plain lookup.
void embedding_forward_updated(const Tensor& tokens, const Tensor& master, const Tensor& grad,
                               const Tensor& m, const Tensor& v, const AdamWParams& p, Tensor& out,
                               const Stream& s);
// The same with the master table stored as (hi bf16, rem i16) pairs (core/master_split.h): the rows are
// bitwise the hi that adamw_step_split leaves (on CUDA), i.e. embedding_forward_updated on the joined master.
void embedding_forward_updated_split(const Tensor& tokens, const Tensor& hi, const Tensor& rem,
                                     const Tensor& grad, const Tensor& m, const Tensor& v,
                                     const AdamWParams& p, Tensor& out, const Stream& s);

}  // namespace primus::ops
