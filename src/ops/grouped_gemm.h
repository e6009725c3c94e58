#pragma once
// Grouped GEMM for MoE experts: one weight matrix per expert, the token rows grouped by expert.
//
// Rows of x [M, K] belong to experts in order: expert e owns rows [o_e, o_e + counts[e]) with o_e =
// counts[0] + ... + counts[e-1]; counts may be zero. Rows past sum(counts) (padding up to a static bound)
// belong to no expert: forward and dgrad write zeros there, so no row of an output is ever left undefined
// (the bug class of Primus-Turbo #397), and wgrad ignores them.
//
// The counts live on the HOST: the caller copies routing's per-expert histogram to the host (one
// synchronisation per MoE layer and micro-batch) and passes it to the forward and to both backward calls.
// cuBLAS's grouped GEMM takes host m/n/k arrays and cuBLASLt has no grouped GEMM (CUDA 13), so a device-side
// count would need our own persistent kernel; docs/kernels/grouped_gemm.md gives the reasons and numbers.
//
// CPU: per-expert OpenBLAS products in f32 / f64 (the reference). CUDA: bf16 x and w, f32 accumulation, bf16
// y / dx, f32 dw; the path (cuBLAS grouped, cuBLAS strided-batched for equal counts, or a loop of cuBLASLt
// calls) is chosen per call, see ops/cuda/grouped_gemm_cuda.h.
#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace primus::ops {

// y[rows of e] = x[rows of e] @ w[e]^T. x [M, K], w [E, N, K] (weights [out, in] as in PyTorch/HF), y [M, N].
void grouped_gemm_forward(const Tensor& x, const Tensor& w, std::span<const int64_t> counts, Tensor& y,
                          const Stream& s);
// dx[rows of e] = dy[rows of e] @ w[e]; dy [M, N], dx [M, K] (overwritten, padding rows zeroed).
void grouped_gemm_backward_input(const Tensor& dy, const Tensor& w, std::span<const int64_t> counts,
                                 Tensor& dx, const Stream& s);
// dw[e] += dy[rows of e]^T @ x[rows of e]; dw [E, N, K] (f32 on CUDA). accumulate = false overwrites dw
// instead, as linear_backward_weight does. An expert with no rows gets a zero gradient (overwrite) or keeps
// its gradient (accumulate).
void grouped_gemm_backward_weight(const Tensor& dy, const Tensor& x, std::span<const int64_t> counts,
                                  Tensor& dw, const Stream& s, bool accumulate = true);

// Checks counts against x's rows and w's experts; returns sum(counts). Shared by the CPU and CUDA paths.
int64_t grouped_rows(const char* op, std::span<const int64_t> counts, int64_t experts, int64_t rows);

}  // namespace primus::ops
