#include "projection/setup.h"

#include <fmt/format.h>

#include <algorithm>

#include "config/plan.h"
#include "core/error.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline_sim.h"

namespace primus::projection {

int64_t Setup::tokens_per_rank() const {
  return train.micro_batch_size * train.data.seq_length / std::max(1, cp());
}

namespace {

void fill_single_stage(Setup& s) {
  RankPlan r;
  const int64_t layers = s.train.model.num_layers;
  for (int i = 0; i < layers; ++i) r.layers.push_back(i);
  r.mtp_layers = static_cast<int>(s.train.model.mtp_num_layers);
  r.embedding = r.loss = true;
  r.inflight = 1;  // without a pipeline a micro-batch's backward runs before the next forward
  r.holds = fmt::format("embedding + layers 0-{}{} + loss", layers - 1,
                        r.mtp_layers > 0 ? fmt::format(" + MTP x{}", r.mtp_layers) : "");
  s.ranks = {r};
}

void fill_pipeline(Setup& s, const parallel::PipelinePlanInput& in) {
  auto choose = [&]() -> parallel::PipelinePlan {
    try {
      parallel::PipelinePlan p = parallel::training_plan(in);
      s.schedule = parallel::schedule_name(p.kind);
      return p;
    } catch (const ConfigError& e) {
      // A schedule we do not generate (a Primus variant): plan with 1F1B, and say so.
      s.schedule = "1f1b";
      s.notes.push_back(fmt::format("pipeline schedule: 1F1B assumed ({})", e.what()));
      return parallel::plan_schedule(parallel::ScheduleKind::k1F1B, in, in.microbatches);
    }
  };
  parallel::PipelinePlan plan = choose();
  const parallel::SimResult sim = parallel::simulate(
      plan.schedule,
      parallel::layout_costs(plan.layout, {}, in.split.account_for_embedding, in.split.account_for_loss));
  s.bubble = sim.bubble_fraction;
  auto held = std::make_shared<parallel::PipelinePlan>(std::move(plan));
  s.plan = held;
  const parallel::PipelineLayout& l = held->layout;
  for (int r = 0; r < l.pp(); ++r) {
    RankPlan rp;
    rp.pp_rank = r;
    std::string holds;
    for (int c = 0; c < l.vpp(); ++c) {
      const parallel::StageModules& m = l.at(r, c);
      for (int i = 0; i < m.num_layers; ++i) rp.layers.push_back(m.first_layer + i);
      rp.mtp_layers += m.num_mtp;
      rp.embedding = rp.embedding || m.embedding;
      rp.loss = rp.loss || m.loss;
      holds += (holds.empty() ? "" : " | ") + m.describe();
    }
    rp.holds = holds;
    rp.inflight = sim.peak_microbatches.at(r);
    // Walk the rank's list: a BI leaves its chunk's layers' gradients held until the matching BW.
    std::vector<int> pending(static_cast<size_t>(l.vpp()), 0);
    auto pending_layers = [&] {
      int n = 0;
      for (int c = 0; c < l.vpp(); ++c)
        if (pending[static_cast<size_t>(c)] > 0) n += l.at(r, c).num_layers;
      return n;
    };
    for (const parallel::Action& a : held->schedule.ranks.at(static_cast<size_t>(r))) {
      const size_t c = static_cast<size_t>(a.chunk);
      if (a.kind == parallel::ActionKind::kB || a.kind == parallel::ActionKind::kBI) {
        // the layer whose backward runs now, unless its chunk's buffers are already held
        rp.grad_layers = std::max(rp.grad_layers, pending_layers() + (pending[c] > 0 ? 0 : 1));
        if (a.kind == parallel::ActionKind::kBI) ++pending[c];
        rp.grad_layers = std::max(rp.grad_layers, pending_layers());
      } else if (a.kind == parallel::ActionKind::kBW) {
        --pending[c];
      }
    }
    s.ranks.push_back(std::move(rp));
  }
}

}  // namespace

RankParams rank_parameters(const Setup& s, const RankPlan& r) {
  const ModelConfig& m = s.train.model;
  const config::ParamCounts c = config::count_parameters(m);
  const double tp = s.tp(), ep = s.ep();
  RankParams p;
  auto add_layer = [&](bool moe) {
    double dense, expert = 0;
    if (!m.moe.enabled()) {
      dense = static_cast<double>(c.per_layer);
    } else if (moe) {
      expert = static_cast<double>(m.moe.num_experts) * static_cast<double>(c.moe_expert);
      dense = static_cast<double>(c.per_layer) - expert;
    } else {
      dense = static_cast<double>(c.per_dense_layer);
    }
    p.dense += dense / tp;
    p.expert += expert / (ep * tp);
    p.largest_layer = std::max(p.largest_layer, dense / tp + expert / (ep * tp));
  };
  for (int layer : r.layers) add_layer(m.moe.enabled() && m.moe.is_moe_layer(layer));
  // An MTP depth: eh_proj and its norms, and a decoder layer of the last main layer's kind (model/mtp.h),
  // whose experts split over ep like the main layers'.
  const bool mtp_moe = m.moe.enabled() && m.num_layers > 0 && m.moe.is_moe_layer(m.num_layers - 1);
  for (int i = 0; i < r.mtp_layers; ++i) {
    const double expert =
        mtp_moe ? static_cast<double>(m.moe.num_experts) * static_cast<double>(c.moe_expert) : 0.0;
    p.dense += (static_cast<double>(c.per_mtp_depth) - expert) / tp;
    p.expert += expert / (ep * tp);
  }
  if (r.embedding) p.dense += static_cast<double>(c.embedding) / tp;
  if (r.loss) p.dense += static_cast<double>(c.lm_head + c.final_norm) / tp;
  // The embedding split from the loss's stage: that stage holds a copy of it as its output weight (tied
  // embeddings) or for the MTP depths' lookups of the shifted tokens (tied or not) (ModelSpec::
  // holds_tied_copy; its gradient summed with the first stage's).
  if (r.loss && !r.embedding && (!m.untie_embeddings_and_output_weights || m.mtp_num_layers > 0))
    p.dense += static_cast<double>(c.embedding) / tp;
  return p;
}

StateShards state_shards(const Setup& s) {
  const auto& d = s.layout.dims;
  DpConfig c;
  c.sharding = s.layout.sharding;
  c.dp = d.dp();
  c.dp_replicate = d.dp_replicate();
  c.dp_shard = d.dp_shard();
  c.ep = d.ep();
  c.edp = d.edp();
  c.cp = d.cp();
  return {static_cast<double>(c.shard_ranks()), static_cast<double>(c.expert_shard_ranks())};
}

Setup make_setup(const config::ResolvedConfig& rc, int world, int nproc_per_node, bool gpu) {
  Setup s;
  s.train = rc.train;
  s.world = world;
  s.nproc_per_node = std::max(1, nproc_per_node);
  s.gpu = gpu;
  s.layout = parallel::layout_from_config(rc.train.parallel, world);
  s.layout.dims.validate_training(rc.train, /*pipeline_split_checked=*/true);
  const config::BatchLayout b = config::batch_layout(rc.train, s.layout.dims.dp());
  if (!b.fits) throw ConfigError(b.problem());
  s.microbatches = b.micro_batches;
  if (s.layout.dims.pp() > 1) {
    if (!rc.train.pipeline)
      throw ConfigError(
          "pipeline parallelism: the projection reads the split from Megatron's keys; this config "
          "(TorchTitan dialect) has none",
          "set pipeline_model_parallel_size in a Megatron experiment");
    parallel::PipelinePlanInput in = *rc.train.pipeline;
    in.microbatches = s.microbatches;
    fill_pipeline(s, in);
  } else {
    fill_single_stage(s);
  }
  return s;
}

}  // namespace primus::projection
