#pragma once
// MoE token permutation: the rows of x [T, d] copied once per routing entry and grouped by expert (the input
// of the grouped GEMM, and the layout an all-to-all-v sends: one contiguous block of rows per expert with its
// count), and the way back: a probability-weighted sum of each token's k expert outputs.
//
// A routing entry ("slot") is s = t * k + j of ids [T, k]. The plan orders the slots by expert and, within
// one expert, by token (a stable order: results never depend on scheduling). Every op is deterministic:
// sums over a token's k copies run in j order with f32 accumulation, and no float atomics are used.
//
// Dtypes: x, x_perm, y_perm, out and their gradients bf16 on CUDA (f32 accumulation), probs / dprobs f32;
// on the CPU every floating tensor of a call is f32 or f64. Index tensors i32.
#include <cstdint>

#include "core/tensor.h"

namespace primus::ops {

struct MoePermutePlan {
  int64_t num_tokens = 0, topk = 0, num_experts = 0;
  // Rows of the permuted tensors: T * k (dropless; with dropped entries the rows past offsets[E] are padding)
  // or E * capacity (padded to capacity).
  int64_t num_rows = 0;
  int64_t capacity = 0;  // 0: no padding
  // All on the device of the ids. To get the counts on the host (for a host-driven grouped GEMM or the
  // all-to-all-v split sizes) copy them: plan.counts.to(Stream::cpu()) (a synchronisation).
  Tensor counts;    // [E] i32: real rows of each expert (after dropping)
  Tensor offsets;   // [E + 1] i32: first row of each expert's block; the block of expert e has
                    // offsets[e+1] - offsets[e] rows (= capacity when padded, = counts[e] otherwise);
                    // offsets[E] = rows in use
  Tensor row_src;   // [num_rows] i32: the slot whose token a row holds; -1 = a padding row (all zero)
  Tensor slot_row;  // [T * k] i32: the row of each slot; -1 = dropped
};

// Builds the plan from ids [T, k] i32 (entries in [0, E), or -1 = dropped, e.g. by moe_capacity_drop).
// capacity > 0 pads every expert's block to `capacity` rows (moe_pad_expert_input_to_capacity); an expert
// with more entries than that keeps its earliest tokens and drops the rest (slot_row -1), so a plan is
// always well defined. capacity == 0: dropless layout, num_rows = T * k. Zero-token experts get empty
// blocks. An id >= E or < -1 is an error on the CPU; the GPU treats it as dropped.
MoePermutePlan moe_permute_plan(const Tensor& ids, int64_t num_experts, int64_t capacity, const Stream& s);

// x_perm [num_rows, d]: row r = x[row_src[r] / k], or zeros for a padding row.
void moe_permute(const Tensor& x, const MoePermutePlan& plan, Tensor& x_perm, const Stream& s);

// dx [T, d] = sum over the kept slots j of token t (in j order) of dx_perm[slot_row[t, j]]; a token whose
// entries were all dropped gets 0. Overwrites dx.
void moe_permute_backward(const Tensor& dx_perm, const MoePermutePlan& plan, Tensor& dx, const Stream& s);

// out [T, d] = sum over kept j (in j order) of probs[t, j] * y_perm[slot_row[t, j]] (f32 accumulation).
// probs [T, k]. Padding rows of y_perm are never read.
void moe_unpermute(const Tensor& y_perm, const MoePermutePlan& plan, const Tensor& probs, Tensor& out,
                   const Stream& s);

// Backward of moe_unpermute. dy_perm [num_rows, d]: row slot_row[t, j] = probs[t, j] * dout[t], padding rows
// 0. dprobs [T, k] = <dout[t], y_perm[slot_row[t, j]]> (f32), 0 for a dropped slot. Both overwritten.
void moe_unpermute_backward(const Tensor& dout, const Tensor& y_perm, const MoePermutePlan& plan,
                            const Tensor& probs, Tensor& dy_perm, Tensor& dprobs, const Stream& s);

}  // namespace primus::ops
