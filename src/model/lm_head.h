#pragma once
// Final RMSNorm + output projection + softmax cross-entropy. Forward and backward run together, chunk by
// chunk of rows: logits of one chunk are computed, turned into their gradient in place, and consumed by the
// two backward GEMMs before the next chunk, so the full tokens x vocab logits never exist at once.
#include "model/fp8_linear.h"
#include "model/model_spec.h"
#include "model/param_store.h"
#include "model/step_context.h"

namespace primus {

class LmHead {
 public:
  LmHead(const ModelSpec& spec, ParamStore& params);

  // x [N, d] (residual stream after the last layer; this rank's N / tp rows under sequence parallelism);
  // targets i32 [N] on x's device (negative = not counted), N every token.
  // losses [N] (f32; f64 with f64 activations) receives the per-token losses. When dx is given, also computes
  // dL/dx [N, d] with L = grad_scale * sum(losses), and accumulates the head's parameter gradients.
  void run(const StepContext& ctx, const Tensor& x, const Tensor& targets, float grad_scale, Tensor& losses,
           Tensor* dx);

  // The pieces of run, for multi-token prediction (model/mtp.h), whose depths share the output projection
  // but each have their own norm (norm_entry) and whose depth 1 reads the main model's normed rows.
  // h [N, d] = rmsnorm(x; norm_entry), rstd [N] (stat dtype).
  void norm_forward(const StepContext& ctx, const Tensor& x, int norm_entry, Tensor& h, Tensor& rstd) const;
  // Projection and loss on normed rows h; with dh, also dL/dh (overwritten) and the projection's gradient.
  // Tensor parallelism: this rank's vocabulary columns; losses are the whole vocabulary's (the same on every
  // rank), dh this rank's partial sum (run sums it over tp).
  void project(const StepContext& ctx, const Tensor& h, const Tensor& targets, float grad_scale,
               Tensor& losses, Tensor* dh);
  // dx [N, d] (overwritten) from dh through the norm; accumulates the norm weight's gradient.
  void norm_backward(const StepContext& ctx, const Tensor& dh, const Tensor& x, int norm_entry,
                     const Tensor& rstd, Tensor& dx) const;
  int norm_entry() const { return norm_; }

  // Rows per chunk for a given vocabulary so that one chunk of logits stays near `budget_bytes`.
  static int64_t chunk_rows(int64_t rows, int64_t vocab, size_t elem_bytes, size_t budget_bytes);
  // The output projection's entry (the embedding when tied): its gradient is written whole by GEMMs here,
  // before the embedding's backward adds into it.
  int weight_entry() const { return weight_; }
  // FP8 training with the output layer covered (Fp8Recipe::output_layer): its GEMMs run in FP8 as the slot
  // "output" of `state` (model/fp8_linear.h).
  void enable_fp8(Fp8State& state) { fp8_slot_ = state.add("output"); }

 private:
  const ModelSpec& spec_;
  ParamStore& params_;
  int norm_ = -1, weight_ = -1;
  int fp8_slot_ = -1;  // -1: BF16
};

}  // namespace primus
