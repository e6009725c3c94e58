// Context parallelism on the CPU (parallel/context_parallel.h): a tiny model whose sequences are split over 2
// or 4 ranks of a tcp world (each rank holding chunks i and 2·CP−1−i), also combined with TP 2, computes in
// f64 every token's loss of the one-rank model, and its gradients summed over the cp ranks are the one-rank
// gradients; the chunk-major token layout; refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <tuple>

#include "config/not_supported.h"
#include "model/llama_model.h"
#include "model/param_store.h"
#include "parallel/context_parallel.h"
#include "parallel/tensor_parallel.h"
#include "unit/model_grad_util.h"
#include "unit/split_test_util.h"
#include "unit/tcp_ranks.h"

using namespace primus;

namespace {

ModelConfig tiny(bool tied) {
  ModelConfig m = grad_test::tiny_model(/*qk_norm=*/true, /*qkv_bias=*/true, tied);
  m.vocab_size = m.padded_vocab_size = 24;
  return m;
}

}  // namespace

TEST(ContextParallel, LocalTokensAreTheRanksChunksChunkMajor) {
  std::vector<int32_t> v(2 * 16);
  for (int i = 0; i < 32; ++i) v[i] = i;
  const Tensor full = Tensor::from_vector(v, {2, 16});
  comm::run_ranks(4, [&](comm::Communicator& c) {
    parallel::ContextParallel cp(c);
    const std::vector<int32_t> local = cp.local_tokens(full).to_vector<int32_t>();
    ASSERT_EQ(local.size(), 8u);  // [2B = 4, C = 2]
    for (int h = 0; h < 2; ++h)
      for (int b = 0; b < 2; ++b)
        for (int t = 0; t < 2; ++t)
          EXPECT_EQ(local[(h * 2 + b) * 2 + t], b * 16 + cp.chunk(h) * 2 + t) << "rank " << c.rank();
    EXPECT_EQ(cp.chunk(0), c.rank());
    EXPECT_EQ(cp.chunk(1), 7 - c.rank());
  });
}

// (cp, tp, sequence parallel, full recomputation, tied)
TEST(ContextParallel, SplitSequencesComputeTheWholeModelsLossesAndGradients) {
  for (const auto& [CP, TP, sp, full, tied] :
       {std::tuple{2, 1, false, false, false}, std::tuple{2, 1, false, true, true},
        std::tuple{4, 1, false, false, true}, std::tuple{2, 2, true, false, false}}) {
    SCOPED_TRACE(fmt::format("cp {} tp {} sp {} full recompute {} tied {}", CP, TP, sp, full, tied));
    const ModelConfig cfg = tiny(tied);
    const ModelSpec spec = ModelSpec::from_config(cfg);
    RecomputeConfig rc;
    rc.granularity = full ? "full" : "";
    rc.method = full ? "uniform" : "";
    const int64_t B = 2, T = 16;
    ParamStore whole(spec);
    whole.allocate(DType::kF64, Stream::cpu(), DType::kF64);
    whole.initialize(9, Stream::cpu());
    split_test::perturb(whole);
    LlamaModel model(cfg, rc, whole, Stream::cpu(), T);
    std::vector<int32_t> tv, yv;
    for (int i = 0; i < B * T; ++i) {
      tv.push_back((i * 7 + 3) % 24);
      yv.push_back(i == 5 || i == 22 ? -1 : (i * 11 + 1) % 24);  // ignored targets
    }
    const Tensor tokens = Tensor::from_vector(tv, {B, T}), targets = Tensor::from_vector(yv, {B, T});
    whole.grad_flat().zero_(Stream::cpu());
    const std::vector<double> ref = model.forward_backward(tokens, targets, 0.5f).to_vector<double>();

    std::mutex mu;
    comm::run_ranks(CP * TP, [&](comm::Communicator& world) {
      // TP innermost (consecutive ranks), as ParallelDims orders them.
      const int r = world.rank(), tr = r % TP, cr = r / TP;
      auto cp_group = world.split(tr, r, "cp");
      auto tp_group = world.split(cr, r, "tp");
      parallel::ContextParallel cp(*cp_group);
      ParamStore local(TP > 1 ? spec.with_tensor_shard(TP, tr, sp) : spec);
      local.allocate(DType::kF64, Stream::cpu(), DType::kF64);
      local.initialize(9, Stream::cpu());
      split_test::perturb(local);
      LlamaModel m(cfg, rc, local, Stream::cpu(), T);
      m.set_context_parallel(&cp);
      std::unique_ptr<parallel::TensorParallel> tp;
      if (TP > 1) {
        tp = std::make_unique<parallel::TensorParallel>(*tp_group, sp, local.tensor_shard().kv_replicas);
        m.set_tensor_parallel(tp.get());
      }
      local.grad_flat().zero_(Stream::cpu());
      const std::vector<double> losses =
          m.forward_backward(cp.local_tokens(tokens), cp.local_tokens(targets), 0.5f).to_vector<double>();
      if (tp) tp->sum_partial_grads(local, parallel::TensorParallel::whole_grads(local), Stream::cpu());
      // The micro-batch's gradient is the sum of the cp ranks' (DataParallel reduces over dp x cp).
      cp_group->all_reduce(local.grad_flat(), comm::ReduceOp::kSum, Stream::cpu(), "test grads");
      std::lock_guard<std::mutex> lock(mu);
      const int64_t C = T / (2 * CP);
      ASSERT_EQ(static_cast<int64_t>(losses.size()), 2 * B * C);
      for (int h = 0; h < 2; ++h)
        for (int64_t b = 0; b < B; ++b)
          for (int64_t t = 0; t < C; ++t) {
            const double want = ref[b * T + cp.chunk(h) * C + t];
            EXPECT_NEAR(losses[(h * B + b) * C + t], want, 1e-12 * (1 + std::abs(want)))
                << "rank " << r << " chunk " << cp.chunk(h) << " seq " << b << " t " << t;
          }
      split_test::expect_grad_parts(local, whole, 1e-11, "rank " + std::to_string(r));
    });
  }
}
