#pragma once
// CUDA implementation (src/ops/cuda/dropout.cu): bf16. Same contract as ops/dropout.h.
#include "ops/dropout.h"

namespace primus::ops::cuda {

void dropout_apply(const Tensor& x, float p, uint64_t key, int64_t col_begin, int64_t whole_cols, Tensor& out,
                   const Stream& s, const DropoutRows& rows = {});

}  // namespace primus::ops::cuda
