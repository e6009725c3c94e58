#pragma once
// Multi-token prediction (DeepSeek-V3; Megatron's mtp_num_layers / mtp_loss_scaling_factor; docs/mla.md).
// Depth k = 1..D predicts the token k + 1 positions ahead of each input position:
//   h_0 = rmsnorm(x_L; norm)                                   the rows the output head reads
//   u_k = [rmsnorm(emb(tokens shifted by k); enorm_k) | rmsnorm(h_{k-1}; hnorm_k)] eh_proj_k^T
//   h_k = rmsnorm(layer_k(u_k); final_layernorm_k)
//   loss_k = cross-entropy(h_k W_head^T, targets shifted by k)
// The embedding and the output projection are the main model's. Positions t >= T - k have no shifted
// target and do not count. The step's loss adds (mtp_loss_scaling_factor / D) * sum_k loss_k, each loss_k the
// mean over its own counted tokens (Megatron's MTPLossAutoScaler scaling); the logged LM loss stays the main
// one. Each depth's decoder layer has the kind of the main model's last layer (DeepSeek-V3: MLA + MoE).
#include <memory>
#include <string>
#include <vector>

#include "model/decoder_layer.h"
#include "model/model_spec.h"
#include "model/param_store.h"
#include "model/step_context.h"

namespace primus {

struct MtpActivations {
  Tensor e, e_rstd, en;  // the shifted tokens' embedding rows and their enorm
  Tensor h_rstd, hn;     // hnorm of h_{k-1}
  Tensor cat;            // [en | hn], [n, 2d]
  LayerActivations layer;
  Tensor x;          // the layer's output
  Tensor f_rstd, h;  // h_k = final_layernorm(x)
  void clear() { *this = MtpActivations{}; }
};

class MtpDepth {
 public:
  // depth: 0-based (parameters "mtp.{depth}.*").
  MtpDepth(const ModelSpec& spec, ParamStore& params, int depth);

  // h_k (a.h) from h_prev = h_{k-1} [n, d] and e = the embedding rows of the tokens shifted by k [n, d], n
  // the residual stream's rows this rank holds (local_tokens: 1/tp of the tokens under sequence parallelism).
  void forward(const StepContext& ctx, const Tensor& e, const Tensor& h_prev, MtpActivations& a,
               RecomputeMode mode, bool record_stats);
  // From dh_k = dL/dh_k [n, d] (consumed): de (overwritten) = dL/de and dh_prev (overwritten) = this depth's
  // share of dL/dh_{k-1}. Accumulates the parameter gradients and frees the activations.
  void backward(const StepContext& ctx, Tensor dh_k, const Tensor& h_prev, MtpActivations& a, Tensor& de,
                Tensor& dh_prev);

  DecoderLayer& layer() { return *layer_; }
  std::vector<int> gemm_weight_entries() const;

 private:
  const ModelSpec& spec_;
  ParamStore& params_;
  int enorm_, hnorm_, eh_, fnorm_;
  std::unique_ptr<DecoderLayer> layer_;
};

// The depths' input ids and targets of one micro-batch, built on the host from its whole sequences. Depth k
// (1-based) reads the tokens rolled left by k within each sequence (Megatron's roll_tensor: the last k
// positions wrap around to ids whose predictions do not count) and predicts the targets shifted left by k (-1
// where none is left). Context parallelism chunks each depth's rows after the shift, as it chunks the
// micro-batch's tokens and targets (ContextParallel::local_tokens): at a chunk's last positions the shifted
// ids and targets are then the next chunk's first ones, wherever that chunk is processed (another rank, or
// this rank's other chunk), and the counts stay the whole micro-batch's, so that every rank scales its share
// of a depth's loss by the one-process mean.
struct MtpBatch {
  // Per depth: host i32 ids and targets, shaped as the model's tokens ([B, T]; under CP this rank's [2B, C]).
  std::vector<Tensor> tokens, targets;
  std::vector<int64_t> counts;  // per depth: the targets it counts in the whole micro-batch
  int64_t counted = 0;          // the main loss's counted targets in the whole micro-batch
};
// From the whole micro-batch's tokens and targets (host i32 [B, T]). Packed rows with isolated samples pass
// their sample starts (host i32 [B, T], the row index of each token's first sample token; SftDataset::
// fill_row): each sample is then a sequence of its own, rolled within itself -- a depth never reads or
// predicts the next sample's tokens (Megatron's roll_tensor over packed sequences), so a packed row's depth
// losses are its samples' run alone.
MtpBatch mtp_batch(const Tensor& tokens, const Tensor& targets, int64_t depths,
                   const Tensor* seg_starts = nullptr);

}  // namespace primus
