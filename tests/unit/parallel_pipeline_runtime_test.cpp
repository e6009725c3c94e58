// The pipeline runtime (parallel/pipeline_runtime.h) without ranks: every generated schedule of a grid runs
// on its channels (non-blocking sends, one FIFO per sender, receiver and kind) with each receive getting the
// message it expects, deliberately broken lists are caught, stage specs hold exactly their chunks' modules,
// and the model run as chunks (the runtime's building block) gives one process's losses and gradients
// bitwise.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <thread>

#include "model/llama_model.h"
#include "model_grad_util.h"
#include "parallel/pipeline_channels.h"
#include "parallel/pipeline_runtime.h"
#include "pipeline_test_util.h"
#include "unit/tcp_ranks.h"

namespace primus::parallel {
namespace {

Tensor random_ids(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab) - 1);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = tok(rng);
  return Tensor::from_vector(v, {2, n / 2});
}

// What a receiving stage gets: a copy of the sent tensor.
Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  c.copy_from(t, Stream::cpu());
  return c;
}

// Two models with the same weights (f32, CPU, gradients zeroed): one runs the reference, the other the
// pipeline's pieces.
struct TwinModels {
  ParamStore a, b;
  LlamaModel reference, piecewise;
  static ParamStore& ready(ParamStore& p, uint64_t seed) {
    p.allocate(DType::kF32, Stream::cpu());
    p.initialize(seed, Stream::cpu());
    p.begin_grad_step(Stream::cpu());
    return p;
  }
  TwinModels(const ModelConfig& cfg, uint64_t seed)
      : a(ModelSpec::from_config(cfg)),
        b(ModelSpec::from_config(cfg)),
        reference(cfg, RecomputeConfig{}, ready(a, seed), Stream::cpu(), 16),
        piecewise(cfg, RecomputeConfig{}, ready(b, seed), Stream::cpu(), 16) {}
};

using testing::joined;

TEST(PipelineRuntime, ChannelsSeparateSendersReceiversAndKinds) {
  // Interleaved over 2 ranks: activations 0 -> 1 and (the wrap to chunk 1) 1 -> 0, gradients the reverse.
  Schedule s = make_schedule(ScheduleKind::kInterleaved, {.pp = 2, .vpp = 2, .microbatches = 4});
  const std::vector<ChannelKey> ch = schedule_channels(s);
  ASSERT_EQ(ch.size(), 4u);
  EXPECT_EQ(ch[0], (ChannelKey{0, 1, ActionKind::kSendF}));
  EXPECT_EQ(ch[1], (ChannelKey{0, 1, ActionKind::kSendB}));
  EXPECT_EQ(ch[2], (ChannelKey{1, 0, ActionKind::kSendF}));
  EXPECT_EQ(ch[3], (ChannelKey{1, 0, ActionKind::kSendB}));
}

// A sent tensor is given back once its send has finished (at the next send), not held until the step's end:
// two tcp ranks, rank 0 sends 1F1B's first three activations, waits until the sender thread has sent them,
// then sends the fourth: at most that one is still held. Rank 1 receives all four, values intact.
TEST(PipelineRuntime, ChannelsGiveFinishedSendsBack) {
  const Schedule s = make_schedule(ScheduleKind::k1F1B, {.pp = 2, .microbatches = 4});
  auto actions = [&](int rank, ActionKind kind) {
    std::vector<Action> out;
    for (const Action& a : s.ranks[rank])
      if (a.kind == kind) out.push_back(a);
    return out;
  };
  comm::run_ranks(2, [&](comm::Communicator& c) {
    PipelineChannels ch(c, s, Stream::cpu());
    if (c.rank() == 0) {
      const std::vector<Action> sends = actions(0, ActionKind::kSendF);
      ASSERT_EQ(sends.size(), 4u);
      for (int m = 0; m < 3; ++m)
        ch.send(sends[m], Tensor::from_vector(std::vector<float>(5, float(m)), {5}));
      // (Up to 60 s: on a loaded 2-core CI machine the sender thread once needed more than 2 s.)
      for (int spin = 0; ch.held_sends() < 3 && spin < 600000; ++spin)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      ASSERT_EQ(ch.held_sends(), 3u);  // sent, not yet given back
      ch.send(sends[3], Tensor::from_vector(std::vector<float>(5, 3.0f), {5}));
      EXPECT_LE(ch.held_sends(), 1u);
      ch.finish();
      EXPECT_EQ(ch.held_sends(), 0u);
    } else {
      const std::vector<Action> recvs = actions(1, ActionKind::kRecvF);
      ASSERT_EQ(recvs.size(), 4u);
      for (int m = 0; m < 4; ++m) {
        Tensor t = Tensor::zeros({5}, DType::kF32);
        ch.recv(recvs[m], t);
        EXPECT_EQ(t.to_vector<float>(), std::vector<float>(5, float(m)));
      }
      ch.finish();
    }
  });
}

TEST(PipelineRuntime, EveryGeneratedScheduleRunsOnItsChannels) {
  int checked = 0;
  for (ScheduleKind kind : all_schedules()) {
    for (int pp : {2, 3, 4}) {
      for (int m : {1, 2, 3, 4, 5, 8, 9}) {
        const int vpp = kind == ScheduleKind::kInterleaved || kind == ScheduleKind::kZBV ? 2 : 1;
        Schedule s;
        try {
          s = make_schedule(kind, {.pp = pp, .vpp = vpp, .microbatches = m});
        } catch (const ConfigError&) {
          continue;  // a combination the schedule refuses (its own tests cover that)
        }
        EXPECT_EQ(joined(check_channels(s)), "")
            << schedule_name(kind) << " pp " << pp << " micro-batches " << m;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 60);
}

TEST(PipelineRuntime, ChannelCheckCatchesMessagesOutOfOrder) {
  Schedule s = make_schedule(ScheduleKind::kGPipe, {.pp = 2, .microbatches = 2});
  // Rank 1 expects micro-batch 1's activation before micro-batch 0's: the channel delivers 0 first.
  std::vector<Action>& r1 = s.ranks[1];
  auto first =
      std::find_if(r1.begin(), r1.end(), [](const Action& a) { return a.kind == ActionKind::kRecvF; });
  auto second =
      std::find_if(first + 1, r1.end(), [](const Action& a) { return a.kind == ActionKind::kRecvF; });
  ASSERT_NE(second, r1.end());
  std::swap(first->microbatch, second->microbatch);
  const std::string problems = joined(check_channels(s));
  EXPECT_NE(problems.find("rank 1 receives RECV_F(mb 1"), std::string::npos) << problems;
}

TEST(PipelineRuntime, ChannelCheckCatchesAWaitForever) {
  Schedule s = make_schedule(ScheduleKind::k1F1B, {.pp = 2, .microbatches = 2});
  // Rank 0 never sends micro-batch 1's activation: rank 1 waits for it forever.
  std::vector<Action>& r0 = s.ranks[0];
  r0.erase(std::find_if(r0.begin(), r0.end(),
                        [](const Action& a) { return a.kind == ActionKind::kSendF && a.microbatch == 1; }));
  EXPECT_NE(joined(check_channels(s)).find("rank 1 waits forever at RECV_F(mb 1"), std::string::npos);
}

TEST(PipelineRuntime, StageSpecsHoldTheirChunksModules) {
  ModelConfig cfg = grad_test::tiny_model(false, false, false);
  cfg.num_layers = 4;
  const ModelSpec whole = ModelSpec::from_config(cfg);
  PipelineSplitSpec split{.num_layers = 4, .pp = 2, .vpp = 2};
  const PipelineLayout layout = make_pipeline_layout(split);
  const ModelSpec r0 = stage_spec(whole, layout, 0), r1 = stage_spec(whole, layout, 1);
  EXPECT_EQ(r0.pipeline_modules(), "embedding + layers 0, 2");
  EXPECT_EQ(r1.pipeline_modules(), "layers 1, 3 + head");
  const ParamStore p0(r0), p1(r1), all(whole);
  EXPECT_GE(p0.find("embed_tokens.weight"), 0);
  EXPECT_LT(p0.find("lm_head.weight"), 0);
  EXPECT_LT(p0.find("layers.1.mlp.down_proj.weight"), 0);
  EXPECT_GE(p1.find("layers.3.mlp.down_proj.weight"), 0);
  EXPECT_GE(p1.find("norm.weight"), 0);
  // Every parameter on exactly one stage; the region numbering kept (empty regions where absent).
  EXPECT_EQ(p0.parameter_count() + p1.parameter_count(), all.parameter_count());
  EXPECT_EQ(p0.regions().size(), all.regions().size());
  EXPECT_TRUE(p0.split() && p1.split());
}

// The whole model's step against two stages chained by hand (stage 0: embedding + layers 0-1, stage 1: layer
// 2
// + head; what send / recv do between ranks), each model on its own store, on one batch of 32 random tokens.
struct TwoStages {
  std::unique_ptr<LlamaModel> whole, m0, m1;
  Tensor whole_losses;
  LlamaModel::ChunkState s0, s1;
};
TwoStages chain_two_stages(const ModelConfig& cfg, ParamStore& all, ParamStore& p0, ParamStore& p1,
                           uint64_t seed) {
  TwoStages t;
  t.whole = std::make_unique<LlamaModel>(cfg, RecomputeConfig{}, all, Stream::cpu(), 16);
  t.m0 = std::make_unique<LlamaModel>(cfg, RecomputeConfig{}, p0, Stream::cpu(), 16);
  t.m1 = std::make_unique<LlamaModel>(cfg, RecomputeConfig{}, p1, Stream::cpu(), 16);
  const Tensor tokens = random_ids(32, cfg.vocab_size, seed),
               targets = random_ids(32, cfg.vocab_size, seed + 1);
  t.whole_losses = t.whole->forward_backward(tokens, targets, 0.01f);
  const LlamaModel::Chunk c0{true, 0, 2, false}, c1{false, 2, 1, true};
  const Tensor x = t.m0->chunk_forward(c0, t.s0, Tensor(), tokens, targets, 0.01f);
  t.m1->chunk_forward(c1, t.s1, copy_of(x), tokens, targets, 0.01f);
  t.m0->chunk_backward(c0, t.s0, copy_of(t.m1->chunk_backward(c1, t.s1, Tensor())));
  return t;
}

// The two stages' gradients of the shared embedding add up to the whole model's (the same terms in another
// order), and neither alone is it.
void expect_stage_gradients_sum(const Tensor& g0_t, const Tensor& g1_t, const Tensor& whole_t) {
  const std::vector<float> g0 = g0_t.to_vector<float>(), g1 = g1_t.to_vector<float>();
  const std::vector<float> g = whole_t.to_vector<float>();
  double worst = 0, largest = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(g0[i]) + g1[i] - g[i]));
    largest = std::max(largest, std::abs(static_cast<double>(g[i])));
  }
  EXPECT_GT(largest, 0.0);
  EXPECT_LE(worst, 1e-6 * largest);
  EXPECT_NE(g0, g);
  EXPECT_NE(g1, g);
}

// Tied embeddings with the embedding and the head on different stages (Megatron's embedding group): the
// head's stage holds a copy of embed_tokens.weight in region 0, laid out and initialised as the embedding;
// the two stages chained by hand give the whole model's losses bitwise, and their two gradients of the weight
// add up to the whole model's (which the trainer's sum over the embedding group does).
TEST(PipelineRuntime, TiedEmbeddingsSplitOverStagesHoldAnEqualCopy) {
  ModelConfig cfg = grad_test::tiny_model(false, false, /*tied=*/true);
  cfg.num_layers = 3;
  const ModelSpec whole = ModelSpec::from_config(cfg);
  const ModelSpec first = whole.with_pipeline_share(true, {1, 1, 0}, false);
  const ModelSpec last = whole.with_pipeline_share(false, {0, 0, 1}, true);
  EXPECT_TRUE(first.tied_across_stages() && !first.holds_tied_copy());
  EXPECT_TRUE(last.tied_across_stages() && last.holds_tied_copy());
  EXPECT_FALSE(whole.with_pipeline_share(true, {1, 1, 1}, true).tied_across_stages());
  EXPECT_EQ(last.pipeline_modules(), "layers 2 + head (a copy of the tied embedding)");
  ParamStore p0(first), p1(last), all(whole);
  for (ParamStore* p : {&p0, &p1, &all}) TwinModels::ready(*p, 11);
  const int e0 = p0.find("embed_tokens.weight"), e1 = p1.find("embed_tokens.weight");
  ASSERT_GE(e1, 0);
  EXPECT_EQ(p1.entry(e1).region, 0);
  EXPECT_EQ(p0.regions()[0].end - p0.regions()[0].begin, p1.regions()[0].end - p1.regions()[0].begin);
  EXPECT_EQ(p0.param(e0).to_vector<float>(), p1.param(e1).to_vector<float>());
  EXPECT_EQ(p1.param(e1).to_vector<float>(), all.param("embed_tokens.weight").to_vector<float>());

  const TwoStages t = chain_two_stages(cfg, all, p0, p1, 5);
  EXPECT_EQ(t.whole_losses.to_vector<float>(), t.s1.losses.to_vector<float>());
  expect_stage_gradients_sum(p0.grad(e0), p1.grad(e1), all.grad("embed_tokens.weight"));
  EXPECT_EQ(p1.grad("layers.2.mlp.down_proj.weight").to_vector<float>(),
            all.grad("layers.2.mlp.down_proj.weight").to_vector<float>());
}

// Multi-token prediction split over stages (untied, as DeepSeek-V3): the depth goes with the head, whose
// stage also holds a copy of the embedding for the shifted tokens (ModelSpec::holds_tied_copy, the tied
// copy's mechanism). The stages chained by hand give the whole model's main and MTP losses and the depth's
// gradients bitwise, and their two gradients of the embedding add up to the whole model's.
TEST(PipelineRuntime, MtpDepthsGoWithTheHeadAndReadACopyOfTheEmbedding) {
  ModelConfig cfg = grad_test::tiny_model(false, false, /*tied=*/false);
  cfg.num_layers = 3;
  cfg.mtp_num_layers = 1;
  cfg.mtp_loss_scaling_factor = 0.3;
  const ModelSpec whole = ModelSpec::from_config(cfg);
  const ModelSpec first = whole.with_pipeline_share(true, {1, 1, 0}, false);
  const ModelSpec last = whole.with_pipeline_share(false, {0, 0, 1}, true);
  EXPECT_TRUE(first.tied_across_stages() && !first.holds_tied_copy());
  EXPECT_TRUE(last.holds_tied_copy());
  EXPECT_EQ(first.local_mtp_layers(), 0);
  EXPECT_EQ(last.local_mtp_layers(), 1);
  EXPECT_EQ(last.pipeline_modules(), "layers 2 + head (+ a copy of the embedding) + 1 MTP layer");
  ParamStore p0(first), p1(last), all(whole);
  for (ParamStore* p : {&p0, &p1, &all}) TwinModels::ready(*p, 13);
  EXPECT_LT(p0.find("mtp.0.eh_proj.weight"), 0);
  EXPECT_GE(p1.find("mtp.0.eh_proj.weight"), 0);
  EXPECT_GE(p1.find("lm_head.weight"), 0);
  const int e0 = p0.find("embed_tokens.weight"), e1 = p1.find("embed_tokens.weight");
  ASSERT_GE(e1, 0);
  EXPECT_EQ(p1.entry(e1).region, 0);
  // Every parameter on one stage, the embedding on both.
  EXPECT_EQ(p0.parameter_count() + p1.parameter_count(), all.parameter_count() + p0.param(e0).numel());
  EXPECT_EQ(p1.param(e1).to_vector<float>(), all.param("embed_tokens.weight").to_vector<float>());

  const TwoStages t = chain_two_stages(cfg, all, p0, p1, 7);
  EXPECT_EQ(t.whole_losses.to_vector<float>(), t.s1.losses.to_vector<float>());
  ASSERT_EQ(t.s1.mtp_losses.size(), 1u);
  EXPECT_EQ(t.s1.mtp_losses[0].to_vector<float>(), t.whole->mtp_losses()[0].to_vector<float>());
  EXPECT_EQ(t.s1.mtp_counts, t.whole->mtp_counts());
  EXPECT_TRUE(t.s0.mtp_losses.empty());
  for (const char* n : {"mtp.0.eh_proj.weight", "mtp.0.enorm.weight", "mtp.0.layer.mlp.down_proj.weight",
                        "lm_head.weight", "layers.2.self_attn.qkv_proj.weight"})
    EXPECT_EQ(p1.grad(n).to_vector<float>(), all.grad(n).to_vector<float>()) << n;
  // The shifted tokens' rows are the copy's; the two stages' gradients add up to the whole model's.
  expect_stage_gradients_sum(p0.grad(e0), p1.grad(e1), all.grad("embed_tokens.weight"));
}

// Two chunks of one process chained by hand (what two stages do through send / recv) against the whole
// model's forward_backward: the same losses and gradients, bitwise (the same kernels in the same order).
TEST(PipelineRuntime, ChunksChainedGiveTheWholeModelsStepBitwise) {
  ModelConfig cfg = grad_test::tiny_model(true, true, false);
  cfg.num_layers = 3;
  TwinModels m(cfg, 7);
  LlamaModel &whole = m.reference, &chunked = m.piecewise;
  const Tensor tokens = random_ids(32, cfg.vocab_size, 3), targets = random_ids(32, cfg.vocab_size, 4);
  const Tensor la = whole.forward_backward(tokens, targets, 0.01f);
  const LlamaModel::Chunk first{true, 0, 2, false}, second{false, 2, 1, true};
  LlamaModel::ChunkState s1, s2;
  const Tensor x = chunked.chunk_forward(first, s1, Tensor(), tokens, targets, 0.01f);
  EXPECT_EQ(x.shape(), chunked.chunk_io_shape(tokens));
  chunked.chunk_forward(second, s2, copy_of(x), tokens, targets, 0.01f);
  const Tensor dx = chunked.chunk_backward(second, s2, Tensor());
  EXPECT_FALSE(chunked.chunk_backward(first, s1, copy_of(dx)).defined());
  EXPECT_EQ(la.to_vector<float>(), s2.losses.to_vector<float>());
  EXPECT_EQ(m.a.grad_flat().to_vector<float>(), m.b.grad_flat().to_vector<float>());
}

// Zero-bubble's split backward: the input-gradient pass leaves the projections' weight gradients to the
// queue (their gradients still zero, the norms' already there), the weight-gradient pass fills them, and the
// result is bitwise the one-pass backward's -- for the packed-QKV and the multi-latent attention.
TEST(PipelineRuntime, DeferredWeightGradientsEqualTheOnePassBackward) {
  for (const ModelConfig& cfg : {grad_test::tiny_model(true, true, false), grad_test::tiny_mla(8, false)}) {
    TwinModels m(cfg, 11);
    LlamaModel &one = m.reference, &split = m.piecewise;
    ParamStore &a = m.a, &b = m.b;
    const Tensor tokens = random_ids(32, cfg.vocab_size, 5), targets = random_ids(32, cfg.vocab_size, 6);
    one.forward_backward(tokens, targets, 0.01f);
    LlamaModel::ChunkState st;
    split.chunk_forward(split.whole_model(), st, Tensor(), tokens, targets, 0.01f);
    split.chunk_backward(split.whole_model(), st, Tensor(), /*defer_weight_grads=*/true);
    EXPECT_FALSE(st.wgrad.empty());
    const int o = b.find("layers.1.self_attn.o_proj.weight"), n1 = b.find("layers.1.input_layernorm.weight");
    auto sum_abs = [&](int i) {
      double s = 0;
      for (float v : b.grad(i).to_vector<float>()) s += std::abs(v);
      return s;
    };
    EXPECT_EQ(sum_abs(o), 0.0) << "the o projection's gradient was computed in the input-gradient pass";
    EXPECT_GT(sum_abs(n1), 0.0);
    split.chunk_weight_grad(st);
    EXPECT_TRUE(st.wgrad.empty());
    EXPECT_GT(sum_abs(o), 0.0);
    EXPECT_EQ(a.grad_flat().to_vector<float>(), b.grad_flat().to_vector<float>()) << b.spec().describe();
  }
}

// The region hooks under the split backward (what FSDP's reduce-scatter relies on): the input-gradient pass
// tells each decoder layer's region backward_deferred instead of after_backward, and the weight-gradient pass
// calls after_backward(region) once that region's queued GEMMs have run, so that at that call the region's
// gradient is already the one-pass backward's, bitwise. The embedding (not deferred) hears after_backward in
// the input-gradient pass.
TEST(PipelineRuntime, DeferredRegionsHearAfterBackwardOnceTheirWeightGradientsRan) {
  const ModelConfig cfg = grad_test::tiny_model(true, true, false);
  TwinModels m(cfg, 13);
  const Tensor tokens = random_ids(32, cfg.vocab_size, 7), targets = random_ids(32, cfg.vocab_size, 8);
  m.reference.forward_backward(tokens, targets, 0.01f);
  struct Recorder : ParamHooks {
    ParamStore *whole = nullptr, *split = nullptr;
    std::vector<std::string> events;
    int incomplete = 0;  // after_backward calls that found a gradient of the region not yet final
    void before_forward(int r) override {}
    void after_forward(int r) override {}
    void before_backward(int r) override {}
    void backward_deferred(int r) override { events.push_back(fmt::format("deferred {}", r)); }
    void after_backward(int r) override {
      events.push_back(fmt::format("after {}", r));
      for (int i = 0; i < static_cast<int>(split->entries().size()); ++i)
        if (split->region_of_entry(i) == r && split->grad(i).defined() &&
            split->grad(i).to_vector<float>() != whole->grad(i).to_vector<float>())
          ++incomplete;
    }
  } rec;
  rec.whole = &m.a;
  rec.split = &m.b;
  m.piecewise.set_hooks(&rec);
  LlamaModel::ChunkState st;
  const LlamaModel::Chunk all = m.piecewise.whole_model();
  m.piecewise.chunk_forward(all, st, Tensor(), tokens, targets, 0.01f);
  const int L = static_cast<int>(cfg.num_layers), head = L + 1;
  EXPECT_EQ(rec.events, std::vector<std::string>{fmt::format("after {}", head)}) << "the head runs in F";
  rec.events.clear();
  m.piecewise.chunk_backward(all, st, Tensor(), /*defer_weight_grads=*/true);
  std::vector<std::string> bi, bw;
  for (int r = L; r >= 1; --r) {
    bi.push_back(fmt::format("deferred {}", r));
    bw.push_back(fmt::format("after {}", r));
  }
  bi.push_back("after 0");
  EXPECT_EQ(joined(rec.events), joined(bi));
  rec.events.clear();
  m.piecewise.chunk_weight_grad(st);
  EXPECT_EQ(joined(rec.events), joined(bw));
  EXPECT_EQ(rec.incomplete, 0) << "a region heard after_backward before its weight gradients were written";
  m.piecewise.set_hooks(nullptr);
}

}  // namespace
}  // namespace primus::parallel
