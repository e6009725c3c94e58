#pragma once
// Matrix products. Row-major semantics throughout: a [M, K] (or [K, M] when trans_a), b [K, N] (or [N, K]
// when trans_b), c [M, N]. CPU: OpenBLAS (f32) or a blocked loop (f64). CUDA: cuBLASLt, bf16 inputs, f32
// accumulation, algorithm from the tuning cache when one is loaded (see bench/gemm_tuning.h), else cuBLASLt's
// heuristic.
#include "core/tensor.h"

namespace primus::ops {

// c = alpha * op(a) @ op(b) + beta * c_in (c_in defaults to c itself). c may be f32 while a, b are bf16 on
// CUDA.
void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha, float beta,
          const Stream& s, const Tensor* c_in = nullptr);

// y[M, N] = x[M, K] @ w[N, K]^T (+ bias[N]) (+ residual[M, N]). Weights are [out, in] as in PyTorch/HF.
void linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, const Stream& s,
                    const Tensor* residual = nullptr);
// dx[M, K] = dy[M, N] @ w[N, K]  (dx += ... when accumulate)
void linear_backward_input(const Tensor& dy, const Tensor& w, Tensor& dx, bool accumulate, const Stream& s);
// dw[N, K] += dy^T @ x ; dbias[N] += column sums of dy (when dbias is given). dw/dbias are f32 on CUDA.
// accumulate = false overwrites dw and dbias instead (beta = 0): the first write of a step needs no zeroed
// gradient buffer, which saves the memset and the GEMM's read of C.
void linear_backward_weight(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor* dbias, const Stream& s,
                            bool accumulate = true);

// GEMMs launched from now on leave `reserve` SMs of s's GPU to kernels of another stream (cuBLASLt's SM count
// target); 0 gives them every SM again. Returns the reservation it replaces (0 on the CPU, where it does
// nothing).
int reserve_gemm_sms(const Stream& s, int reserve);

}  // namespace primus::ops
