#include "parallel/parallel_dims.h"

#include <fmt/format.h>

#include <algorithm>

#include "config/plan.h"
#include "core/error.h"

namespace primus::parallel {

const char* sharding_name(Sharding s) {
  switch (s) {
    case Sharding::kNoShard:
      return "no_shard";
    case Sharding::kOptim:
      return "optim";
    case Sharding::kOptimGrads:
      return "optim_grads";
    case Sharding::kOptimGradsParams:
      return "optim_grads_params";
  }
  return "?";
}

Sharding sharding_from_name(const std::string& name) {
  if (name.empty()) return Sharding::kNoShard;  // null in YAML
  for (Sharding s :
       {Sharding::kNoShard, Sharding::kOptim, Sharding::kOptimGrads, Sharding::kOptimGradsParams})
    if (name == sharding_name(s)) return s;
  throw ConfigError(
      fmt::format("data_parallel_sharding_strategy '{}' is not one of no_shard, optim, "
                  "optim_grads, optim_grads_params",
                  name));
}

ParallelDims ParallelDims::make(const ParallelDegrees& in, int world_size) {
  if (world_size < 1) throw ConfigError(fmt::format("world size {} must be >= 1", world_size));
  struct Named {
    const char* name;
    int value;
  };
  for (Named n : {Named{"dp_replicate", in.dp_replicate}, Named{"cp", in.cp}, Named{"tp", in.tp},
                  Named{"pp", in.pp}, Named{"ep", in.ep}})
    if (n.value < 1)
      throw ConfigError(
          fmt::format("parallel degree {} = {} must be >= 1 (rule: every degree >= 1; only "
                      "dp_shard may be -1 = inferred)",
                      n.name, n.value));
  if (in.dp_shard < 1 && in.dp_shard != -1)
    throw ConfigError(
        fmt::format("parallel degree dp_shard = {} must be >= 1 or -1 (= inferred)", in.dp_shard));
  ParallelDims d;
  d.d_ = in;
  d.world_ = world_size;
  const int64_t others = int64_t{in.dp_replicate} * in.cp * in.tp * in.pp;
  if (in.dp_shard == -1) {
    if (world_size % others != 0)
      throw ConfigError(
          fmt::format("cannot infer dp_shard: WORLD_SIZE {} is not divisible by dp_replicate {} x cp {} x tp "
                      "{} x pp {} = {} "
                      "(rule: dp_shard = world / (dp_replicate * cp * tp * pp))",
                      world_size, in.dp_replicate, in.cp, in.tp, in.pp, others));
    d.d_.dp_shard = static_cast<int>(world_size / others);
  }
  const int64_t product = others * d.d_.dp_shard;
  if (product != world_size)
    throw ConfigError(
        fmt::format("parallel degrees multiply to {} (dp_replicate {} x dp_shard {} x cp {} x tp {} x "
                    "pp {}) but WORLD_SIZE is {} (rule: their product must equal the world size)",
                    product, in.dp_replicate, d.d_.dp_shard, in.cp, in.tp, in.pp, world_size));
  // EP borrows ranks from data parallelism and CP (expert TP = TP): Megatron's world % (ETP * EP * PP) == 0.
  if ((int64_t{d.d_.dp_shard} * in.dp_replicate * in.cp) % in.ep != 0)
    throw ConfigError(
        fmt::format(
            "expert_model_parallel_size / parallelism.expert_parallel_degree = {} does not divide dp {} "
            "x cp {} = {} at {} rank(s) (rule: EP borrows ranks from data and context parallelism: world "
            "% (tp * ep * pp) == 0)",
            in.ep, d.dp(), in.cp, int64_t{d.dp()} * in.cp, world_size),
        fmt::format(
            "run on a multiple of tp x ep x pp x cp = {} ranks (primus launch --nproc-per-node N), or "
            "check the layout of such a world first: --dry-run --nnodes 1 --nproc-per-node {}",
            int64_t{in.tp} * in.ep * in.pp * in.cp, int64_t{in.tp} * in.ep * in.pp * in.cp));
  // On a sharded (FSDP) mesh, TorchTitan carves EP out of the shard dimensions; with replicas only
  // (Megatron's DDP / distributed optimizer: dp_shard 1) EP comes from the replicas and the rule above is
  // all. Expert TP = TP keeps the tp ranks out of the ep group (TorchTitan's rule for etp = tp).
  if (in.ep > 1 && d.d_.dp_shard > 1 && (int64_t{d.d_.dp_shard} * in.cp) % in.ep != 0)
    throw ConfigError(
        fmt::format("expert_model_parallel_size / parallelism.expert_parallel_degree = {} does not divide "
                    "dp_shard {} x cp {} (rule, TorchTitan with expert TP = TP: ep must divide dp_shard * "
                    "cp)",
                    in.ep, d.d_.dp_shard, in.cp));
  return d;
}

int ParallelDims::rank_of(int tp_r, int cp_r, int dp_r, int pp_r) const {
  return tp_r + tp() * (cp_r + cp() * (dp_r + dp() * pp_r));
}

ParallelCoords ParallelDims::coords(int rank) const {
  PRIMUS_CHECK(rank >= 0 && rank < world_, "rank {} outside the world of {}", rank, world_);
  ParallelCoords c;
  int r = rank;
  c.tp = r % tp();
  r /= tp();
  c.cp = r % cp();
  r /= cp();
  c.dp = r % dp();
  c.pp = r / dp();
  c.dp_shard = c.dp % dp_shard();
  c.dp_replicate = c.dp / dp_shard();
  // Expert grid: inside one pipeline stage, the tp*cp*dp ranks read as etp (= tp) x ep x edp.
  const int inner = (rank % (tp() * cp() * dp())) / tp();
  c.ep = inner % ep();
  c.edp = inner / ep();
  return c;
}

std::string ParallelDims::describe_rank(int rank) const {
  const ParallelCoords c = coords(rank);
  std::string out = fmt::format("tp {}, cp {}, dp {}, pp {}", c.tp, c.cp, c.dp, c.pp);
  if (ep() > 1) out += fmt::format(", ep {}", c.ep);
  return out;
}

const std::vector<std::string>& ParallelDims::group_names() {
  static const std::vector<std::string> kNames = {"world",        "tp",    "cp",          "dp",   "dp_shard",
                                                  "dp_replicate", "dp_cp", "dp_shard_cp", "pp",   "embedding",
                                                  "ep",           "edp",   "edp_shard",   "tp_ep"};
  return kNames;
}

std::vector<int> ParallelDims::group_ranks(const std::string& name, int rank) const {
  const ParallelCoords me = coords(rank);
  auto same = [&](const ParallelCoords& o) -> bool {
    if (name == "world") return true;
    if (name == "tp") return o.cp == me.cp && o.dp == me.dp && o.pp == me.pp;
    if (name == "cp") return o.tp == me.tp && o.dp == me.dp && o.pp == me.pp;
    if (name == "dp") return o.tp == me.tp && o.cp == me.cp && o.pp == me.pp;
    if (name == "dp_shard")
      return o.tp == me.tp && o.cp == me.cp && o.pp == me.pp && o.dp_replicate == me.dp_replicate;
    if (name == "dp_replicate")
      return o.tp == me.tp && o.cp == me.cp && o.pp == me.pp && o.dp_shard == me.dp_shard;
    if (name == "dp_cp") return o.tp == me.tp && o.pp == me.pp;
    if (name == "dp_shard_cp") return o.tp == me.tp && o.pp == me.pp && o.dp_replicate == me.dp_replicate;
    if (name == "pp") return o.tp == me.tp && o.cp == me.cp && o.dp == me.dp;
    if (name == "embedding") {  // Megatron's: the first and the last pipeline stage; every other rank alone
      const auto edge = [&](int p) { return p == 0 || p == pp() - 1; };
      return o.tp == me.tp && o.cp == me.cp && o.dp == me.dp &&
             (o.pp == me.pp || (edge(o.pp) && edge(me.pp)));
    }
    if (name == "ep") return o.tp == me.tp && o.pp == me.pp && o.edp == me.edp;
    if (name == "edp") return o.tp == me.tp && o.pp == me.pp && o.ep == me.ep;
    if (name == "edp_shard")  // HSDP: the expert-dp ranks inside one replica
      return o.tp == me.tp && o.pp == me.pp && o.ep == me.ep && o.dp_replicate == me.dp_replicate;
    // Megatron's expert tensor-and-model-parallel group: the ranks that together hold every expert column of
    // one stage once (etp x ep), over which a checkpoint gathers the split experts.
    if (name == "tp_ep") return o.pp == me.pp && o.edp == me.edp;
    std::string known;
    for (const auto& n : group_names()) known += (known.empty() ? "" : ", ") + n;
    throw ConfigError(fmt::format("unknown process group '{}' (groups: {})", name, known));
  };
  std::vector<int> out;
  for (int r = 0; r < world_; ++r)
    if (same(coords(r))) out.push_back(r);
  return out;
}

void ParallelDims::validate_training(const TrainConfig& cfg, bool pipeline_split_checked) const {
  // Each rule names the keys of both dialects (Megatron / TorchTitan), so the message points at the file's
  // own.
  constexpr const char* kTp = "tensor_model_parallel_size / parallelism.tensor_parallel_degree";
  constexpr const char* kPp = "pipeline_model_parallel_size / parallelism.pipeline_parallel_degree";
  constexpr const char* kCp = "context_parallel_size / parallelism.context_parallel_degree";
  constexpr const char* kEp = "expert_model_parallel_size / parallelism.expert_parallel_degree";
  std::vector<std::string> bad;
  const ModelConfig& m = cfg.model;
  if (m.num_attention_heads % tp() != 0)
    bad.push_back(
        fmt::format("num_attention_heads {} is not divisible by the tensor-parallel degree {} ({}) "
                    "(rule: heads % TP == 0)",
                    m.num_attention_heads, tp(), kTp));
  if (m.num_query_groups % tp() != 0 && tp() % m.num_query_groups != 0)
    bad.push_back(fmt::format(
        "num_query_groups {} is neither a multiple nor a divisor of the tensor-parallel degree {} ({}) "
        "(rule: KV heads must split evenly or replicate over TP)",
        m.num_query_groups, tp(), kTp));
  if (tp() > 1 && m.ffn_hidden_size % tp() != 0)
    bad.push_back(
        fmt::format("ffn_hidden_size {} is not divisible by the tensor-parallel degree {} ({}) "
                    "(rule: every TP rank holds ffn / TP columns)",
                    m.ffn_hidden_size, tp(), kTp));
  const int64_t vocab = m.vocab_rows();
  if (tp() > 1 && vocab % tp() != 0)
    bad.push_back(
        fmt::format("the vocabulary {} is not divisible by the tensor-parallel degree {} ({}) (rule: "
                    "every TP rank holds vocab / TP rows; the padding is to a multiple of "
                    "lcm(make_vocab_size_divisible_by, TP))",
                    vocab, tp(), kTp));
  if (tp() > 1 && cfg.parallel.sequence_parallel && (cfg.micro_batch_size * cfg.data.seq_length) % tp() != 0)
    bad.push_back(fmt::format(
        "micro_batch_size {} x seq_length {} tokens do not split over the tensor-parallel degree {} with "
        "sequence_parallel (rule: tokens % TP == 0)",
        cfg.micro_batch_size, cfg.data.seq_length, tp()));
  if (!pipeline_split_checked && !cfg.pipeline && m.num_layers % pp() != 0)
    bad.push_back(
        fmt::format("num_layers {} is not divisible by the pipeline-parallel degree {} ({}) (rule: "
                    "layers % PP == 0 without an explicit layout)",
                    m.num_layers, pp(), kPp));
  if (cp() > 1 && cfg.data.seq_length % (2 * cp()) != 0)
    bad.push_back(
        fmt::format("seq_length {} is not divisible by 2 x the context-parallel degree {} = {} ({}) "
                    "(rule: load-balanced causal CP needs seq % (2*CP) == 0)",
                    cfg.data.seq_length, cp(), 2 * cp(), kCp));
  if (ep() > 1 && !m.moe.enabled())
    bad.push_back(
        fmt::format("the expert-parallel degree is {} ({}) but the model has no experts "
                    "(num_experts / moe settings unset) (rule: EP needs an MoE model)",
                    ep(), kEp));
  if (ep() > 1 && m.moe.enabled() && m.moe.num_experts % ep() != 0)
    bad.push_back(
        fmt::format("num_experts {} is not divisible by the expert-parallel degree {} ({}) (rule: "
                    "every EP rank owns num_experts / EP experts)",
                    m.moe.num_experts, ep(), kEp));
  if (const config::BatchLayout b = config::batch_layout(cfg, dp()); !b.fits) bad.push_back(b.problem());
  if (bad.empty()) return;
  std::string msg = fmt::format("the parallel layout {} does not fit the run:", describe());
  for (const auto& b : bad) msg += "\n  - " + b;
  throw ConfigError(msg);
}

std::string ParallelDims::describe() const {
  return fmt::format("dp_replicate {} x dp_shard {} x cp {} x tp {} x pp {} (ep {}) = {} ranks",
                     dp_replicate(), dp_shard(), cp(), tp(), pp(), ep(), world_);
}

std::string ParallelLayout::describe() const {
  return fmt::format("{}, sharding {}", dims.describe(), sharding_name(sharding));
}

ParallelLayout layout_from_config(const ParallelConfig& p, int world_size) {
  ParallelLayout out;
  Sharding s = sharding_from_name(p.data_parallel_sharding_strategy);
  if (p.use_distributed_optimizer && s == Sharding::kNoShard) s = Sharding::kOptim;
  if (p.use_torch_fsdp2) s = Sharding::kOptimGradsParams;
  out.sharding = s;
  ParallelDegrees d;
  d.tp = static_cast<int>(p.tensor_model_parallel_size);
  d.pp = static_cast<int>(p.pipeline_model_parallel_size);
  d.cp = static_cast<int>(p.context_parallel_size);
  d.ep = static_cast<int>(p.expert_model_parallel_size);
  const int64_t model_parallel = int64_t{d.tp} * d.pp * d.cp;
  if (model_parallel < 1 || world_size % model_parallel != 0)
    throw ConfigError(fmt::format(
        "WORLD_SIZE={} is not divisible by tensor_model_parallel_size {} x "
        "pipeline_model_parallel_size {} x context_parallel_size {} = {} (rule: world % (TP*PP*CP) "
        "== 0; TorchTitan: parallelism.tensor/pipeline/context_parallel_degree)",
        world_size, d.tp, d.pp, d.cp, model_parallel));
  const int dp = static_cast<int>(world_size / model_parallel);
  if (s == Sharding::kOptimGradsParams) {
    d.dp_replicate = static_cast<int>(p.data_parallel_replicate_degree);
    d.dp_shard = p.data_parallel_shard_degree > 0 ? static_cast<int>(p.data_parallel_shard_degree) : -1;
  } else {
    if (p.data_parallel_replicate_degree > 1 && p.data_parallel_replicate_degree != dp)
      throw ConfigError(
          fmt::format("data_parallel_replicate_degree {} (HSDP replicas) needs sharded parameters "
                      "(use_torch_fsdp2 or data_parallel_sharding_strategy: optim_grads_params); "
                      "without them every one of the {} data-parallel ranks is a replica",
                      p.data_parallel_replicate_degree, dp));
    d.dp_replicate = dp;
    d.dp_shard = 1;
  }
  out.dims = ParallelDims::make(d, world_size);
  return out;
}

}  // namespace primus::parallel
