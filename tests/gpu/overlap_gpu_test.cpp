// The overlapped optimizer update (train/overlapped_update.h) against the serial update on the GPU: the same
// model, initialisation and data, five steps each; the overlapped run sums the gradient norm's chunks on the
// background stream during the backward, the serial one after it. With every SM left to the GEMMs the two
// runs execute the same kernels on the same data, so losses, master weights, moments and the bf16 compute
// copy must be bitwise equal; a forward that read a region before its update finished would differ. With SMs
// reserved for the update the GEMMs keep their algorithms (only the grid shrinks), so that case must be
// bitwise equal too: results may not depend on how many SMs the update took, or a resumed run would not
// repeat its original.
// The runs keep their f32 master weights in remainders (the default on CUDA, core/master_split.h): the
// remainders are compared too, and a run with an f32 master buffer must be bitwise the same as one in
// remainders (one compute rounding in both layouts).
#include <fmt/format.h>

#include <random>

#include "core/error.h"
#include "gpu/fused_test_util.h"
#include "gpu/gpu_test.h"
#include "model/llama_model.h"
#include "model/param_store.h"
#include "ops/gemm.h"
#include "ops/optimizer.h"
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

  double clip = 1.0;  // clip_grad (0: off)

  // sparse_rows > 0: the input embedding's gradient row-sparse with that many slots (ops/row_sparse_grad.h).
  Run(Context& ctx, const ModelConfig& m, const OptimConfig& oc, int sm_reserve, bool overlapped,
      MasterStorage storage = MasterStorage::kAuto, int64_t sparse_rows = 0)
      : params(ModelSpec::from_config(m)),
        model(m, RecomputeConfig{}, alloc(params, ctx.stream, storage, sparse_rows), ctx.stream, 512),
        optim(oc, params),
        norm(params, ctx.stream) {
    params.set_overwritten_grads(model.gemm_written_grad_entries());
    if (overlapped) {
      overlap = std::make_unique<OverlappedUpdate>(params, optim, norm, ctx.stream, sm_reserve);
      model.set_hooks(overlap.get());
    }
  }
  static ParamStore& alloc(ParamStore& p, const Stream& s, MasterStorage storage, int64_t sparse_rows) {
    if (sparse_rows > 0) p.set_sparse_embedding_grad(sparse_rows);
    p.allocate(DType::kBF16, s, DType::kF32, storage);
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
    const float coeff = clip_coefficient(n, clip);
    if (overlap)
      overlap->launch(lr, coeff);
    else
      optim.step(lr, coeff, s);
  }
  void finish(const Stream& s) {
    if (overlap) overlap->finish();
    stream_sync(s);
  }
  // The whole f32 master: its buffer, or joined from the compute copy and the remainders.
  Tensor master(const Stream& s) {
    if (!params.master_in_remainders()) return params.master_flat();
    Tensor out = Tensor::empty({params.total_numel()}, DType::kF32, s);
    ops::master_join(params.compute_flat(), params.remainder_flat(), out, s);
    return out;
  }
};

// Trains `a` and `b` on the same five batches.
void train_both(Context& ctx, const ModelConfig& m, Run& a, Run& b) {
  const int64_t B = 4, T = 256;
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(m.vocab_size) - 1);
  for (int step = 0; step < 5; ++step) {
    std::vector<int32_t> t(B * T), y(B * T);
    for (auto& v : t) v = tok(ctx.rng);
    for (auto& v : y) v = tok(ctx.rng);
    Tensor tokens = Tensor::from_vector(t, {B, T}).to(ctx.stream);
    Tensor targets = Tensor::from_vector(y, {B, T}).to(ctx.stream);
    a.step(ctx.stream, tokens, targets, 1e-3);
    b.step(ctx.stream, tokens, targets, 1e-3);
  }
  a.finish(ctx.stream);
  b.finish(ctx.stream);
}

// Losses, norms, masters, moments and compute copies of two runs, bitwise (the norms within norm_tol: a
// row-sparse embedding gradient sums its squares in another order).
void check_runs_equal(Context& ctx, Run& a, Run& b, const std::string& tag, double norm_tol = 0.0) {
  ctx.check("overlap", fmt::format("losses, 5 steps ({})", tag), Tensor::from_vector(a.losses, {5}),
            Tensor::from_vector(b.losses, {5}), 0.0);
  ctx.check("overlap", fmt::format("gradient norms, 5 steps ({})", tag), Tensor::from_vector(a.norms, {5}),
            Tensor::from_vector(b.norms, {5}), norm_tol);
  stream_sync(ctx.stream);
  fused::check_true(ctx, "overlap", fmt::format("master weights ({})", tag),
                    fused::bitwise_equal(a.master(ctx.stream), b.master(ctx.stream)), "bitwise");
  fused::check_true(ctx, "overlap", fmt::format("adam m, v ({})", tag),
                    fused::bitwise_equal(a.params.adam_m_flat(), b.params.adam_m_flat()) &&
                        fused::bitwise_equal(a.params.adam_v_flat(), b.params.adam_v_flat()),
                    "bitwise");
  fused::check_true(ctx, "overlap", fmt::format("bf16 compute copy ({})", tag),
                    fused::bitwise_equal(a.params.compute_flat(), b.params.compute_flat()), "bitwise");
  if (a.params.master_in_remainders() && b.params.master_in_remainders())
    fused::check_true(ctx, "overlap", fmt::format("i16 remainders ({})", tag),
                      fused::bitwise_equal(a.params.remainder_flat(), b.params.remainder_flat()), "bitwise");
}

void overlap_case(Context& ctx, int sm_reserve) {
  const ModelConfig m = overlap_model();
  OptimConfig oc;
  oc.weight_decay = 0.1;
  oc.adam_beta2 = 0.95;
  Run serial(ctx, m, oc, 0, false), overlapped(ctx, m, oc, sm_reserve, true);
  fused::check_true(ctx, "overlap", "masters in remainders (the CUDA default)",
                    serial.params.master_in_remainders() && overlapped.params.master_in_remainders());
  train_both(ctx, m, serial, overlapped);
  ops::reserve_gemm_sms(ctx.stream, 0);
  const std::string tag = sm_reserve == 0 ? "bitwise"
                                          : fmt::format("{} SMs reserved, released from region {}",
                                                        sm_reserve, overlapped.overlap->release_region());
  check_runs_equal(ctx, overlapped, serial, tag);
  // The chunked norm against the whole-buffer one (another summation order): f32 partials, so ~1e-7.
  ctx.check("overlap", "chunked gradient norm vs one sum_squares",
            Tensor::from_vector(std::vector<double>{serial.norms.back()}, {1}),
            Tensor::from_vector(std::vector<double>{serial.optim.grad_norm(ctx.stream)}, {1}), 1e-6);
}

// The two master layouts: a serial run with an f32 master buffer against the overlapped run in remainders
// (its deferred embedding lookup reads the pair), bitwise.
void layouts_case(Context& ctx) {
  const ModelConfig m = overlap_model();
  OptimConfig oc;
  oc.weight_decay = 0.1;
  oc.adam_beta2 = 0.95;
  Run f32(ctx, m, oc, 0, false, MasterStorage::kF32), rem(ctx, m, oc, 0, true, MasterStorage::kRemainders);
  train_both(ctx, m, f32, rem);
  check_runs_equal(ctx, rem, f32, "remainders + overlap vs f32 master, serial");
}

// An MoE model: the update writes each layer in pieces (train/update_pieces.h) and the forward waits per
// weight: the router, the experts' gate|up and down and the shared expert each read their own piece, and the
// router's expert bias (a no-decay entry read through master_f32) the first piece. Routing amplifies any
// weight read before its update into different losses.
void overlap_moe_case(Context& ctx) {
  ModelConfig m = overlap_model();
  m.num_layers = 2;
  m.moe.num_experts = 8;
  m.moe.topk = 2;
  m.moe.ffn_hidden_size = 2048;  // gate|up 33.5 M and down 16.8 M parameters per layer: pieces of their own
  m.moe.shared_ffn_hidden_size = 1024;
  m.moe.expert_bias = true;
  m.moe.layer_is_moe = {1, 1};
  OptimConfig oc;
  oc.weight_decay = 0.1;
  oc.adam_beta2 = 0.95;
  Run serial(ctx, m, oc, 0, false), overlapped(ctx, m, oc, 0, true);
  train_both(ctx, m, serial, overlapped);
  check_runs_equal(ctx, overlapped, serial, "MoE, update in pieces");
}

// The input embedding's gradient row-sparse (train/sparse_embedding.h): the overlapped run's deferred lookup
// reads the table's gradient through the slot map, its update the same, its norm the slot rows. Unclipped, a
// sparse overlapped run is bitwise a dense serial one (the norm only within f32 summation order); clipped, a
// sparse overlapped run is bitwise a sparse serial one (the same chunks in the same order).
void sparse_embedding_case(Context& ctx) {
  const ModelConfig m = overlap_model();
  OptimConfig oc;
  oc.weight_decay = 0.1;
  oc.adam_beta2 = 0.95;
  const int64_t rows = 4 * 256;  // train_both's tokens per step
  {
    Run dense(ctx, m, oc, 0, false), sparse(ctx, m, oc, 0, true, MasterStorage::kAuto, rows);
    dense.clip = sparse.clip = 0;
    fused::check_true(ctx, "overlap", "row-sparse embedding gradient in use",
                      sparse.params.sparse_entry() >= 0 && dense.params.sparse_entry() < 0);
    train_both(ctx, m, dense, sparse);
    check_runs_equal(ctx, sparse, dense, "row-sparse embedding + overlap vs dense serial, unclipped", 1e-6);
  }
  Run serial(ctx, m, oc, 0, false, MasterStorage::kAuto, rows),
      overlapped(ctx, m, oc, 0, true, MasterStorage::kAuto, rows);
  train_both(ctx, m, serial, overlapped);
  check_runs_equal(ctx, overlapped, serial, "row-sparse embedding, overlap vs serial, clipped");
}

}  // namespace

PRIMUS_GPU_TEST(overlap) {
  overlap_case(ctx, 0);
  overlap_case(ctx, 16);
  layouts_case(ctx);
  overlap_moe_case(ctx);
  sparse_embedding_case(ctx);
}

}  // namespace primus::gputest
