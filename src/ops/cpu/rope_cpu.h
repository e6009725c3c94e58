#pragma once
// CPU reference implementations (src/ops/cpu/rope.cpp): f32 and f64, OpenMP.
// Same contract as ops/rope.h, which documents every function; the dispatcher ops/rope.cpp routes here.
#include "ops/rope.h"

namespace primus::ops::cpu {

void rope_apply(Tensor& x, int64_t batch, int64_t seq, int64_t total_heads, int64_t n_heads, int64_t head_dim,
                const Tensor& table, int64_t pos_offset, const Tensor* positions, bool inverse,
                const Stream& s);

}  // namespace primus::ops::cpu
