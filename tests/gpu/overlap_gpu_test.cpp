// The overlapped optimizer update (train/overlapped_update.h) against the serial update on the GPU: the same
// model, initialisation and data, five steps each; the overlapped run sums the gradient norm's chunks on the
// background stream during the backward, the serial one after it. With every SM left to the GEMMs the two
// runs execute the same kernels on the same data, so losses, master weights, moments and the bf16 compute
// copy must be bitwise equal; a forward that read a region before its update finished would differ. With SMs
// reserved for the update the GEMMs keep their algorithms (only the grid shrinks), so that case must be
// bitwise equal too: results may not depend on how many SMs the update took, or a resumed run would not
// repeat its original.
#include <fmt/format.h>

#include <random>

#include "core/error.h"
#include "gpu/gpu_test.h"
#include "model/llama_model.h"
#include "model/param_store.h"
#include "ops/gemm.h"
#include "train/grad_norm.h"
#include "train/optimizer.h"
#include "train/overlapped_update.h"

namespace primus::gputest {
namespace {

ModelConfig overlap_model() {
  ModelConfig m;
  // Large enough that the update of the embedding and head (2 x 32M parameters) outlasts a layer's forward,
  // so that a missing wait shows up as a different loss.
  m.num_layers = 4;
  m.hidden_size = 1024;
  m.ffn_hidden_size = 2816;
  m.num_attention_heads = 16;
  m.num_query_groups = 4;
  m.kv_channels = 64;
  m.vocab_size = m.padded_vocab_size = 32000;
  m.untie_embeddings_and_output_weights = true;
  m.qk_layernorm = true;  // norm-weight gradients: accumulated, zeroed by the update stream
  m.rotary_base = 10000;
  m.init_method_std = 0.02;
  return m;
}

struct Run {
  ParamStore params;
  LlamaModel model;
  AdamW optim;
  ChunkedGradNorm norm;
  std::unique_ptr<OverlappedUpdate> overlap;
  std::vector<double> losses, norms;

  Run(Context& ctx, const ModelConfig& m, const OptimConfig& oc, int sm_reserve, bool overlapped)
      : params(ModelSpec::from_config(m)),
        model(m, RecomputeConfig{}, alloc(params, ctx.stream), ctx.stream, 512),
        optim(oc, params),
        norm(params, ctx.stream) {
    params.set_overwritten_grads(model.gemm_written_grad_entries());
    if (overlapped) {
      overlap = std::make_unique<OverlappedUpdate>(params, optim, norm, ctx.stream, sm_reserve);
      model.set_hooks(overlap.get());
    }
  }
  static ParamStore& alloc(ParamStore& p, const Stream& s) {
    p.allocate(DType::kBF16, s);
    p.initialize(1234, s);
    return p;
  }
  void step(const Stream& s, const Tensor& tokens, const Tensor& targets, double lr) {
    if (!(overlap && overlap->take_grads_prepared())) params.begin_grad_step(s);
    const float scale = 1.0f / static_cast<float>(tokens.numel());
    if (overlap) overlap->arm_norm();
    Tensor l = model.forward_backward(tokens, targets, scale);
    params.end_grad_step(s);
    if (overlap) {
      PRIMUS_CHECK(overlap->norm_complete(), "the backward did not sum every region's squares");
      overlap->join_norm();  // summed on the background stream during the backward
    } else {
      norm.launch_all(s);
    }
    const double n = norm.read();
    norms.push_back(n);
    double sum = 0;
    for (double v : l.to_vector<double>()) sum += v;
    losses.push_back(sum);
    const float clip = clip_coefficient(n, 1.0);
    if (overlap)
      overlap->launch(lr, clip);
    else
      optim.step(lr, clip, s);
  }
  void finish(const Stream& s) {
    if (overlap) overlap->finish();
    stream_sync(s);
  }
};

void overlap_case(Context& ctx, int sm_reserve) {
  const ModelConfig m = overlap_model();
  OptimConfig oc;
  oc.weight_decay = 0.1;
  oc.adam_beta2 = 0.95;
  Run serial(ctx, m, oc, 0, false), overlapped(ctx, m, oc, sm_reserve, true);
  const int64_t B = 4, T = 256;
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(m.vocab_size) - 1);
  for (int step = 0; step < 5; ++step) {
    std::vector<int32_t> t(B * T), y(B * T);
    for (auto& v : t) v = tok(ctx.rng);
    for (auto& v : y) v = tok(ctx.rng);
    Tensor tokens = Tensor::from_vector(t, {B, T}).to(ctx.stream);
    Tensor targets = Tensor::from_vector(y, {B, T}).to(ctx.stream);
    serial.step(ctx.stream, tokens, targets, 1e-3);
    overlapped.step(ctx.stream, tokens, targets, 1e-3);
  }
  serial.finish(ctx.stream);
  overlapped.finish(ctx.stream);
  ops::reserve_gemm_sms(ctx.stream, 0);
  const double tol = 0.0;
  const std::string tag = sm_reserve == 0 ? "bitwise"
                                          : fmt::format("{} SMs reserved, released from region {}",
                                                        sm_reserve, overlapped.overlap->release_region());
  ctx.check("overlap", fmt::format("losses, 5 steps ({})", tag), Tensor::from_vector(overlapped.losses, {5}),
            Tensor::from_vector(serial.losses, {5}), tol);
  ctx.check("overlap", fmt::format("gradient norms, 5 steps ({})", tag),
            Tensor::from_vector(overlapped.norms, {5}), Tensor::from_vector(serial.norms, {5}), tol);
  // The chunked norm against the whole-buffer one (another summation order): f32 partials, so ~1e-7.
  ctx.check("overlap", "chunked gradient norm vs one sum_squares",
            Tensor::from_vector(std::vector<double>{serial.norms.back()}, {1}),
            Tensor::from_vector(std::vector<double>{serial.optim.grad_norm(ctx.stream)}, {1}), 1e-6);
  ctx.check("overlap", fmt::format("master weights ({})", tag), overlapped.params.master_flat(),
            serial.params.master_flat(), tol);
  const double moment_tol = 0.0;
  ctx.check("overlap", fmt::format("adam m ({})", tag), overlapped.params.adam_m_flat(),
            serial.params.adam_m_flat(), moment_tol);
  ctx.check("overlap", fmt::format("adam v ({})", tag), overlapped.params.adam_v_flat(),
            serial.params.adam_v_flat(), moment_tol);
  ctx.check("overlap", fmt::format("bf16 compute copy ({})", tag), overlapped.params.compute_flat(),
            serial.params.compute_flat(), tol);
}

}  // namespace

PRIMUS_GPU_TEST(overlap) {
  overlap_case(ctx, 0);
  overlap_case(ctx, 16);
}

}  // namespace primus::gputest
