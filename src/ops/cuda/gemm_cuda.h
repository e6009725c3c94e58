#pragma once
// CUDA implementations (src/ops/cuda/gemm.cu): bf16 activations/weights, f32 statistics and parameter grads.
// Same contract as ops/gemm.h, which documents every function; the dispatcher ops/gemm.cpp routes here.
#include "ops/gemm.h"

namespace primus::ops::cuda {

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha, float beta,
          const Stream& s, const Tensor* c_in);
void linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, const Stream& s,
                    const Tensor* residual);
void linear_backward_input(const Tensor& dy, const Tensor& w, Tensor& dx, bool accumulate, const Stream& s);
void linear_backward_weight(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor* dbias, const Stream& s,
                            bool accumulate = true);
int reserve_gemm_sms(const Stream& s, int reserve);  // returns the previous reservation

}  // namespace primus::ops::cuda
