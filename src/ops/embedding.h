#pragma once
#include "core/tensor.h"

namespace primus::ops {

// out[N, D] = table[tokens[n]]; tokens i32 [N], every id in [0, V) (checked on the CPU; on the GPU an id out
// of range raises a device-side error flag that the op reports).
void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out, const Stream& s);
// dtable[V, D] += scatter of dout rows by token id. Deterministic: the same inputs give bitwise the same
// result.
void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable, const Stream& s);

}  // namespace primus::ops
