// ParallelDims (parallel/parallel_dims.h): validation errors, rank <-> coordinate tables, named group
// membership, and the mapping from both config dialects.
#include <gtest/gtest.h>

#include "comm/rank_names.h"
#include "config_test_util.h"
#include "core/error.h"
#include "parallel/parallel_dims.h"

namespace primus::parallel {
namespace {

using primus::config::testing::config_error_of;

TEST(ParallelDims, InfersDpShardAndChecksTheProduct) {
  ParallelDims d = ParallelDims::make({.dp_replicate = 2, .dp_shard = -1, .tp = 2}, 8);
  EXPECT_EQ(d.dp_shard(), 2);
  EXPECT_EQ(d.dp(), 4);
  EXPECT_NE(config_error_of([] {
              ParallelDims::make({.dp_shard = 3, .tp = 2}, 8);
            }).find("multiply to 6 (dp_replicate 1 x dp_shard 3 x cp 1 x tp 2 x pp 1) but WORLD_SIZE is 8"),
            std::string::npos);
  EXPECT_NE(
      config_error_of([] { ParallelDims::make({.dp_shard = -1, .tp = 3}, 8); }).find("cannot infer dp_shard"),
      std::string::npos);
  EXPECT_NE(
      config_error_of([] { ParallelDims::make({.dp_shard = -1, .tp = 0}, 8); }).find("tp = 0 must be >= 1"),
      std::string::npos);
  EXPECT_NE(config_error_of([] { ParallelDims::make({.dp_shard = -2}, 8); }).find("dp_shard = -2"),
            std::string::npos);
  EXPECT_NE(config_error_of([] {
              ParallelDims::make({.dp_shard = -1, .tp = 2, .ep = 3}, 8);
            }).find("expert_parallel_degree = 3 does not divide"),
            std::string::npos);
  EXPECT_NO_THROW(ParallelDims::make({.dp_shard = -1, .tp = 2, .ep = 4}, 8));
  // Megatron's DDP / distributed optimizer: EP 8 out of 8 replicas (Primus's Mixtral experiment on 8 GPUs).
  EXPECT_NO_THROW(ParallelDims::make({.dp_replicate = 8, .dp_shard = 1, .ep = 8}, 8));
  // A sharded mesh (TorchTitan): EP must also divide dp_shard x cp (expert TP = TP: never the tp ranks).
  EXPECT_NE(config_error_of([] {
              ParallelDims::make({.dp_replicate = 4, .dp_shard = 2, .ep = 4}, 8);
            }).find("ep must divide dp_shard * cp"),
            std::string::npos);
  EXPECT_NE(config_error_of([] {
              ParallelDims::make({.dp_replicate = 2, .dp_shard = 2, .tp = 2, .ep = 4}, 8);
            }).find("= 4 does not divide dp_shard 2 x cp 1"),
            std::string::npos);
  // EP x TP: ep folds over dp x cp only, so TP 2 x EP 4 needs 8 ranks, not 4.
  EXPECT_NE(config_error_of([] { ParallelDims::make({.dp_shard = -1, .tp = 2, .ep = 4}, 4); })
                .find("expert_model_parallel_size / parallelism.expert_parallel_degree = 4 does not divide "
                      "dp 2 x cp 1"),
            std::string::npos);
}

TEST(ParallelDims, MegatronExampleTp2Pp4On8Ranks) {
  // reference.md §2.3: TP groups {0,1},{2,3},...; PP groups {0,2,4,6},{1,3,5,7}.
  ParallelDims d = ParallelDims::make({.dp_shard = -1, .tp = 2, .pp = 4}, 8);
  EXPECT_EQ(d.dp(), 1);
  EXPECT_EQ(d.group_ranks("tp", 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(d.group_ranks("tp", 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(d.group_ranks("pp", 0), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(d.group_ranks("pp", 3), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(d.group_ranks("dp", 3), (std::vector<int>{3}));
  // Megatron's embedding group: the first and the last stage of each tp rank; the middle stages alone.
  EXPECT_EQ(d.group_ranks("embedding", 0), (std::vector<int>{0, 6}));
  EXPECT_EQ(d.group_ranks("embedding", 7), (std::vector<int>{1, 7}));
  EXPECT_EQ(d.group_ranks("embedding", 2), (std::vector<int>{2}));
}

TEST(ParallelDims, RankCoordinateTableRoundTrips) {
  ParallelDims d = ParallelDims::make({.dp_replicate = 2, .dp_shard = 2, .cp = 2, .tp = 2, .pp = 2}, 32);
  for (int r = 0; r < 32; ++r) {
    ParallelCoords c = d.coords(r);
    EXPECT_EQ(d.rank_of(c.tp, c.cp, c.dp, c.pp), r);
    EXPECT_EQ(c.dp, c.dp_shard + 2 * c.dp_replicate);
  }
  // tp innermost, then cp, dp (shard inside replicate), pp outermost.
  ParallelCoords c = d.coords(1 + 2 * (1 + 2 * (3 + 4 * 1)));
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.cp, 1);
  EXPECT_EQ(c.dp, 3);
  EXPECT_EQ(c.dp_shard, 1);
  EXPECT_EQ(c.dp_replicate, 1);
  EXPECT_EQ(c.pp, 1);
}

TEST(ParallelDims, HsdpGroups) {
  ParallelDims d = ParallelDims::make({.dp_replicate = 2, .dp_shard = -1}, 8);  // 2 replicas x 4 shards
  EXPECT_EQ(d.group_ranks("dp_shard", 5), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(d.group_ranks("dp_replicate", 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(d.group_ranks("dp", 5), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(d.group_ranks("world", 5).size(), 8u);
  ParallelDims cp = ParallelDims::make({.dp_shard = -1, .cp = 2, .tp = 2}, 8);
  EXPECT_EQ(cp.group_ranks("cp", 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(cp.group_ranks("dp", 0), (std::vector<int>{0, 4}));
  EXPECT_EQ(cp.group_ranks("dp_cp", 0), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_NE(config_error_of([&] { cp.group_ranks("dq", 0); }).find("unknown process group 'dq'"),
            std::string::npos);
}

TEST(ParallelDims, ExpertGrid) {
  // 8 ranks, tp 2, dp 4, ep 2: inside the stage, etp(2) x ep(2) x edp(2).
  ParallelDims d = ParallelDims::make({.dp_shard = -1, .tp = 2, .ep = 2}, 8);
  EXPECT_EQ(d.edp(), 2);
  EXPECT_EQ(d.group_ranks("ep", 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(d.group_ranks("edp", 0), (std::vector<int>{0, 4}));
  // The ranks holding one stage's experts between them (each its tp columns of its ep experts), tp fastest.
  EXPECT_EQ(d.group_ranks("tp_ep", 0), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(d.group_ranks("tp_ep", 6), (std::vector<int>{4, 5, 6, 7}));
  for (int r = 0; r < 8; ++r) {  // position in tp_ep = etp + TP x ep (what checkpoint gathers assume)
    const ParallelCoords c = d.coords(r);
    const std::vector<int> g = d.group_ranks("tp_ep", r);
    EXPECT_EQ(g[static_cast<size_t>(c.tp + 2 * c.ep)], r) << r;
  }
  // With CP: tp 2 x cp 2 x dp 2, ep 2 folds over cp first; the ep group keeps the tp coordinate.
  ParallelDims cp = ParallelDims::make({.dp_shard = -1, .cp = 2, .tp = 2, .ep = 2}, 8);
  EXPECT_EQ(cp.group_ranks("ep", 1), (std::vector<int>{1, 3}));
  EXPECT_EQ(cp.group_ranks("edp", 1), (std::vector<int>{1, 5}));
  EXPECT_EQ(cp.group_ranks("tp_ep", 5), (std::vector<int>{4, 5, 6, 7}));
  // Without TP, tp_ep is the ep group; without EP, the tp group (the same communicator, process_groups.h).
  ParallelDims ep = ParallelDims::make({.dp_shard = -1, .ep = 2}, 4);
  EXPECT_EQ(ep.group_ranks("tp_ep", 2), ep.group_ranks("ep", 2));
  ParallelDims tp = ParallelDims::make({.dp_shard = -1, .tp = 2}, 4);
  EXPECT_EQ(tp.group_ranks("tp_ep", 2), tp.group_ranks("tp", 2));
}

TEST(ParallelDims, TrainingRules) {
  TrainConfig cfg;
  cfg.model.num_attention_heads = 6;
  cfg.model.num_query_groups = 3;
  cfg.model.num_layers = 5;
  cfg.data.seq_length = 130;
  cfg.micro_batch_size = 2;
  cfg.global_batch_size = 10;
  ParallelDims d = ParallelDims::make({.dp_shard = -1, .cp = 2, .tp = 4, .pp = 2}, 32);
  std::string e = config_error_of([&] { d.validate_training(cfg); });
  EXPECT_NE(e.find("num_attention_heads 6 is not divisible by the tensor-parallel degree 4 "
                   "(tensor_model_parallel_size / parallelism.tensor_parallel_degree)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("num_query_groups 3 is neither a multiple nor a divisor of the tensor-parallel degree 4"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("num_layers 5 is not divisible by the pipeline-parallel degree 2 "
                   "(pipeline_model_parallel_size / parallelism.pipeline_parallel_degree)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("seq_length 130 is not divisible by 2 x the context-parallel degree 2 = 4 "
                   "(context_parallel_size / parallelism.context_parallel_degree)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("global_batch_size 10 is not divisible by micro_batch_size 2 x data-parallel size 2"),
            std::string::npos)
      << e;
  ParallelDims ok = ParallelDims::make({.dp_shard = -1}, 2);
  cfg.model.num_layers = 4;
  cfg.global_batch_size = 8;
  EXPECT_NO_THROW(ok.validate_training(cfg));
}

TEST(ParallelDims, ExpertParallelRules) {
  TrainConfig cfg;
  cfg.model.num_attention_heads = 8;
  cfg.model.num_query_groups = 8;
  cfg.model.num_layers = 2;
  cfg.data.seq_length = 64;
  cfg.micro_batch_size = 1;
  cfg.global_batch_size = 8;
  ParallelDims d = ParallelDims::make({.dp_shard = -1, .ep = 4}, 8);
  std::string e = config_error_of([&] { d.validate_training(cfg); });
  EXPECT_NE(e.find("the expert-parallel degree is 4 (expert_model_parallel_size / "
                   "parallelism.expert_parallel_degree) but the model has no experts"),
            std::string::npos)
      << e;
  cfg.model.moe.num_experts = 6;
  cfg.model.moe.topk = 2;
  cfg.model.moe.ffn_hidden_size = 16;
  cfg.model.moe.layer_is_moe = {1, 1};
  e = config_error_of([&] { d.validate_training(cfg); });
  EXPECT_NE(e.find("num_experts 6 is not divisible by the expert-parallel degree 4"), std::string::npos) << e;
  cfg.model.moe.num_experts = 8;
  EXPECT_NO_THROW(d.validate_training(cfg));
  // EP x TP (expert TP = TP) trains: TP 2 x DP 2 with EP 2 on 4 ranks.
  cfg.global_batch_size = 4;
  cfg.model.vocab_size = cfg.model.padded_vocab_size = 64;
  cfg.model.ffn_hidden_size = 32;
  EXPECT_NO_THROW(ParallelDims::make({.dp_shard = -1, .tp = 2, .ep = 2}, 4).validate_training(cfg));
}

TEST(ParallelLayout, FromMegatronAndTorchTitanKeys) {
  ParallelConfig p;
  ParallelLayout ddp = layout_from_config(p, 4);
  EXPECT_EQ(ddp.sharding, Sharding::kNoShard);
  EXPECT_EQ(ddp.dims.dp_replicate(), 4);
  EXPECT_EQ(ddp.dims.dp_shard(), 1);
  p.use_distributed_optimizer = true;
  EXPECT_EQ(layout_from_config(p, 4).sharding, Sharding::kOptim);
  p.use_distributed_optimizer = false;
  p.data_parallel_sharding_strategy = "optim_grads";
  EXPECT_EQ(layout_from_config(p, 4).sharding, Sharding::kOptimGrads);
  p.data_parallel_sharding_strategy = "no_shard";
  p.use_torch_fsdp2 = true;
  ParallelLayout fsdp = layout_from_config(p, 4);
  EXPECT_EQ(fsdp.sharding, Sharding::kOptimGradsParams);
  EXPECT_EQ(fsdp.dims.dp_shard(), 4);
  p.data_parallel_replicate_degree = 2;  // HSDP
  ParallelLayout hsdp = layout_from_config(p, 8);
  EXPECT_EQ(hsdp.dims.dp_replicate(), 2);
  EXPECT_EQ(hsdp.dims.dp_shard(), 4);
  p.data_parallel_shard_degree = 2;  // TorchTitan explicit degrees that do not fill the world
  EXPECT_NE(config_error_of([&] { layout_from_config(p, 8); }).find("multiply to 4"), std::string::npos);
  ParallelConfig q;
  q.data_parallel_replicate_degree = 2;  // replicas without sharding: only the whole DP works
  EXPECT_NE(config_error_of([&] { layout_from_config(q, 4); }).find("needs sharded parameters"),
            std::string::npos);
  q.data_parallel_sharding_strategy = "zero3";
  EXPECT_NE(config_error_of([&] { layout_from_config(q, 4); }).find("'zero3' is not one of"),
            std::string::npos);
  ParallelConfig t;
  t.tensor_model_parallel_size = 3;
  EXPECT_NE(config_error_of([&] {
              layout_from_config(t, 4);
            }).find("not divisible by tensor_model_parallel_size 3"),
            std::string::npos);
}

// Failure messages name a rank with its place in the layout once the trainer has set it (comm/rank_names.h).
TEST(ParallelDims, RanksAreNamedWithTheirCoordinates) {
  ParallelDims d = ParallelDims::make({.dp_shard = -1, .tp = 2, .pp = 2, .ep = 2}, 8);
  EXPECT_EQ(d.describe_rank(5), "tp 1, cp 0, dp 0, pp 1, ep 0");
  EXPECT_EQ(comm::rank_name(5), "rank 5");
  std::vector<std::string> places;
  for (int r = 0; r < d.world_size(); ++r) places.push_back(d.describe_rank(r));
  comm::set_rank_coordinates(places);
  EXPECT_EQ(comm::rank_name(3), "rank 3 (tp 1, cp 0, dp 1, pp 0, ep 1)");
  EXPECT_EQ(comm::rank_name(9), "rank 9") << "outside the table: the number alone";
  comm::set_rank_coordinates({});
  EXPECT_EQ(comm::rank_name(3), "rank 3");
}

}  // namespace
}  // namespace primus::parallel
