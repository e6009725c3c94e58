#pragma once
// FP8 MoE experts (docs/fp8.md, "MoE experts"). The routed experts' grouped projections -- y[rows of e] =
// x[rows of e] W_e^T for every local expert e -- run their forward and input-gradient GEMMs on FP8 casts
// under the run's recipe, one cuBLASLt FP8 GEMM per expert with tokens (cuBLASLt has no grouped FP8 GEMM in
// CUDA 13; the BF16 grouped-GEMM paths are in ops/grouped_gemm.h).
//
// The weight gradient stays BF16 (ops::grouped_gemm_backward_weight): its K is an expert's token count,
// which routing makes arbitrary, while an FP8 GEMM needs K a multiple of 16 (128 blockwise) -- padding every
// expert's rows would have to reach through the permute and the expert-parallel exchange -- and at the row
// counts of fine-grained MoE (256 per expert on Qwen3-30B-A3B) that GEMM is bound by writing its f32
// gradient, not by its math (docs/kernels/grouped_gemm.md), so FP8 would not make it faster.
//
// One scaling slot per projection (Fp8State; "layers.3.mlp.experts.gate_up_proj"): its tensors are cast as
// wholes where a row slice of the cast is the cast of the slice -- tensorwise activations and gradients (one
// scale for every expert's tokens, the delayed history's amax over all of them), the weight stack [E, N, K]
// under every recipe (tensorwise: one scale for the stack; rowwise and 128x128 blocks: each expert's rows
// keep their own) -- and per expert where it is not: rowwise and 1x128 activations (the per-row multipliers
// of a slice would start unaligned, the 1x128 ones are stored rows-fastest) and the transposed weights of
// the input gradient (W_e^T is not a slice of the stack's transpose). A 1x128-scaled token operand runs on
// its rows rounded up to 16 (cuBLASLt's need, measured). Rows past sum(counts) are written as zeros, as the
// grouped GEMM does.
#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "model/step_context.h"

namespace primus {

// Below 512 routed rows per expert on average (tokens x top-k / experts; Qwen3-30B-A3B's 128 experts get
// 256 at 4096 tokens) the experts stay BF16 even with a slot: one FP8 GEMM launch per expert makes the host
// the limit there, and cuBLAS's single grouped BF16 call is faster (H100 2026-11-28, Qwen3's gate+up of 128 x
// 256 rows: FP8 per expert 151 TFLOP/s forward and 72 input gradient, BF16 grouped 546 and 567; Mixtral's 8 x
// 4096 rows: FP8 1098 and 983 against BF16 721 and 700). The rule is a property of the shape, decided per
// call from the counts, so forward and backward agree.
constexpr int64_t kFp8ExpertMinMeanRows = 512;
// Whether `rows` routed rows over `experts` experts run the FP8 GEMMs (a slot given).
bool fp8_experts_worthwhile(int64_t rows, int64_t experts);
// The threshold in use: kFp8ExpertMinMeanRows, or env PRIMUS_FP8_EXPERT_MIN_ROWS (0: always FP8, for A/B
// runs); set_fp8_expert_min_rows overrides both (tests). Process-wide.
int64_t fp8_expert_min_rows();
void set_fp8_expert_min_rows(int64_t rows);

// y [M, N] = the experts' x [M, K] @ w[e]^T, w [E, N, K]. slot < 0, no FP8 in ctx, or too few rows per
// expert: the BF16 grouped GEMM.
void expert_project(const StepContext& ctx, int slot, const Tensor& x, const Tensor& w,
                    std::span<const int64_t> counts, Tensor& y);

// dx [M, K] (overwritten) = the experts' dy [M, N] @ w[e]. Same BF16 cases as expert_project.
void expert_project_backward_input(const StepContext& ctx, int slot, const Tensor& dy, const Tensor& w,
                                   std::span<const int64_t> counts, Tensor& dx);

}  // namespace primus
