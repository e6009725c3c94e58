#pragma once
// What every layer needs to know about the micro-batch being processed.
#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"

namespace primus {

class ParamHooks;  // model/param_hooks.h
class Fp8State;    // model/fp8_linear.h
namespace parallel {
class TensorParallel;   // parallel/tensor_parallel.h
class ContextParallel;  // parallel/context_parallel.h
}  // namespace parallel

// How much of a layer's forward state is kept for backward.
enum class RecomputeMode {
  kNone,       // keep everything backward needs
  kSelective,  // drop the cheap elementwise outputs (norm outputs, SwiGLU output) and recompute them in
               // backward
  kFull,       // keep only the layer input; rerun the whole layer forward in backward
};

// Where a micro-batch comes from, for randomness keyed by the data rather than by the call order (forced MoE
// balancing's random router logits): a recompute, a resume, another micro-batch split or data-parallel layout
// give a token the same values.
struct BatchOrigin {
  uint64_t seed = 0;         // the run's seed
  bool eval = false;         // evaluation batches draw from a stream of their own
  int64_t first_sample = 0;  // global index of the batch's first sequence (training: consumed samples)
};

struct StepContext {
  Stream stream;
  DType act_dtype = DType::kF32;  // f32 on the CPU, bf16 on CUDA
  int64_t batch = 1;
  int64_t seq = 1;
  int64_t pos_offset = 0;  // first position of this sequence shard (context parallelism later)
  // Packed SFT rows (data/sft_dataset.h; nullptr = plain causal rows): i32 [B, T] on the device. positions:
  // each token's RoPE position (restarting at 0 per sample); seg_starts: the first token of each token's
  // sample, which attention does not look before (ops::AttentionShape::seg_starts).
  const Tensor* positions = nullptr;
  const Tensor* seg_starts = nullptr;
  const Tensor* rope_table = nullptr;
  // d(step loss)/d(a router balancing loss of this micro-batch): Megatron adds each micro-batch's aux and z
  // losses to its loss, and the step averages micro-batches, so 1 / micro-batches.
  float aux_grad_scale = 0.0f;
  BatchOrigin origin;
  // A training forward (whose backward follows): training-only randomness applies (LoRA's input dropout).
  bool training = false;
  // The model's region hooks (nullptr = none): layers report mid-backward progress (ParamHooks::grads_final).
  ParamHooks* hooks = nullptr;
  // Tensor parallelism (nullptr = none): the layers' boundary collectives (model/tp_boundary.h).
  const parallel::TensorParallel* tp = nullptr;
  // Context parallelism (nullptr = none): the batch is this rank's [2B, C] chunk-major tokens; attention
  // spans every rank's chunks.
  const parallel::ContextParallel* cp = nullptr;
  // Zero-bubble pipeline schedules (parallel/pipeline_schedule.h): the input-gradient pass queues the
  // projections' weight-gradient GEMMs here for the later weight-gradient pass (nullptr = run them at once).
  std::vector<std::function<void()>>* deferred_wgrad = nullptr;
  // FP8 training (nullptr = BF16): the recipe and scaling state of the projections (model/fp8_linear.h).
  Fp8State* fp8 = nullptr;
  int64_t tokens() const { return batch * seq; }
  Tensor empty(const Shape& shape, DType dtype) const { return Tensor::empty(shape, dtype, stream); }
  Tensor act(const Shape& shape) const { return Tensor::empty(shape, act_dtype, stream); }
  DType stat_dtype() const { return act_dtype == DType::kF64 ? DType::kF64 : DType::kF32; }
};

}  // namespace primus
