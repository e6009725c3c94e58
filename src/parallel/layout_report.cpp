#include "parallel/layout_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "config/plan.h"
#include "core/error.h"
#include "parallel/parallel_dims.h"
#include "parallel/pipeline_layout.h"
#include "parallel/pipeline_projection.h"
#include "parallel/pipeline_sim.h"

namespace primus::parallel {

namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  const size_t shown = ranks.size() <= 12 ? ranks.size() : 8;
  for (size_t i = 0; i < shown; ++i) out += (i ? " " : "") + std::to_string(ranks[i]);
  if (shown < ranks.size()) out += fmt::format(" ... {}", ranks.back());
  return fmt::format("[{}] ({})", out, ranks.size());
}

}  // namespace

std::string layout_report(const config::ResolvedConfig& rc, int world_size, int nproc_per_node,
                          int max_rows) {
  const TrainConfig& cfg = rc.train;
  if (nproc_per_node < 1 || world_size % nproc_per_node != 0)
    throw ConfigError(fmt::format("world size {} is not a whole number of nodes of {} processes", world_size,
                                  nproc_per_node));
  ParallelLayout layout;
  try {
    layout = layout_from_config(cfg.parallel, world_size);
  } catch (const ConfigError& e) {
    // Most of Primus's big experiments are written for several nodes: say which worlds fit the degrees.
    const ParallelConfig& p = cfg.parallel;
    const int64_t model =
        p.tensor_model_parallel_size * p.pipeline_model_parallel_size * p.context_parallel_size;
    const int64_t expert =
        p.tensor_model_parallel_size * p.expert_model_parallel_size * p.pipeline_model_parallel_size;
    const int64_t need = std::lcm(std::max<int64_t>(1, model), std::max<int64_t>(1, expert));
    const int64_t world = std::lcm(need, int64_t{nproc_per_node});
    throw ConfigError(
        e.what(),
        fmt::format("the degrees need a world that is a multiple of {} ranks (TP x PP x CP = {}, "
                    "TP x EP x PP = {}); with {} processes per node: --nnodes {} --nproc-per-node {}",
                    need, model, expert, nproc_per_node, world / nproc_per_node, nproc_per_node));
  }
  const ParallelDims& d = layout.dims;
  std::string stages;  // the pipeline's schedule and split, when PP > 1
  if (d.pp() > 1 && rc.info.framework == "megatron") {
    // What the trainer would run on this world: the configured schedule over its micro-batches per rank.
    const PipelinePlanInput in = pipeline_input_from_config(rc);
    if (!in.configured) training_plan(in);  // refused: the reason
    const PipelinePlan plan =
        plan_schedule(*in.configured, in, config::batch_layout(cfg, d.dp()).micro_batches);
    const SimResult sim = simulate(plan.schedule, layout_costs(plan.layout));
    stages = fmt::format(
        "schedule {} ({}), {} micro-batches per step, {} chunk(s) per rank; simulated bubble {:.1f}%\n",
        schedule_name(plan.kind), in.configured_from, plan.schedule.microbatches, plan.layout.vpp(),
        100 * sim.bubble_fraction);
    stages += plan.layout.describe("               pp ");
  }
  d.validate_training(cfg, /*pipeline_split_checked=*/!stages.empty());

  std::string out = "\n== Parallel layout ==\n";
  out += fmt::format("world          {} rank(s) = {} node(s) x {} process(es)\n", world_size,
                     world_size / nproc_per_node, nproc_per_node);
  out += fmt::format("degrees        {}\n", layout.describe());
  const int64_t accumulation = config::batch_layout(cfg, d.dp()).micro_batches;
  out += fmt::format(
      "batch          micro-batch {} x {} accumulation step(s) x data-parallel {} = global batch {}\n",
      cfg.micro_batch_size, accumulation, d.dp(), cfg.global_batch_size);
  if (!stages.empty()) out += "pipeline       " + stages + (stages.back() == '\n' ? "" : "\n");
  if (d.ep() > 1) {
    out += fmt::format("experts        {} per expert-parallel rank ({} / ep {}); expert data-parallel {}",
                       cfg.model.moe.num_experts / d.ep(), cfg.model.moe.num_experts, d.ep(), d.edp());
    // EP x TP (expert TP = TP): each of those experts split by columns over the tp ranks.
    if (d.tp() > 1)
      out += fmt::format("; expert tensor-parallel {} (= tp): expert ffn {} of {} per tp rank", d.tp(),
                         cfg.model.moe.ffn_hidden_size / d.tp(), cfg.model.moe.ffn_hidden_size);
    out += "\n";
  }
  if (d.tp() > 1) {
    // What each tensor-parallel rank holds (ModelSpec::with_tensor_shard's split, docs/parallelism.md).
    const ModelConfig& m = cfg.model;
    const int64_t kv = m.num_query_groups > 0 ? m.num_query_groups : m.num_attention_heads;
    const int64_t vocab = m.vocab_rows();
    out += fmt::format(
        "tensor         per tp rank: {} of {} heads, {} kv head(s){}, ffn {} of {}, vocabulary {} of {}{}\n",
        m.num_attention_heads / d.tp(), m.num_attention_heads, kv >= d.tp() ? kv / d.tp() : 1,
        kv >= d.tp() ? "" : fmt::format(" (each shared by {} ranks)", d.tp() / kv),
        m.ffn_hidden_size / d.tp(), m.ffn_hidden_size, vocab / d.tp(), vocab,
        cfg.parallel.sequence_parallel ? "; sequence parallel: norms on 1/tp of the tokens" : "");
  }
  if (d.cp() > 1) {
    const int64_t chunk = cfg.data.seq_length / (2 * d.cp());
    out += fmt::format(
        "sequence       {} tokens in {} chunks of {}: cp rank i holds chunks i and {} - i (cp_comm_type {} "
        "runs as "
        "all_gather)\n",
        cfg.data.seq_length, 2 * d.cp(), chunk, 2 * d.cp() - 1, cfg.parallel.cp_comm_type);
  }
  out += "groups of rank 0:";
  for (const std::string& g : ParallelDims::group_names()) {
    if (g == "world") continue;
    const std::vector<int> ranks = d.group_ranks(g, 0);
    if (ranks.size() > 1) out += fmt::format(" {} {}", g, rank_list(ranks));
  }
  out += "\n";

  out += " rank  node  local |  tp  cp  dp (replica.shard)  pp |  ep  edp\n";
  auto row = [&](int r) {
    const ParallelCoords c = d.coords(r);
    out += fmt::format("{:5} {:5} {:6} | {:3} {:3} {:3} ({:>7}) {:7} | {:3} {:4}\n", r, r / nproc_per_node,
                       r % nproc_per_node, c.tp, c.cp, c.dp, fmt::format("{}.{}", c.dp_replicate, c.dp_shard),
                       c.pp, c.ep, c.edp);
  };
  if (world_size <= max_rows) {
    for (int r = 0; r < world_size; ++r) row(r);
  } else {  // the first and the last node (or ranks, when a node alone is too long)
    const int edge = 2 * nproc_per_node <= max_rows ? nproc_per_node : max_rows / 2;
    for (int r = 0; r < edge; ++r) row(r);
    out += fmt::format("  ... ranks {} to {} not shown ...\n", edge, world_size - edge - 1);
    for (int r = world_size - edge; r < world_size; ++r) row(r);
  }
  return out;
}

}  // namespace primus::parallel
