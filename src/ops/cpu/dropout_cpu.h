#pragma once
// CPU reference (src/ops/cpu/dropout.cpp): f32 and f64. Same contract as ops/dropout.h.
#include "ops/dropout.h"

namespace primus::ops::cpu {

void dropout_apply(const Tensor& x, float p, uint64_t key, int64_t col_begin, int64_t whole_cols, Tensor& out,
                   const Stream& s, const DropoutRows& rows = {});

}  // namespace primus::ops::cpu
