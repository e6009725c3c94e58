#pragma once
// CUDA implementations of ops/grouped_gemm.h (src/ops/cuda/grouped_gemm_cuda.cpp): bf16 x / w / y / dx, f32
// dw, f32 accumulation. Same contract as ops/grouped_gemm.h; the dispatcher ops/grouped_gemm.cpp routes here
// after checking shapes and counts.
#include <string>

#include "ops/grouped_gemm.h"

namespace primus::ops::cuda {

void grouped_gemm_forward(const Tensor& x, const Tensor& w, std::span<const int64_t> counts, Tensor& y,
                          const Stream& s);
void grouped_gemm_backward_input(const Tensor& dy, const Tensor& w, std::span<const int64_t> counts,
                                 Tensor& dx, const Stream& s);
void grouped_gemm_backward_weight(const Tensor& dy, const Tensor& x, std::span<const int64_t> counts,
                                  Tensor& dw, const Stream& s, bool accumulate);

// How a grouped GEMM runs on the GPU. Every path computes the same products with f32 accumulation; they
// differ in launches and kernels (docs/kernels/grouped_gemm.md has the measurements behind kAuto):
//   kCublasGrouped   one cublasGemmGroupedBatchedEx call; experts of equal row counts share one group;
//   kStridedBatched  one cublasGemmStridedBatchedEx call; only when every expert has the same (non-zero)
//   count; kLtLoop          one cuBLASLt call per expert through ops/cuda/gemm_lt.h (cached plans, tuning
//   table); kLtStreams       the same calls spread over 4 side streams (joined back into the caller's
//   stream).
// kAuto picks strided-batched for equal counts (the loop for <= 8 experts of >= 2048 rows); otherwise, by the
// mean rows over all experts, cuBLAS grouped below 512 (its f32-output wgrad falls back to the loop), else
// the loop for <= 8 active experts and the side streams for more; measurements in grouped_gemm_cuda.cpp. Env
// PRIMUS_GROUPED_GEMM=auto| grouped|batched|loop|streams sets the default; set_grouped_gemm_path overrides it
// (tests, benchmarks). A forced kStridedBatched on unequal counts throws.
enum class GroupedGemmPath { kAuto, kCublasGrouped, kStridedBatched, kLtLoop, kLtStreams };
void set_grouped_gemm_path(GroupedGemmPath p);
// The path the last grouped GEMM with at least one non-empty expert ran (kAuto before any).
GroupedGemmPath last_grouped_gemm_path();
const char* grouped_gemm_path_name(GroupedGemmPath p);  // "auto", "grouped", "batched", "loop", "streams"
GroupedGemmPath grouped_gemm_path_from_name(const std::string& name);

}  // namespace primus::ops::cuda
