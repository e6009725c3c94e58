#include "projection/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/error.h"

namespace primus::projection {
namespace {

// The keys a layout sets, in the config's dialect.
struct Keys {
  bool megatron = true;
  std::vector<std::pair<std::string, std::string>> structure(int tp, int pp, int vpp, int cp, int ep, int dp,
                                                             parallel::Sharding sh) const {
    std::vector<std::pair<std::string, std::string>> o;
    if (megatron) {
      o = {{"tensor_model_parallel_size", std::to_string(tp)},
           {"sequence_parallel", tp > 1 ? "true" : "false"},
           {"pipeline_model_parallel_size", std::to_string(pp)},
           {"virtual_pipeline_model_parallel_size", vpp > 1 ? std::to_string(vpp) : "None"},
           {"context_parallel_size", std::to_string(cp)},
           {"expert_model_parallel_size", std::to_string(ep)},
           {"use_distributed_optimizer", sh == parallel::Sharding::kOptim ? "true" : "false"},
           {"use_torch_fsdp2", sh == parallel::Sharding::kOptimGradsParams ? "true" : "false"},
           {"data_parallel_sharding_strategy", "no_shard"}};
      if (cp > 1) o.push_back({"cp_comm_type", "all_gather"});
      if (dp > 1 && sh != parallel::Sharding::kOptimGradsParams) o.push_back({"overlap_grad_reduce", "true"});
      if (dp > 1 && sh == parallel::Sharding::kOptim) o.push_back({"overlap_param_gather", "true"});
    } else {
      const bool fsdp = sh == parallel::Sharding::kOptimGradsParams;
      o = {{"parallelism.tensor_parallel_degree", std::to_string(tp)},
           {"parallelism.pipeline_parallel_degree", std::to_string(pp)},
           {"parallelism.context_parallel_degree", std::to_string(cp)},
           {"parallelism.expert_parallel_degree", std::to_string(ep)},
           {"parallelism.data_parallel_shard_degree", fsdp ? "-1" : "1"},
           {"parallelism.data_parallel_replicate_degree", fsdp ? "1" : std::to_string(dp)}};
    }
    return o;
  }
  std::vector<std::pair<std::string, std::string>> step(int mbs, const std::string& recompute) const {
    if (megatron)
      return {{"micro_batch_size", std::to_string(mbs)},
              {"recompute_granularity", recompute.empty() ? "None" : recompute},
              {"recompute_method", recompute == "full" ? "uniform" : "None"},
              {"recompute_num_layers", recompute == "full" ? "1" : "None"}};
    return {{"training.local_batch_size", std::to_string(mbs)},
            {"activation_checkpoint.mode", recompute.empty() ? "none" : recompute}};
  }
};

std::vector<int> divisors_up_to(int n, int limit) {
  std::vector<int> d;
  for (int i = 1; i <= std::min(n, limit); ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

std::vector<std::string> tokens_of(const std::vector<std::pair<std::string, std::string>>& kv) {
  std::vector<std::string> t;
  for (const auto& [k, v] : kv) t.push_back(k + "=" + v);
  return t;
}

// "training would refuse" warnings of a planning load: the layout is valid but not trainable yet.
std::string refusal_of(const config::ResolvedConfig& rc) {
  for (const std::string& w : rc.warnings)
    if (w.rfind("planning only, training would refuse", 0) == 0) return w;
  return {};
}

void note_reason(PlanResult& r, const std::string& why) {
  if (r.reasons.size() < 6 && std::find(r.reasons.begin(), r.reasons.end(), why) == r.reasons.end())
    r.reasons.push_back(why);
}

}  // namespace

PlanResult plan_layouts(const config::ResolvedConfig& base, const PlanLoader& load,
                        const PlanOptions& options, const GpuSpec& gpu, const Links& links,
                        const Calibration* calibration) {
  PlanResult result;
  const TrainConfig& t = base.train;
  const ModelConfig& m = t.model;
  Keys keys;
  keys.megatron = base.info.framework == "megatron";
  // Refusals the base config itself has are not the layout's fault: planning compares against them.
  const std::string base_refusal = refusal_of(base);
  const int world = options.world, node = std::max(1, options.nproc_per_node);
  const bool moe = m.moe.enabled();
  const std::vector<std::string> recomputes = {"", "selective", "full"};

  for (int tp : divisors_up_to(world, node)) {
    for (int pp : divisors_up_to(world / tp, static_cast<int>(std::min<int64_t>(m.num_layers, 64)))) {
      if (pp > 1 && !keys.megatron) continue;  // the projection reads pipeline splits from Megatron's keys
      for (int cp : divisors_up_to(world / (tp * pp), 8)) {
        if (cp > 1 && t.data.seq_length < 8192) continue;  // short sequences: CP only adds communication
        if (t.data.seq_length % (2 * cp) != 0) continue;
        const int dp = world / (tp * pp * cp);
        std::vector<int> eps = {1};
        if (moe)
          eps = divisors_up_to(static_cast<int>(std::min<int64_t>(m.moe.num_experts, dp * cp)), dp * cp);
        for (int ep : eps) {
          if (moe && (m.moe.num_experts % ep != 0 || (dp * cp) % ep != 0)) continue;
          std::vector<int> vpps = {1};
          if (pp > 1 && m.num_layers % (pp * 2) == 0) vpps.push_back(2);
          std::vector<parallel::Sharding> shardings = {parallel::Sharding::kNoShard};
          if (dp * cp > 1) {
            shardings.push_back(parallel::Sharding::kOptim);
            shardings.push_back(parallel::Sharding::kOptimGradsParams);
          }
          for (int vpp : vpps)
            for (parallel::Sharding sh : shardings) {
              ++result.structures;
              const auto structure = keys.structure(tp, pp, vpp, cp, ep, dp, sh);
              config::ResolvedConfig rc;
              try {
                rc = load(tokens_of(structure));
              } catch (const ConfigError& e) {
                result.invalid += static_cast<int>(options.micro_batches.size() * recomputes.size());
                note_reason(result, e.what());
                continue;
              }
              const std::string refusal = refusal_of(rc);
              if (!refusal.empty() && refusal != base_refusal) {
                result.refused += static_cast<int>(options.micro_batches.size() * recomputes.size());
                note_reason(result, refusal);
                continue;
              }
              for (int mbs : options.micro_batches) {
                if (t.global_batch_size % (int64_t{mbs} * dp) != 0) continue;  // not a split of the batch
                for (const std::string& rg : recomputes) {
                  ++result.candidates;
                  config::ResolvedConfig c = rc;
                  c.train.micro_batch_size = mbs;
                  c.train.recompute.granularity = rg;
                  c.train.recompute.method = rg == "full" ? "uniform" : "";
                  c.train.recompute.num_layers = 1;
                  PlanCandidate cand;
                  try {
                    cand.setup = make_setup(c, world, node, /*gpu=*/true);
                  } catch (const ConfigError& e) {
                    ++result.invalid;
                    note_reason(result, e.what());
                    continue;
                  }
                  if (vpp > 1 && cand.setup.schedule != "interleaved") {
                    ++result.invalid;  // the interleaved schedule cannot run these micro-batches
                    note_reason(result, cand.setup.notes.empty() ? "interleaved schedule refused"
                                                                 : cand.setup.notes[0]);
                    continue;
                  }
                  cand.memory = project_memory(cand.setup, gpu);
                  if (!cand.memory.fits()) {
                    ++result.too_big;
                    continue;
                  }
                  cand.perf = project_performance(cand.setup, gpu, links, calibration);
                  cand.overrides = structure;
                  for (const auto& kv : keys.step(mbs, rg)) cand.overrides.push_back(kv);
                  cand.label = fmt::format("tp {} pp {}{} cp {}{} dp {} {} | mbs {} | {}", tp, pp,
                                           vpp > 1 ? fmt::format(" vpp {}", vpp) : "", cp,
                                           moe ? fmt::format(" ep {}", ep) : "", dp,
                                           sh == parallel::Sharding::kNoShard ? "ddp"
                                           : sh == parallel::Sharding::kOptim ? "zero1"
                                                                              : "fsdp",
                                           mbs, rg.empty() ? "no recompute" : rg + " recompute");
                  result.ranked.push_back(std::move(cand));
                }
              }
            }
        }
      }
    }
  }
  std::stable_sort(result.ranked.begin(), result.ranked.end(),
                   [](const PlanCandidate& a, const PlanCandidate& b) {
                     if (a.perf.tokens_per_s_per_gpu != b.perf.tokens_per_s_per_gpu)
                       return a.perf.tokens_per_s_per_gpu > b.perf.tokens_per_s_per_gpu;
                     return a.memory.peak_bytes < b.memory.peak_bytes;
                   });
  return result;
}

std::string overrides_yaml(const PlanCandidate& c, const std::string& header) {
  std::string out = header;
  for (const auto& [k, v] : c.overrides) out += fmt::format("{}: {}\n", k, v == "None" ? "null" : v);
  return out;
}

}  // namespace primus::projection
