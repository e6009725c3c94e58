#pragma once
// CPU reference implementations (src/ops/cpu/grouped_gemm.cpp): f32 and f64, one OpenBLAS product per expert.
// Same contract as ops/grouped_gemm.h, which documents every function; the dispatcher ops/grouped_gemm.cpp
// checks shapes and counts and routes here.
#include "ops/grouped_gemm.h"

namespace primus::ops::cpu {

void grouped_gemm_forward(const Tensor& x, const Tensor& w, std::span<const int64_t> counts, Tensor& y,
                          const Stream& s);
void grouped_gemm_backward_input(const Tensor& dy, const Tensor& w, std::span<const int64_t> counts,
                                 Tensor& dx, const Stream& s);
void grouped_gemm_backward_weight(const Tensor& dy, const Tensor& x, std::span<const int64_t> counts,
                                  Tensor& dw, const Stream& s, bool accumulate);

}  // namespace primus::ops::cpu
