// Maps the TorchTitan dialect (sections: training.*, optimizer.*, lr_scheduler.*, parallelism.*, ...) into
// TrainConfig. Model sizes come from the flavor table; the vocabulary from model.hf_assets_path.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "config/dialect_tensorboard.h"
#include "config/did_you_mean.h"
#include "config/load_config.h"
#include "config/not_supported.h"
#include "config/torchtitan_flavors.h"
#include "config/vocab.h"
#include "core/error.h"

namespace primus::config {

void map_torchtitan(ResolvedConfig& rc) {
  const CheckedKeys& k = rc.keys;
  TrainConfig& t = rc.train;
  auto src = [&](const char* field, const char* key) { rc.set_source(field, key, k.origin(key)); };
  auto derived = [&](const char* field, const auto& value, const std::string& how) {
    rc.set_source(field, field, Origin::derived(how));
    if constexpr (std::is_floating_point_v<std::decay_t<decltype(value)>>) {
      rc.derived.push_back(fmt::format("{} = {} ({})", field, format_float(value), how));
    } else {
      rc.derived.push_back(fmt::format("{} = {} ({})", field, value, how));
    }
  };

  // A key whose support rule admits one behaviour (others were refused as not supported yet): the engine does
  // exactly that; the read states it and records the key as used (config/key_use.h).
  auto only = [&](const char* key, bool holds) {
    if (rc.planning) return;  // planning keeps refused values (listed in the warnings): nothing is trained
    PRIMUS_CHECK(holds, "{}: a value its support rule should have refused reached the mapper", key);
  };
  // primus_turbo selects Primus-Turbo's kernels: ours are the only kernels here. float8 (TorchTitan's older
  // name) and quantize.linear.float8 turn on FP8 linears with the quantize.linear.float8 section's recipe.
  bool float8 = false;
  only("model.converters", [&] {
    for (const Value& c : k.value("model.converters").items()) {
      const std::string& name = c.as_string();
      if (name == "float8" || name == "quantize.linear.float8")
        float8 = true;
      else if (name != "primus_turbo")
        return false;
    }
    return true;
  }());
  {
    // The float8 section's keys are read (and so recorded as used) whether or not the converter is on.
    const std::string recipe = k.is_null("quantize.linear.float8.recipe_name")
                                   ? "tensorwise"
                                   : k.s("quantize.linear.float8.recipe_name");
    std::vector<std::string> filter;
    for (const Value& v : k.value("quantize.linear.float8.filter_fqns").items())
      filter.push_back(v.as_string());
    if (float8) {
      Fp8Config& f = t.fp8;
      f.enabled = true;
      // torchao's float8 recipes: E4M3 forward, E5M2 gradients for tensorwise; rowwise keeps E4M3 throughout.
      f.recipe = recipe == "tensorwise" ? "tensorwise" : "rowwise";
      f.format = recipe == "tensorwise" ? "hybrid" : "e4m3";
      f.wgrad = recipe != "rowwise_with_gw_hp";
      f.filter_fqns = filter;
      // torchao converts every linear, the output layer too, unless filter_fqns names it ("output").
      f.output_layer = true;
      f.source = fmt::format("model.converters float8 ({})", k.origin("model.converters").str());
      src("fp8", "model.converters");
    }
  }

  // Model: family + flavor.
  const std::string family = k.s("model.name");
  const std::string flavor = k.s("model.flavor");
  if (family != "llama3" && family != "qwen3" && family != "deepseek_v3")
    throw NotSupportedError(
        fmt::format("{}: not supported yet: model {} ({})", k.origin("model.name").str(), family,
                    family == "flux" ? "a diffusion model" : "a TorchTitan family without a mapping here"),
        "the TorchTitan families here are llama3, qwen3 (dense) and deepseek_v3");
  if (family == "deepseek_v3" && find_flavor(family, flavor) == nullptr)
    throw NotSupportedError(
        fmt::format("{}: not supported yet: deepseek_v3 flavor '{}' (its sizes are not tabulated here; 16B, "
                    "236B and 671B are)",
                    k.origin("model.flavor").str(), flavor),
        "use model.flavor 16B, 236B or 671B");
  // TorchTitan's MoE flavors of Qwen3 (torchtitan/models/qwen3/__init__.py).
  if (family == "qwen3" && (flavor == "30B-A3B" || flavor == "235B-A22B" || flavor == "debugmodel_moe"))
    throw NotSupportedError(fmt::format("{}: not supported yet: MoE (model qwen3 flavor {})",
                                        k.origin("model.flavor").str(), flavor));
  const Flavor* f = find_flavor(family, flavor);
  if (f == nullptr) {
    std::vector<std::string> names;
    for (const Flavor& x : torchtitan_flavors())
      if (x.family == family) names.push_back(x.flavor);
    throw ConfigError(
        fmt::format("{}: unknown model.flavor '{}' for model.name {}{}", k.origin("model.flavor").str(),
                    flavor, family, did_you_mean_text(flavor, names)),
        fmt::format("{} flavors: {}", family, fmt::join(names, ", ")));
  }
  ModelConfig& m = t.model;
  m = f->model;
  m.name = family + "_" + flavor;
  for (const char* field : {"num_layers", "hidden_size", "num_attention_heads", "num_query_groups",
                            "kv_channels", "ffn_hidden_size"})
    rc.set_source(field, "model.flavor", k.origin("model.flavor"));
  // TorchTitan's balanced round-robin routing (TokenChoiceTopKRouter._debug_force_load_balance_routing); a
  // dense flavor has no router to force.
  if (k.b("debug.moe_force_load_balance") && m.moe.enabled()) m.moe.force_balance = "round_robin";
  if (!k.is_null("model.n_layers")) {  // Primus's model override (model_override_patches.py)
    m.num_layers = k.i("model.n_layers");
    rc.set_source("num_layers", "model.n_layers", k.origin("model.n_layers"));
  }

  // Vocabulary: TorchTitan takes the tokenizer's size as is (no padding).
  const std::string assets = k.s("model.hf_assets_path");
  t.data.tokenizer_type = assets.empty() ? "ByteTokenizer" : "HuggingFaceTokenizer";
  t.data.tokenizer_model = assets;
  VocabChoice choice;
  try {
    choice = choose_vocab_size(t.data.tokenizer_type, assets, std::nullopt);
  } catch (const ConfigError& e) {
    throw ConfigError(
        fmt::format("{} [model.hf_assets_path from {}]", e.what(), k.origin("model.hf_assets_path").str()),
        e.hint());
  }
  m.vocab_size = choice.size;
  m.make_vocab_size_divisible_by = 1;
  m.padded_vocab_size = m.vocab_size;
  derived("vocab_size", m.vocab_size, choice.how + "; TorchTitan does not pad the vocabulary");

  // Training loop.
  t.micro_batch_size = k.i("training.local_batch_size");
  src("micro_batch_size", "training.local_batch_size");
  t.data.seq_length = k.i("training.seq_len");
  src("seq_length", "training.seq_len");
  m.max_position_embeddings = t.data.seq_length;
  derived("max_position_embeddings", m.max_position_embeddings, "= training.seq_len, as TorchTitan");
  if (m.mla.enabled && t.data.seq_length <= m.mla.original_max_position) {
    // TorchTitan's deepseek_v3 scales RoPE (YaRN) and the softmax only for sequences longer than the original
    // context; shorter runs use plain RoPE and 1/sqrt(d).
    m.mla.yarn = false;
    m.mla.rotary_scaling_factor = 1.0;
    derived("mla.yarn", "off",
            fmt::format("training.seq_len {} <= the original context {}, as TorchTitan", t.data.seq_length,
                        m.mla.original_max_position));
  }
  t.train_iters = k.i("training.steps");
  src("train_iters", "training.steps");
  t.optim.clip_grad = k.is_null("training.max_norm") ? 0.0 : k.f("training.max_norm");
  t.bf16 = k.s("training.mixed_precision_param") == "bfloat16";
  t.seed = k.is_null("debug.seed") ? 1234 : k.i("debug.seed");
  t.device = k.s("device");
  t.gemm_tuning_file = k.s("gemm_tuning_file");
  t.deterministic = k.b("debug.deterministic");

  // Data.
  DataConfig& d = t.data;
  d.mock_data = k.b("training.mock_data");
  d.text_data_path = k.s("text_data_path");
  if (!k.is_null("training.dataset_path")) {
    if (!d.text_data_path.empty())
      throw ConfigError(
          fmt::format("both text_data_path ({}) and training.dataset_path ({}) are set (rule: set one)",
                      k.origin("text_data_path").str(), k.origin("training.dataset_path").str()));
    d.text_data_path = k.s("training.dataset_path");
  }
  const std::string dataset = k.s("training.dataset");
  if (!d.mock_data && d.text_data_path.empty())
    rc.warnings.push_back(fmt::format(
        "training.dataset '{}' ({}) is a HuggingFace dataset: Primus-C++ reads local text only; set "
        "training.dataset_path (or text_data_path), or training.mock_data: true, or the run stops when it "
        "opens "
        "its data",
        dataset, k.origin("training.dataset").str()));

  // Optimizer and schedule.
  OptimConfig& o = t.optim;
  only("optimizer.name", k.s("optimizer.name") == "AdamW");
  o.optimizer = "adam";  // AdamW (decoupled weight decay), Megatron's "adam"
  o.lr = k.f("optimizer.lr");
  o.adam_eps = k.f("optimizer.eps");
  o.adam_beta1 = k.f("optimizer.beta1");
  o.adam_beta2 = k.f("optimizer.beta2");
  o.weight_decay = k.f("optimizer.weight_decay");
  src("lr", "optimizer.lr");
  o.lr_warmup_iters = k.i("lr_scheduler.warmup_steps");
  src("lr_warmup_iters", "lr_scheduler.warmup_steps");
  // TorchTitan (lr_scheduler.py) shortens a warm-up longer than the run to the run, with a warning; the run
  // then ends at the peak lr, which a decay that never starts (one step past the end) reproduces here.
  if (o.lr_warmup_iters > t.train_iters) {
    rc.warnings.push_back(fmt::format(
        "lr_scheduler.warmup_steps {} ({}) exceeds training.steps {}: warm-up "
        "shortened to {}, as TorchTitan does",
        o.lr_warmup_iters, k.origin("lr_scheduler.warmup_steps").str(), t.train_iters, t.train_iters));
    o.lr_warmup_iters = t.train_iters;
  }
  const std::string decay_type = k.s("lr_scheduler.decay_type");
  if (o.lr_warmup_iters > 0 && o.lr_warmup_iters == t.train_iters) {
    o.lr_decay_iters = t.train_iters + 1;
    derived("lr_decay_iters", *o.lr_decay_iters, "= training.steps + 1: the warm-up fills the run, no decay");
  } else {
    o.lr_decay_iters = t.train_iters;
    derived("lr_decay_iters", t.train_iters,
            "= training.steps: the decay runs from the end of warm-up to the last step");
  }
  // TorchTitan's warmup-stable-decay (lr_scheduler.py): decay_ratio of the steps (rounded) anneal at the end,
  // the steps between warm-up and anneal keep the peak lr; null: the anneal takes every step after the
  // warm-up. Megatron's WSD expresses it (sqrt = its minus_sqrt); a plain linear / cosine decay over all the
  // steps after warm-up stays Megatron's linear / cosine style.
  const bool ratio = !k.is_null("lr_scheduler.decay_ratio");
  if (ratio || decay_type == "sqrt") {
    const int64_t after_warmup = std::max<int64_t>(0, t.train_iters - o.lr_warmup_iters);
    int64_t anneal = ratio
                         ? std::llround(static_cast<double>(t.train_iters) * k.f("lr_scheduler.decay_ratio"))
                         : after_warmup;
    if (anneal > after_warmup) {
      rc.warnings.push_back(fmt::format(
          "lr_scheduler.decay_ratio ({}) gives {} decay steps, more than the {} after the warm-up: the decay "
          "takes those {}",
          k.origin("lr_scheduler.decay_ratio").str(), anneal, after_warmup, after_warmup));
      anneal = after_warmup;
    }
    if (anneal == 0) {
      o.lr_decay_style = "constant";
      derived("lr_decay_style", o.lr_decay_style, "no decay steps: the peak lr after warm-up");
    } else {
      o.lr_decay_style = "WSD";
      o.lr_wsd_decay_iters = anneal;
      o.lr_wsd_decay_style = decay_type == "sqrt" ? "minus_sqrt" : decay_type;
      derived("lr_decay_style", o.lr_decay_style,
              fmt::format("lr_scheduler.decay_type {} over the last {} steps (Megatron's WSD)", decay_type,
                          anneal));
      derived("lr_wsd_decay_iters", anneal,
              ratio ? "round(training.steps x lr_scheduler.decay_ratio)" : "training.steps - warm-up");
    }
  } else {
    o.lr_decay_style = decay_type;
  }
  const double factor = k.is_null("lr_scheduler.min_lr_factor") ? 0.0 : k.f("lr_scheduler.min_lr_factor");
  o.min_lr = o.lr * factor;
  derived("min_lr", o.min_lr, fmt::format("optimizer.lr x lr_scheduler.min_lr_factor {}", factor));

  // Parallelism.
  ParallelConfig& p = t.parallel;
  p.tensor_model_parallel_size = k.i("parallelism.tensor_parallel_degree");
  // TorchTitan's tensor parallelism always shards the norms' tokens (its SequenceParallel plan).
  p.sequence_parallel = p.tensor_model_parallel_size > 1;
  const bool async_tp = k.b("parallelism.enable_async_tensor_parallel");  // read at any TP
  p.cp_comm_type = k.s("parallelism.context_parallel_rotate_method");
  p.tp_comm_overlap = p.tensor_model_parallel_size > 1 && async_tp;  // its TP is always sequence-parallel
  p.pipeline_model_parallel_size = k.i("parallelism.pipeline_parallel_degree");
  p.context_parallel_size = k.i("parallelism.context_parallel_degree");
  p.expert_model_parallel_size = k.i("parallelism.expert_parallel_degree");
  p.data_parallel_replicate_degree = k.i("parallelism.data_parallel_replicate_degree");
  src("tensor_model_parallel_size", "parallelism.tensor_parallel_degree");
  src("pipeline_model_parallel_size", "parallelism.pipeline_parallel_degree");
  src("context_parallel_size", "parallelism.context_parallel_degree");
  const int64_t others = p.data_parallel_replicate_degree * p.tensor_model_parallel_size *
                         p.pipeline_model_parallel_size * p.context_parallel_size;
  int64_t shard = k.i("parallelism.data_parallel_shard_degree");
  if (shard == -1) {
    shard = others > 0 && rc.world_size % others == 0 ? rc.world_size / others : 1;
    derived("data_parallel_shard_degree", shard, "-1: what the world size leaves");
  }
  if (shard * others != rc.world_size)
    throw ConfigError(
        fmt::format("parallel degrees multiply to {} (dp_replicate {} x dp_shard {} x cp {} x tp {} x "
                    "pp {}) but WORLD_SIZE is {} (rule: their product must equal the world size) [{}]",
                    shard * others, p.data_parallel_replicate_degree, shard, p.context_parallel_size,
                    p.tensor_model_parallel_size, p.pipeline_model_parallel_size, rc.world_size,
                    k.origin("parallelism.data_parallel_shard_degree").str()));
  p.use_torch_fsdp2 = shard > 1;
  p.data_parallel_shard_degree = shard;
  p.distributed_timeout_s = static_cast<double>(k.i("comm.train_timeout_seconds"));
  const int64_t dp = shard * p.data_parallel_replicate_degree;
  const int64_t gbs = k.i("training.global_batch_size");
  if (gbs == -1) {
    t.global_batch_size = t.micro_batch_size * dp;
    derived("global_batch_size", t.global_batch_size, "-1: training.local_batch_size x data-parallel size");
  } else {
    t.global_batch_size = gbs;
    src("global_batch_size", "training.global_batch_size");
  }

  // Recomputation: "full" recomputes every layer.
  const std::string mode = k.s("activation_checkpoint.mode");
  if (mode == "full") {
    t.recompute.granularity = "full";
    t.recompute.method = "uniform";
    t.recompute.num_layers = 1;
  } else if (mode == "selective") {
    t.recompute.granularity = "selective";
  }
  src("recompute_granularity", "activation_checkpoint.mode");

  // Checkpoints: TorchTitan saves into and resumes from {dump folder}/{checkpoint.folder}.
  // The settings are read whether or not checkpoint.enable is on (they apply once it is).
  CheckpointConfig& c = t.checkpoint;
  const std::string folder = k.s("checkpoint.folder");
  const int64_t interval = k.i("checkpoint.interval"), keep = k.i("checkpoint.keep_latest_k");
  const bool async_save = k.s("checkpoint.async_mode") != "disabled";
  const bool model_only = k.b("checkpoint.initial_load_model_only");
  if (k.b("checkpoint.enable")) {
    c.save = t.run.run_dir() + "/" + folder;
    c.auto_continue_train = true;
    c.save_interval = interval;
    c.keep_latest_k = keep;
    if (c.keep_latest_k == 1)
      throw ConfigError(
          fmt::format("{}: checkpoint.keep_latest_k: 1 (rule: 0 = keep all, or >= 2, as TorchTitan)",
                      k.origin("checkpoint.keep_latest_k").str()));
    c.async_save = async_save;
    c.exit_on_missing_checkpoint = false;
    derived("save", c.save, "checkpoint.enable: {run dir}/checkpoint.folder");
  }
  if (!k.is_null("checkpoint.initial_load_path")) {
    c.load = k.s("checkpoint.initial_load_path");
    c.finetune = model_only;
    c.no_load_optim = c.finetune;
    c.no_load_rng = c.finetune;
  }

  // Guards: TorchTitan always checks the loss and gradient norm for NaN/Inf.
  t.guards.nan_policy = k.s("nan_policy");
  t.guards.spiky_loss_policy = k.s("spiky_loss_policy");
  t.guards.spiky_loss_factor = k.f("spiky_loss_factor");

  t.stability.hang_timeout_s = k.f("hang_timeout_s");
  t.stability.straggler_factor = k.f("straggler_factor");

  // Logging.
  t.logging.log_interval = k.i("metrics.log_freq");
  map_tensorboard_torchtitan(k, t.logging.tensorboard);
  t.logging.eval_interval = 0;
  t.logging.eval_iters = 0;
}

}  // namespace primus::config
