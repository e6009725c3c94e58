#pragma once
// The decoder-only model of the Llama family (Llama 2/3, Qwen 2/3 by flags): embedding -> N decoder layers ->
// final norm -> lm head, with an explicit forward/backward over one micro-batch.
#include <functional>
#include <memory>
#include <vector>

#include "config/train_config.h"
#include "model/decoder_layer.h"
#include "model/lm_head.h"
#include "model/model_spec.h"
#include "model/mtp.h"
#include "model/param_hooks.h"
#include "model/param_store.h"
#include "ops/rope.h"

namespace primus {

// Which layers recompute what, from Megatron's keys (recompute_granularity / _method / _num_layers) and
// Primus's recompute_layer_ids, over num_layers global layers (the decoder's, then the MTP depths). `held`:
// per decoder layer, whether this pipeline stage holds it (empty: every layer), which "block" counts.
std::vector<RecomputeMode> recompute_plan(const RecomputeConfig& cfg, int64_t num_layers,
                                          const std::vector<char>& held = {});
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
  // aux_grad_scale: the weight of each MoE layer's balancing losses in the step's loss (1 / micro-batches,
  // as Megatron); unused by dense models.
  // Multi-token prediction (model/mtp.h) scales depth k's loss by (mtp_loss_scaling_factor / D) times the
  // main loss's normalisation moved to the depth's own counted tokens: grad_scale * counted / counted_k. mtp:
  // the depths' ids, targets and counts, built on the host from the whole micro-batch (mtp_batch); required
  // under context parallelism (each depth's rows chunked as the tokens are); when null, built from `tokens`
  // and `targets`, which waits for the device.
  // origin: where the micro-batch comes from (keys data-dependent randomness: forced MoE balancing's random
  // router logits; step_context.h).
  // Packed SFT rows (data/sft_dataset.h): the positions and sample starts (i32 [B, T] on the model's device)
  // of the micro-batch the next forward_backward / forward_loss / chunk_forward runs (a chunk's state keeps
  // them for its backward); undefined tensors = plain causal rows. Kept until replaced. Refused with context
  // parallelism (config/validate.cpp).
  void set_packing(Tensor positions, Tensor seg_starts) {
    packed_positions_ = std::move(positions);
    packed_seg_starts_ = std::move(seg_starts);
  }
  Tensor forward_backward(const Tensor& tokens, const Tensor& targets, float grad_scale,
                          float aux_grad_scale = 0.0f, const MtpBatch* mtp = nullptr,
                          const BatchOrigin& origin = {});
  // Multi-token prediction, after forward_backward: per-token losses of each depth ([B*T] on the device,
  // positions without a shifted target hold 0) and each depth's counted tokens. Empty without MTP.
  const std::vector<Tensor>& mtp_losses() const { return mtp_losses_; }
  const std::vector<int64_t>& mtp_counts() const { return mtp_counts_; }
  // Pipeline parallelism (parallel/pipeline_runtime.h): the model runs as chunks, each a run of modules in
  // model order on one rank, for one micro-batch at a time. forward_backward is the whole model as one chunk.
  struct Chunk {
    bool embedding = false;  // starts with the embedding (reads the tokens)
    int first_layer = 0, num_layers = 0;
    bool loss = false;  // ends with the final norm + output layer + loss
  };
  Chunk whole_model() const { return Chunk{true, 0, static_cast<int>(spec_.layers), true}; }
  // What one chunk's forward keeps for its backward, for one micro-batch.
  struct ChunkState {
    StepContext ctx;                           // its positions / seg_starts point at the two below
    Tensor positions, seg_starts;              // the micro-batch's packing (set_packing) when its forward ran
    bool train = true;                         // false: evaluation (nothing kept, no gradient)
    Tensor lookup;                             // embedding chunks: the token ids looked up
    std::vector<LayerActivations> slots;       // per layer of the chunk
    Tensor dx;                                 // loss chunks: dL/d(the last layer's output), until backward
    Tensor losses;                             // loss chunks: per-token losses [B*T] on the device
    std::vector<Tensor> mtp_losses;            // loss chunks with MTP: mtp_losses() of this micro-batch
    std::vector<int64_t> mtp_counts;           // ... and mtp_counts()
    std::vector<std::function<void()>> wgrad;  // zero-bubble: the weight-gradient GEMMs backward deferred
  };
  // Forward of chunk c for the micro-batch `tokens` / `targets` (i32 [B, T] on the model's device; every
  // chunk takes them: the shape sets the micro-batch, the loss reads the targets). `input` is the previous
  // chunk's output (ignored by an embedding chunk). Returns the chunk's output activation; a loss chunk
  // returns an empty tensor and, when training, has already run the head's backward (st.dx). With
  // multi-token prediction a training loss chunk also runs the depths (reading the embedding on this stage,
  // ModelSpec::holds_tied_copy) and keeps their losses in st.mtp_losses / st.mtp_counts; mtp as for
  // forward_backward. Evaluation runs the main loss only.
  Tensor chunk_forward(const Chunk& c, ChunkState& st, const Tensor& input, const Tensor& tokens,
                       const Tensor& targets, float grad_scale, float aux_grad_scale = 0.0f,
                       const BatchOrigin& origin = {}, const MtpBatch* mtp = nullptr);
  // The activation passed between chunks for a micro-batch of `tokens` ([B, T]): [tokens this rank holds
  // of the residual stream (1/tp of them under sequence parallelism), d].
  Shape chunk_io_shape(const Tensor& tokens) const;
  // Backward of chunk c: grad_out = dL/d(its output) (unused by a loss chunk); returns dL/d(its input)
  // (empty for an embedding chunk). Parameter gradients accumulate; the state is spent.
  // defer_weight_grads (zero-bubble schedules' input-gradient pass, BI): the decoder layers' projection
  // weight gradients are queued in st.wgrad instead, for chunk_weight_grad (the BW pass); the other
  // parameters' gradients (norms, embedding, output layer, MLA and MoE projections) are computed at once.
  // A layer that queued GEMMs gets ParamHooks::backward_deferred where after_backward would be, and its
  // after_backward from chunk_weight_grad, after its GEMMs.
  Tensor chunk_backward(const Chunk& c, ChunkState& st, Tensor grad_out, bool defer_weight_grads = false);
  void chunk_weight_grad(ChunkState& st);

  // Forward only (evaluation): per-token losses f32 [B*T]. with_mtp also runs the MTP depths and leaves their
  // per-token losses in mtp_losses() (mtp_counts() is not updated); mtp as for forward_backward.
  Tensor forward_loss(const Tensor& tokens, const Tensor& targets, bool with_mtp = false,
                      const BatchOrigin& origin = {}, const MtpBatch* mtp = nullptr);
  // MoE models: after a step's last micro-batch (the expert-bias update); the routing statistics since the
  // last call, one entry per MoE layer (synchronises); the sum of every MoE layer's balancing losses in the
  // latest forward (synchronises; tests). No-ops / empty for dense models.
  void end_step();
  std::vector<MoeLayerStats> take_moe_stats();
  double moe_losses_of_last_forward();
  // MoE models under data / expert parallelism: the groups every MoE layer exchanges tokens over and sums its
  // expert loads over (MoeMlp::set_groups; not owned).
  void set_expert_groups(comm::Communicator* ep, comm::Communicator* loads);
  // Context parallelism (not owned; nullptr = none): the token batches given to forward_backward /
  // forward_loss are then this rank's chunk-major [2B, T / (2 CP)] tokens (ContextParallel::local_tokens).
  void set_context_parallel(const parallel::ContextParallel* cp) { cp_ = cp; }
  // Tensor parallelism (not owned; nullptr = none): must match the parameter store's split.
  void set_tensor_parallel(const parallel::TensorParallel* tp);
  // Region hooks (not owned; nullptr = none).
  void set_hooks(ParamHooks* hooks) { hooks_ = hooks; }
  // FP8 training (model/fp8_linear.h): the decoder projections the recipe covers run their GEMMs in FP8.
  // Before the first step.
  void enable_fp8(const Fp8Recipe& recipe);
  Fp8State* fp8() const { return fp8_.get(); }  // nullptr: BF16
  // LoRA (model/lora_adapter.h): the decoder projections take the adapters `adapters` holds (a store laid
  // out from a spec with adapters.enabled; not owned), and the model's own store must be frozen
  // (ParamStore::allocate_frozen). The hooks and the trainer then see `adapters` as the trainable store.
  void attach_adapters(ParamStore& adapters);
  // Entries whose gradient the step's first GEMM writes whole (ParamStore::set_overwritten_grads): every
  // projection matrix and the output head. Norms, biases and an untied input embedding are accumulated into.
  std::vector<int> gemm_written_grad_entries() const;

 private:
  StepContext context(const Tensor& tokens) const;
  // The token embeddings of `lookup`: one block of rows per n = ctx.tokens() ids (the inputs, each MTP
  // depth's shifted tokens), each block this rank's tokens' rows under sequence parallelism.
  Tensor embed(const StepContext& ctx, const Tensor& lookup);
  // Accumulates the embedding's gradient from grad, the gradient of embed(ctx, lookup) (block by block).
  void embed_backward(const StepContext& ctx, const Tensor& lookup, const Tensor& grad);
  // The input embedding takes a gradient (dense or row-sparse; not when frozen).
  bool embedding_trains() const;
  // Adds dout's rows to the embedding's gradient at the rows `lookup` names (dense or row-sparse).
  void embedding_grad(const StepContext& ctx, const Tensor& lookup, const Tensor& dout);
  std::vector<MoeMlp*> moe_layers();  // the main layers' MoE MLPs, then the MTP depths'
  // The MTP depths' rows of the micro-batch: `given` after checking it against the model and the tokens, or
  // (null, no context parallelism) mtp_batch of tokens and targets, built into `own`.
  const MtpBatch& mtp_rows(const StepContext& ctx, const Tensor& tokens, const Tensor& targets,
                           const MtpBatch* given, MtpBatch& own) const;
  // Device i32 [(inputs ? 1 : 0) * n + D * n]: the inputs' ids (when given), then each depth's host rows.
  Tensor depth_rows(const StepContext& ctx, const Tensor* inputs, const std::vector<Tensor>& depths) const;
  // Heads of the main model and every MTP depth, forward and backward, from the depths' embedding rows e_mtp
  // [D * local rows, d]: dL/dx_L (the last layer's output) and de (overwritten) = dL/de_mtp.
  Tensor mtp_heads(const StepContext& ctx, const Tensor& x, const Tensor& e_mtp, const Tensor& targets,
                   const MtpBatch& mtp, float grad_scale, Tensor& losses, Tensor& de);

  ModelConfig cfg_;
  ModelSpec spec_;
  ParamStore& params_;
  Stream stream_;
  DType act_dtype_;
  Tensor rope_table_;
  Tensor packed_positions_, packed_seg_starts_;              // set_packing
  std::vector<std::unique_ptr<DecoderLayer>> layers_;        // null: a layer another pipeline stage holds
  std::vector<const char*> owner_forward_, owner_backward_;  // "layer N forward" / "... backward", interned
  std::vector<RecomputeMode> recompute_;
  std::vector<std::unique_ptr<MtpDepth>> mtp_;
  std::vector<RecomputeMode> mtp_recompute_;
  std::vector<Tensor> mtp_losses_;
  std::vector<int64_t> mtp_counts_;
  std::unique_ptr<LmHead> head_;  // null on a pipeline stage without the output layer
  std::unique_ptr<Fp8State> fp8_;
  int embed_ = -1;        // -1 on a pipeline stage without the embedding
  bool adapted_ = false;  // attach_adapters
  ParamHooks* hooks_ = nullptr;
  const parallel::TensorParallel* tp_ = nullptr;
  const parallel::ContextParallel* cp_ = nullptr;
};

}  // namespace primus
