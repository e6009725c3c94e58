#pragma once
// The decoder-only model of the Llama family (Llama 2/3, Qwen 2/3 by flags): embedding -> N decoder layers ->
// final norm -> lm head, with an explicit forward/backward over one micro-batch.
#include <memory>
#include <vector>

#include "config/train_config.h"
#include "model/decoder_layer.h"
#include "model/lm_head.h"
#include "model/model_spec.h"
#include "model/param_store.h"
#include "ops/rope.h"

namespace primus {

// Which layers recompute what, from Megatron's keys (recompute_granularity / _method / _num_layers).
std::vector<RecomputeMode> recompute_plan(const RecomputeConfig& cfg, int64_t num_layers);
ops::RopeConfig rope_config(const ModelConfig& m);

class LlamaModel {
 public:
  // params must be allocated on `stream`'s device. max_seq bounds the rope table. Activations are bf16 on
  // CUDA and take the compute dtype of the parameters on the CPU (f32, or f64 for gradient checks).
  LlamaModel(const ModelConfig& cfg, const RecomputeConfig& recompute, ParamStore& params,
             const Stream& stream, int64_t max_seq);

  const ModelSpec& spec() const { return spec_; }
  DType act_dtype() const { return act_dtype_; }

  // One micro-batch: tokens and targets i32 [B, T] on the model's device. Runs forward, loss and backward;
  // parameter gradients accumulate (the caller zeroes them once per step). Returns per-token losses f32 [B*T]
  // on the device (not synchronised: read them when the step ends).
  Tensor forward_backward(const Tensor& tokens, const Tensor& targets, float grad_scale);
  // Forward only (evaluation): per-token losses f32 [B*T].
  Tensor forward_loss(const Tensor& tokens, const Tensor& targets);

 private:
  StepContext context(const Tensor& tokens) const;

  ModelConfig cfg_;
  ModelSpec spec_;
  ParamStore& params_;
  Stream stream_;
  DType act_dtype_;
  Tensor rope_table_;
  std::vector<std::unique_ptr<DecoderLayer>> layers_;
  std::vector<RecomputeMode> recompute_;
  LmHead head_;
  int embed_ = -1;
};

}  // namespace primus
