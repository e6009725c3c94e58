// Tensor parallelism on the CPU (model/param_store.h EntrySlice, parallel/tensor_parallel.h,
// parallel/split_state.h): each tp rank's store initialises bitwise as its part of the one-rank model
// (checked against index arithmetic written out here, not against EntrySlice); a tiny model split over 2
// ranks of a tcp world, with and without sequence parallelism, computes in f64 the one-rank losses and, after
// the tp sum of partial gradients, each rank's part of the one-rank gradients; gathering the parts gives back
// the whole model; refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <tuple>

#include "config/not_supported.h"
#include "model/llama_model.h"
#include "model/param_store.h"
#include "parallel/split_state.h"
#include "parallel/tensor_parallel.h"
#include "unit/model_grad_util.h"
#include "unit/split_test_util.h"
#include "unit/tcp_ranks.h"

using namespace primus;

namespace {

ModelConfig tiny(bool qk_norm, bool bias, bool tied) {
  ModelConfig m = grad_test::tiny_model(qk_norm, bias, tied);
  m.vocab_size = m.padded_vocab_size = 24;  // divisible by the tp degrees below
  return m;
}

// Rows of a [rows, cols] tensor (row-major values), as the expected part of a whole tensor.
std::vector<double> rows_of(const std::vector<double>& t, int64_t cols, int64_t first, int64_t n) {
  return std::vector<double>(t.begin() + first * cols, t.begin() + (first + n) * cols);
}
std::vector<double> cols_of(const std::vector<double>& t, int64_t cols, int64_t first, int64_t n) {
  std::vector<double> out;
  for (size_t r = 0; r < t.size() / cols; ++r)
    out.insert(out.end(), t.begin() + r * cols + first, t.begin() + r * cols + first + n);
  return out;
}
std::vector<double> cat(std::initializer_list<std::vector<double>> parts) {
  std::vector<double> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Rank `rank`'s expected part of entry `name` of the whole model (TP `T`): Megatron's column- and
// row-parallel splits of the packed projections.
std::vector<double> expected_part(ParamStore& whole, const std::string& name, int T, int rank) {
  const ModelSpec& s = whole.spec();
  const std::vector<double> w = whole.master(whole.find(name)).to_vector<double>();
  // Fewer kv heads than ranks: rank r keeps kv head r / (T / KV), the one its q heads read.
  const int64_t kv_ranks = std::min<int64_t>(T, s.kv_heads), kv_rank = rank * kv_ranks / T;
  const int64_t d = s.hidden, q = s.q_dim() / T, kv = s.kv_dim() / kv_ranks, f = s.ffn / T, v = s.vocab / T;
  auto ends_with = [&](const char* suffix) {
    return name.size() >= std::strlen(suffix) &&
           name.compare(name.size() - std::strlen(suffix), std::string::npos, suffix) == 0;
  };
  if (ends_with("qkv_proj.weight") || ends_with("qkv_proj.bias")) {
    const int64_t c = ends_with("weight") ? d : 1;
    return cat({rows_of(w, c, rank * q, q), rows_of(w, c, s.q_dim() + kv_rank * kv, kv),
                rows_of(w, c, s.q_dim() + s.kv_dim() + kv_rank * kv, kv)});
  }
  if (ends_with("o_proj.weight")) return cols_of(w, s.q_dim(), rank * q, q);
  if (ends_with("gate_up_proj.weight"))
    return cat({rows_of(w, d, rank * f, f), rows_of(w, d, s.ffn + rank * f, f)});
  if (ends_with("down_proj.weight")) return cols_of(w, s.ffn, rank * f, f);
  if (name == "embed_tokens.weight" || name == "lm_head.weight") return rows_of(w, d, rank * v, v);
  return w;  // norms: whole on every rank
}

}  // namespace

TEST(TensorParallelStore, SharesInitialiseAsMegatronSplitsOfTheWholeModel) {
  for (auto [T, groups] : {std::pair{2, 2}, std::pair{4, 4}, std::pair{4, 2}, std::pair{4, 1}}) {
    SCOPED_TRACE(fmt::format("tp {} kv heads {}", T, groups));
    ModelConfig cfg = tiny(/*qk_norm=*/true, /*bias=*/true, /*tied=*/false);
    cfg.num_query_groups = groups;  // 2 and 1 at TP 4: kv heads replicated over 2 and 4 ranks
    const ModelSpec spec = ModelSpec::from_config(cfg);
    ParamStore whole(spec);
    whole.allocate(DType::kF64, Stream::cpu(), DType::kF64);
    whole.initialize(11, Stream::cpu());
    for (int rank = 0; rank < T; ++rank) {
      ParamStore share(spec.with_tensor_shard(T, rank, /*sequence_parallel=*/true));
      share.allocate(DType::kF64, Stream::cpu(), DType::kF64);
      share.initialize(11, Stream::cpu());
      ASSERT_EQ(share.entries().size(), whole.entries().size());
      for (int i = 0; i < static_cast<int>(share.entries().size()); ++i) {
        const ParamEntry& e = share.entry(i);
        EXPECT_EQ(share.master(i).to_vector<double>(), expected_part(whole, e.name, T, rank))
            << "tp " << T << " rank " << rank << " " << e.name;
        // Whole tensors whose gradient each rank computes a part of: norms (sequence parallel), q/k-norm;
        // replicated key/value rows, over the ranks sharing the head.
        const bool norm = e.name.find("norm") != std::string::npos;
        const bool qkv = e.name.find("qkv_proj") != std::string::npos;
        EXPECT_EQ(e.slice.whole(), norm) << e.name;
        if (norm) {
          EXPECT_EQ(e.tp_sum.count, e.numel) << e.name;
          EXPECT_FALSE(e.tp_sum.kv_group) << e.name;
        } else if (qkv && groups < T) {
          const int64_t c = e.cols();
          EXPECT_EQ(e.tp_sum.first, spec.q_dim() / T * c) << e.name;
          EXPECT_EQ(e.tp_sum.count, 2 * spec.head_dim * c) << e.name;
          EXPECT_TRUE(e.tp_sum.kv_group) << e.name;
        } else {
          EXPECT_EQ(e.tp_sum.count, 0) << e.name;
        }
      }
    }
  }
}

// Each rank of a tcp world trains one micro-batch of the split model; losses equal the whole model's and
// every rank's gradients its part of the whole model's (f64: only rounding differs).
TEST(TensorParallelStore, SplitModelComputesTheWholeModelsLossesAndGradients) {
  // (tp, sequence parallel, tied, kv heads): TP 4 with 2 kv heads shares each over 2 ranks.
  for (const auto& [T, sp, tied, groups] :
       {std::tuple{2, false, false, 2}, std::tuple{2, false, true, 2}, std::tuple{2, true, false, 2},
        std::tuple{2, true, true, 2}, std::tuple{4, true, false, 2}, std::tuple{4, false, true, 1}}) {
    {
      SCOPED_TRACE(fmt::format("tp {} sequence_parallel {} tied {} kv heads {}", T, sp, tied, groups));
      ModelConfig cfg = tiny(/*qk_norm=*/true, /*bias=*/true, tied);
      cfg.num_query_groups = groups;
      const ModelSpec spec = ModelSpec::from_config(cfg);
      RecomputeConfig rc;
      rc.granularity = sp ? "full" : "";
      rc.method = sp ? "uniform" : "";
      ParamStore whole(spec);
      whole.allocate(DType::kF64, Stream::cpu(), DType::kF64);
      whole.initialize(5, Stream::cpu());
      split_test::perturb(whole);
      LlamaModel model(cfg, rc, whole, Stream::cpu(), 8);
      std::vector<int32_t> tv, yv;
      for (int i = 0; i < 16; ++i) {
        tv.push_back((i * 7 + 3) % 24);
        yv.push_back(i == 5 ? -1 : (i * 11 + 1) % 24);  // one ignored target
      }
      const Tensor tokens = Tensor::from_vector(tv, {2, 8}), targets = Tensor::from_vector(yv, {2, 8});
      whole.grad_flat().zero_(Stream::cpu());
      const std::vector<double> ref_losses =
          model.forward_backward(tokens, targets, 0.25f).to_vector<double>();

      std::mutex mu;
      comm::run_ranks(T, [&](comm::Communicator& c) {
        ParamStore local(spec.with_tensor_shard(T, c.rank(), sp));
        local.allocate(DType::kF64, Stream::cpu(), DType::kF64);
        local.initialize(5, Stream::cpu());
        split_test::perturb(local);
        LlamaModel m(cfg, rc, local, Stream::cpu(), 8);
        parallel::TensorParallel tp(c, sp, local.tensor_shard().kv_replicas);
        m.set_tensor_parallel(&tp);
        local.grad_flat().zero_(Stream::cpu());
        const std::vector<double> losses = m.forward_backward(tokens, targets, 0.25f).to_vector<double>();
        tp.sum_partial_grads(local, parallel::TensorParallel::whole_grads(local), Stream::cpu());
        std::lock_guard<std::mutex> lock(mu);
        ASSERT_EQ(losses.size(), ref_losses.size());
        for (size_t i = 0; i < losses.size(); ++i)
          EXPECT_NEAR(losses[i], ref_losses[i], 1e-12 * (1 + std::abs(ref_losses[i]))) << "token " << i;
        split_test::expect_grad_parts(local, whole, 1e-11, "rank " + std::to_string(c.rank()));
      });
    }
  }
}

// Async TP (tp_comm_overlap) computes the projections on row ranges around sliced collectives: the same
// sums in the same order per element, so losses and gradients equal the plain sequence-parallel run's bitwise
// (f64, TP 2 and 4, 16 tokens: at TP 4 each rank's 4 rows go in 2 slices of 2; qkv bias and q/k-norm on;
// without and with selective recomputation, whose recomputed norms gather again).
TEST(TensorParallelStore, AsyncTpGivesThePlainSequenceParallelResultsBitwise) {
  for (const auto& [T, selective] : {std::pair{2, false}, std::pair{4, false}, std::pair{2, true}}) {
    SCOPED_TRACE(fmt::format("tp {} selective recompute {}", T, selective));
    ModelConfig cfg = tiny(/*qk_norm=*/true, /*bias=*/true, /*tied=*/false);
    cfg.num_query_groups = 2;
    const ModelSpec spec = ModelSpec::from_config(cfg);
    RecomputeConfig rc;
    rc.granularity = selective ? "selective" : "";
    std::vector<int32_t> tv, yv;
    for (int i = 0; i < 16; ++i) {
      tv.push_back((i * 5 + 1) % 24);
      yv.push_back((i * 13 + 7) % 24);
    }
    const Tensor tokens = Tensor::from_vector(tv, {2, 8}), targets = Tensor::from_vector(yv, {2, 8});
    std::mutex mu;
    std::vector<std::vector<double>> losses(2 * T), grads(2 * T);
    for (bool overlap : {false, true}) {
      comm::run_ranks(T, [&](comm::Communicator& c) {
        ParamStore local(spec.with_tensor_shard(T, c.rank(), /*sequence_parallel=*/true));
        local.allocate(DType::kF64, Stream::cpu(), DType::kF64);
        local.initialize(9, Stream::cpu());
        split_test::perturb(local);
        LlamaModel m(cfg, rc, local, Stream::cpu(), 8);
        parallel::TensorParallel tp(c, /*sequence_parallel=*/true, local.tensor_shard().kv_replicas);
        tp.set_overlap(overlap);
        EXPECT_EQ(tp.overlap(), overlap);
        m.set_tensor_parallel(&tp);
        local.grad_flat().zero_(Stream::cpu());
        std::vector<double> l = m.forward_backward(tokens, targets, 0.5f).to_vector<double>();
        tp.sum_partial_grads(local, parallel::TensorParallel::whole_grads(local), Stream::cpu());
        std::lock_guard<std::mutex> lock(mu);
        losses[overlap * T + c.rank()] = std::move(l);
        grads[overlap * T + c.rank()] = local.grad_flat().to_vector<double>();
      });
    }
    for (int r = 0; r < T; ++r) {
      ASSERT_FALSE(losses[r].empty());
      EXPECT_EQ(losses[T + r], losses[r]) << "rank " << r;
      EXPECT_EQ(grads[T + r], grads[r]) << "rank " << r;
    }
  }
}

TEST(TensorParallelStore, AsyncTpNeedsSequenceParallelism) {
  comm::run_ranks(2, [&](comm::Communicator& c) {
    parallel::TensorParallel tp(c, /*sequence_parallel=*/false);
    EXPECT_THROW(tp.set_overlap(true), Error);
    tp.set_overlap(false);
  });
}

// Splitting the whole model's state into the tp ranks' shares and gathering them back is the identity
// (master weights and both moments); a rank's share is its part.
TEST(TensorParallelStore, ShareAndGatherRoundTripTheWholeModelState) {
  const ModelConfig cfg = tiny(/*qk_norm=*/true, /*bias=*/true, /*tied=*/false);
  const ModelSpec spec = ModelSpec::from_config(cfg);
  ParamStore whole(spec);
  whole.allocate(DType::kF32, Stream::cpu());
  whole.initialize(3, Stream::cpu());
  std::vector<float> m(whole.total_numel()), v(whole.total_numel());
  for (size_t i = 0; i < m.size(); ++i) {
    m[i] = 0.001f * static_cast<float>(i);
    v[i] = 2.0f + 0.001f * static_cast<float>(i);
  }
  whole.adam_m_flat().copy_from(Tensor::from_vector(m, {whole.total_numel()}), Stream::cpu());
  whole.adam_v_flat().copy_from(Tensor::from_vector(v, {whole.total_numel()}), Stream::cpu());
  std::mutex mu;
  comm::run_ranks(2, [&](comm::Communicator& c) {
    ParamStore share(spec.with_tensor_shard(2, c.rank(), false));
    share.allocate(DType::kF32, Stream::cpu());
    parallel::take_split_share(whole, share);
    ParamStore back(spec);
    back.allocate(DType::kF32, Stream::cpu(), DType::kF32, MasterStorage::kF32);
    parallel::gather_split_state(share, Stream::cpu(), c, Stream::cpu(), back);
    std::lock_guard<std::mutex> lock(mu);
    for (int i = 0; i < static_cast<int>(whole.entries().size()); ++i) {
      const ParamEntry& e = whole.entry(i);
      const int j = back.find(e.name);
      EXPECT_EQ(back.master(j).to_vector<float>(), whole.master(i).to_vector<float>()) << e.name;
      const ParamEntry& b = back.entry(j);
      EXPECT_EQ(back.adam_m_flat().slice(b.offset, b.offset + b.numel).to_vector<float>(),
                std::vector<float>(m.begin() + e.offset, m.begin() + e.offset + e.numel))
          << e.name;
      EXPECT_EQ(back.adam_v_flat().slice(b.offset, b.offset + b.numel).to_vector<float>(),
                std::vector<float>(v.begin() + e.offset, v.begin() + e.offset + e.numel))
          << e.name;
    }
  });
}

// Multi-latent attention (DeepSeek): q / q_b and kv_b rows and o_proj columns split by heads, the low-rank
// down-projections and their norms whole with gradients summed over tp.
TEST(TensorParallelStore, SplitMlaModelComputesTheWholeModelsLossesAndGradients) {
  for (const auto& [q_lora, sp] : {std::pair<int64_t, bool>{6, true}, std::pair<int64_t, bool>{0, false}}) {
    SCOPED_TRACE(fmt::format("q_lora_rank {} sequence_parallel {}", q_lora, sp));
    ModelConfig cfg = grad_test::tiny_mla(q_lora, /*tied=*/false);
    cfg.vocab_size = cfg.padded_vocab_size = 24;  // divisible by tp
    const ModelSpec spec = ModelSpec::from_config(cfg);
    RecomputeConfig rc;
    ParamStore whole(spec);
    whole.allocate(DType::kF64, Stream::cpu(), DType::kF64);
    whole.initialize(13, Stream::cpu());
    split_test::perturb(whole);
    LlamaModel model(cfg, rc, whole, Stream::cpu(), 8);
    std::vector<int32_t> tv, yv;
    for (int i = 0; i < 16; ++i) {
      tv.push_back((i * 5 + 2) % 24);
      yv.push_back(i == 9 ? -1 : (i * 13 + 4) % 24);
    }
    const Tensor tokens = Tensor::from_vector(tv, {2, 8}), targets = Tensor::from_vector(yv, {2, 8});
    whole.grad_flat().zero_(Stream::cpu());
    const std::vector<double> ref = model.forward_backward(tokens, targets, 0.25f).to_vector<double>();
    std::mutex mu;
    comm::run_ranks(2, [&](comm::Communicator& c) {
      ParamStore local(spec.with_tensor_shard(2, c.rank(), sp));
      local.allocate(DType::kF64, Stream::cpu(), DType::kF64);
      local.initialize(13, Stream::cpu());
      split_test::perturb(local);
      LlamaModel m(cfg, rc, local, Stream::cpu(), 8);
      parallel::TensorParallel tp(c, sp);
      m.set_tensor_parallel(&tp);
      local.grad_flat().zero_(Stream::cpu());
      const std::vector<double> losses = m.forward_backward(tokens, targets, 0.25f).to_vector<double>();
      tp.sum_partial_grads(local, parallel::TensorParallel::whole_grads(local), Stream::cpu());
      std::lock_guard<std::mutex> lock(mu);
      for (size_t i = 0; i < losses.size(); ++i)
        EXPECT_NEAR(losses[i], ref[i], 1e-12 * (1 + std::abs(ref[i]))) << "token " << i;
      split_test::expect_grad_parts(local, whole, 1e-11, "rank " + std::to_string(c.rank()));
    });
  }
}

TEST(TensorParallelStore, RefusesWhatDoesNotSplit) {
  const ModelSpec spec = ModelSpec::from_config(tiny(false, false, false));  // 4 heads, 2 kv heads, ffn 24
  EXPECT_THROW(spec.with_tensor_shard(3, 0, false), Error);                  // heads
  EXPECT_THROW(spec.with_tensor_shard(3, 0, false), Error);          // kv heads neither split nor share
  EXPECT_EQ(spec.with_tensor_shard(4, 3, false).tp.kv_replicas, 2);  // 2 kv heads over 4 ranks
  EXPECT_THROW(spec.with_tensor_shard(2, 2, false), Error);          // rank outside the split
  ModelConfig moe = tiny(false, false, false);
  moe.moe.num_experts = 4;
  moe.moe.topk = 2;
  moe.moe.ffn_hidden_size = 8;
  moe.moe.layer_is_moe = {1, 1};
  // MoE: every expert's hidden columns split (expert TP = TP): rank 1 of 2 holds rows [4, 8) of each expert's
  // gate and up halves and columns [4, 8) of its down projection.
  const ModelSpec moe_split = ModelSpec::from_config(moe).with_tensor_shard(2, 1, true);
  EXPECT_EQ(moe_split.moe.ffn_hidden_size, 4);
  ParamStore experts(moe_split);
  const ParamEntry& gu = experts.entry(experts.find("layers.0.mlp.experts.gate_up_proj.weight"));
  EXPECT_EQ(gu.shape, (Shape{4, 8, moe.hidden_size}));
  ASSERT_EQ(gu.slice.row_blocks.size(), 8u);  // a gate and an up block per expert
  EXPECT_EQ(gu.slice.row_blocks[0], (std::pair<int64_t, int64_t>{4, 4}));
  EXPECT_EQ(gu.slice.row_blocks[1], (std::pair<int64_t, int64_t>{12, 4}));
  EXPECT_EQ(gu.slice.row_blocks[2], (std::pair<int64_t, int64_t>{20, 4}));  // expert 1's gate rows
  const ParamEntry& down = experts.entry(experts.find("layers.0.mlp.experts.down_proj.weight"));
  EXPECT_EQ(down.slice.col_begin, 4);
  EXPECT_EQ(down.slice.whole_cols, 8);
  EXPECT_TRUE(experts.entry(experts.find("layers.0.mlp.router.weight")).slice.whole());
  moe.moe.ffn_hidden_size = 6;  // not divisible by 4
  EXPECT_THROW(ModelSpec::from_config(moe).with_tensor_shard(4, 0, false), Error);
  moe.moe.ffn_hidden_size = 8;
  // Multi-token prediction: the depth's layer splits like a main layer; eh_proj (2d -> d) stays whole on
  // every rank, and under sequence parallelism its gradient and the depth's norms' are partial (summed over
  // tp).
  moe.mtp_num_layers = 1;
  for (const bool sp : {true, false}) {
    ParamStore mtp(ModelSpec::from_config(moe).with_tensor_shard(2, 1, sp));
    const ParamEntry& eh = mtp.entry(mtp.find("mtp.0.eh_proj.weight"));
    EXPECT_TRUE(eh.slice.whole());
    EXPECT_EQ(eh.shape, (Shape{moe.hidden_size, 2 * moe.hidden_size}));
    for (const char* n : {"mtp.0.eh_proj.weight", "mtp.0.enorm.weight", "mtp.0.hnorm.weight",
                          "mtp.0.final_layernorm.weight", "mtp.0.layer.input_layernorm.weight"})
      EXPECT_EQ(mtp.entry(mtp.find(n)).tp_sum.count, sp ? mtp.entry(mtp.find(n)).numel : 0) << n;
    EXPECT_EQ(mtp.entry(mtp.find("mtp.0.layer.mlp.experts.down_proj.weight")).slice.col_begin, 4);
  }
  // A model refuses a tensor-parallel group that does not match its store's split.
  ParamStore share(spec.with_tensor_shard(2, 1, false));
  share.allocate(DType::kF32, Stream::cpu());
  RecomputeConfig rc;
  LlamaModel model(tiny(false, false, false), rc, share, Stream::cpu(), 16);
  EXPECT_EQ(model.spec().heads, 2);
  EXPECT_EQ(model.spec().vocab_begin(), 12);
  EXPECT_THROW(model.set_tensor_parallel(nullptr), Error);
}
