#pragma once
// A LoRA adapter on one projection y = x W^T (Hu et al. 2021): y += s (x A^T) B^T with A [r, in], B [out, r]
// trainable, s = alpha / r, and W frozen. What it keeps for backward is t = s x A^T, [tokens, r].
//
// Order of the passes (measured on the llama3.2-1B shape, H200, docs/performance.md): the adapter's thin
// GEMMs are memory-bound over the [tokens, out] and [tokens, in] activations, the frozen projection's GEMMs
// compute-bound. So the adapter writes its product first (y = t B^T, and backward dx = u A) and the frozen
// GEMM then accumulates on top through its C input (beta = 1), a read its compute hides, instead of the
// adapter reading and rewriting the projection's output afterwards.
//
// Dropout (lora.dropout = p > 0, position "pre", training forwards only): the adapter reads x' = x keep / (1
// - p) instead of x (t = s x' A^T, dA += u^T x'), and its share of the input gradient is masked alike (dx =
// keep (u A) / (1 - p)). The mask is drawn from each element's place (ops/dropout.h) under a key of the run's
// seed, the projection and the micro-batch's first sample, so backward, recomputation, every device and every
// parallel layout regenerate the same mask instead of storing it (under context parallelism a rank's rows
// are placed at their tokens in the whole batch).
//
// Backward, from dy = dL/dy:
//   dB += dy^T t          u = s dy B [tokens, r]          dA += u^T x          dx = u A (+ dy W by the
//   caller)
// Under tensor parallelism (parallel/tensor_parallel.h) the factors are split like the side of W they meet
// (model/param_store.cpp): in a column-parallel projection B holds this rank's rows and A is whole, so u and
// hence dA are partial sums over tp (the store's TpSum entry sums dA; dx is summed with the projection's own
// dgrad); in a row-parallel one A holds this rank's columns and B is whole, so t and dB are partial (t B^T is
// added before the projection's own reduction, and TpSum sums dB). No collective of its own.
#include <string>
#include <vector>

#include "model/param_store.h"
#include "model/step_context.h"

namespace primus {

// Rows [begin, end) of an adapter's B (end -1: all of them).
struct LoraRows {
  int64_t begin = 0, end = -1;
};

class LoraAdapter {
 public:
  LoraAdapter() = default;
  // The adapter of `projection` ("layers.3.self_attn.qkv_proj") in `store` (laid out from a spec with
  // adapters.enabled); off when the store has none for it.
  LoraAdapter(ParamStore& store, const std::string& projection);
  bool on() const { return a_ >= 0; }
  // t = s x A^T [tokens, r], kept for backward.
  Tensor down(const StepContext& ctx, const Tensor& x) const;
  // y [tokens, out] = t B^T (+ c_in [tokens, out] when given; it may be y itself). The frozen projection then
  // accumulates into y. With `rows` = [b, e), y is the output's columns b..e only (B's rows b..e): a
  // projection whose output rows the model computes as separate GEMMs (MLA's kv_a_proj_with_mqa: latent |
  // rotary key).
  using Rows = LoraRows;
  void up(const StepContext& ctx, const Tensor& t, Tensor& y, const Tensor* c_in = nullptr,
          Rows rows = {}) const;
  // The adapter's gradients from dy [tokens, out], and dx [tokens, in] = u A written (overwritten): the
  // frozen projection's dgrad then accumulates into dx.
  void backward(const StepContext& ctx, const Tensor& dy, const Tensor& x, const Tensor& t, Tensor& dx) const;
  // The same with dy given as column blocks (dy_parts[i] = dL/dy[:, rows[i]]), which together cover B's rows,
  // and dx += u A when accumulate_dx.
  struct OutputGrad {
    Tensor dy;
    Rows rows;
  };
  void backward(const StepContext& ctx, const std::vector<OutputGrad>& dy_parts, const Tensor& x,
                const Tensor& t, Tensor& dx, bool accumulate_dx = false) const;
  std::vector<int> entries() const { return on() ? std::vector<int>{a_, b_} : std::vector<int>{}; }

 private:
  // The dropout mask's stream: the run's seed, the projection, the micro-batch.
  uint64_t mask_key(const StepContext& ctx) const;
  // x' = dropout(x) (or x itself when no dropout applies to this forward).
  Tensor dropped(const StepContext& ctx, const Tensor& x) const;
  ParamStore* store_ = nullptr;
  int a_ = -1, b_ = -1;
  float scale_ = 1.0f;
  float dropout_ = 0.0f;
  uint64_t name_key_ = 0;                   // of the projection's name
  int64_t col_begin_ = 0, whole_cols_ = 0;  // x's columns in the whole input (A's slice)
};

}  // namespace primus
