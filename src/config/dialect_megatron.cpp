// Maps the Megatron dialect (flat keys, Megatron-LM's argument names) into TrainConfig, filling in what
// Megatron derives itself (ffn_hidden_size, kv_channels, num_query_groups, the vocabulary,
// max_position_embeddings).
#include <fmt/format.h>

#include <algorithm>
#include <type_traits>

#include <filesystem>

#include "config/dialect_tensorboard.h"
#include "config/key_builders.h"
#include "config/load_config.h"
#include "config/not_supported.h"
#include "config/vocab.h"
#include "core/error.h"

namespace primus::config {
namespace {

std::vector<std::string> string_list(const Value& v) {
  std::vector<std::string> out;
  if (v.is_null()) return out;
  if (v.is_list()) {
    for (const Value& item : v.items()) out.push_back(item.is_string() ? item.as_string() : item.repr());
    return out;
  }
  // Megatron takes `--data-path 0.3 a 0.7 b`; a YAML string holds the same words.
  std::string text = v.is_string() ? v.as_string() : v.repr();
  size_t pos = 0;
  while (pos < text.size()) {
    size_t start = text.find_first_not_of(" \t\n", pos);
    if (start == std::string::npos) break;
    size_t end = text.find_first_of(" \t\n", start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    pos = end == std::string::npos ? text.size() : end;
  }
  return out;
}

std::string family_of(const ModelConfig& m) {
  if (m.mla.enabled)
    return m.mtp_num_layers > 0 || m.moe.score_function == "sigmoid" ? "deepseek_v3" : "deepseek_v2";
  if (m.moe.enabled()) {
    if (m.qk_layernorm) return "qwen3_moe";
    if (m.add_qkv_bias) return "qwen2_moe";
    return "mixtral";
  }
  if (m.qk_layernorm) return "qwen3";
  if (m.add_qkv_bias) return "qwen2";
  return "llama";
}

// Megatron's precision-aware optimizer: the Adam moments' dtypes (bf16 or fp32), with Megatron's rule that
// every optimizer dtype stays fp32 without it. Gradients stay fp32 here whatever main_grads_dtype says.
void map_precision_aware_optimizer(const CheckedKeys& k, OptimConfig& o, ResolvedConfig& rc) {
  const bool on = k.b("use_precision_aware_optimizer");
  for (const char* key : {"main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"}) {
    const std::string v = k.s(key);
    if (!on && v != "fp32")
      throw ConfigError(fmt::format("{}: {}={} needs use_precision_aware_optimizer: true (without it {} can "
                                    "only be fp32, as in Megatron)",
                                    k.origin(key).str(), key, v, key),
                        "set use_precision_aware_optimizer: true, or " + std::string(key) + ": fp32");
  }
  auto moment = [&](const char* key) { return k.s(key) == "bf16" ? DType::kBF16 : DType::kF32; };
  o.exp_avg_dtype = moment("exp_avg_dtype");
  o.exp_avg_sq_dtype = moment("exp_avg_sq_dtype");
  if (on && k.s("main_grads_dtype") == "bf16")
    rc.warnings.push_back(fmt::format(
        "{}: main_grads_dtype=bf16: gradients are accumulated and reduced in fp32 here (more precise than "
        "Megatron's bf16 gradient buffer, and 2 more bytes per parameter; the memory plan counts them)",
        k.origin("main_grads_dtype").str()));
  // A stored bf16 value moves only by more than half its ulp (2^-9 to 2^-8 of it, by mantissa): with beta2
  // above 1 - 2^-8 the second moment's decay step, (1 - beta2) of it, rounds away at some values (above
  // 1 - 2^-9 at all of them), and the moment stops decaying there.
  if (o.exp_avg_sq_dtype == DType::kBF16 && o.adam_beta2 > 1.0 - 1.0 / 256)
    rc.warnings.push_back(fmt::format(
        "{}: exp_avg_sq_dtype=bf16 with adam_beta2={}: the second moment's decay step ({:.2g} of it) is "
        "below half a bf16 ulp at {} values, rounds away and leaves the moment stuck there; use adam_beta2 "
        "<= 0.996 or exp_avg_sq_dtype: fp32",
        k.origin("exp_avg_sq_dtype").str(), o.adam_beta2, 1.0 - o.adam_beta2,
        o.adam_beta2 > 1.0 - 1.0 / 512 ? "all" : "some"));
}

}  // namespace

void map_megatron(ResolvedConfig& rc) {
  const CheckedKeys& k = rc.keys;
  TrainConfig& t = rc.train;
  ModelConfig& m = t.model;
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
  auto zero_or_null = [&](const char* key) { return k.is_null(key) || k.f(key) == 0.0; };
  only("model_type", k.s("model_type") == "gpt");  // decoder-only
  only("position_embedding_type", k.s("position_embedding_type") == "rope");
  only("rotary_interleaved", !k.b("rotary_interleaved"));  // rotate-half pairs
  only("hidden_dropout", zero_or_null("hidden_dropout"));  // no dropout
  only("attention_dropout", zero_or_null("attention_dropout"));

  // Model.
  if (!k.is_null("model")) m.name = std::filesystem::path(k.s("model")).stem().string();
  m.num_layers = k.i("num_layers");
  m.hidden_size = k.i("hidden_size");
  m.num_attention_heads = k.i("num_attention_heads");
  src("num_layers", "num_layers");
  src("hidden_size", "hidden_size");
  src("num_attention_heads", "num_attention_heads");
  if (k.b("group_query_attention")) {
    if (k.is_null("num_query_groups"))
      throw ConfigError(
          fmt::format("{}: group_query_attention is true but num_query_groups is null (rule: GQA "
                      "needs num_query_groups)",
                      k.origin("group_query_attention").str()));
    m.num_query_groups = k.i("num_query_groups");
    src("num_query_groups", "num_query_groups");
  } else {
    m.num_query_groups = m.num_attention_heads;
    derived("num_query_groups", m.num_query_groups, "= num_attention_heads: group_query_attention is false");
    if (!k.is_null("num_query_groups") && k.i("num_query_groups") != m.num_attention_heads)
      rc.warnings.push_back(
          fmt::format("num_query_groups={} ({}) has no effect: group_query_attention is false",
                      k.i("num_query_groups"), k.origin("num_query_groups").str()));
  }
  if (!k.is_null("kv_channels")) {
    m.kv_channels = k.i("kv_channels");
    src("kv_channels", "kv_channels");
  } else {
    m.kv_channels = m.num_attention_heads > 0 ? m.hidden_size / m.num_attention_heads : 0;
    derived("kv_channels", m.kv_channels, "hidden_size / num_attention_heads");
  }
  m.swiglu = k.b("swiglu");
  if (!k.is_null("ffn_hidden_size")) {
    m.ffn_hidden_size = k.i("ffn_hidden_size");
    src("ffn_hidden_size", "ffn_hidden_size");
  } else if (m.swiglu) {
    m.ffn_hidden_size = (4 * m.hidden_size * 2 / 3) / 64 * 64;
    derived("ffn_hidden_size", m.ffn_hidden_size, "int(4*hidden_size*2/3 / 64)*64 with swiglu, as Megatron");
  } else {
    m.ffn_hidden_size = 4 * m.hidden_size;
    derived("ffn_hidden_size", m.ffn_hidden_size, "4*hidden_size");
  }
  m.untie_embeddings_and_output_weights = k.b("untie_embeddings_and_output_weights");
  m.add_qkv_bias = k.b("add_qkv_bias");
  m.add_bias_linear = k.b("add_bias_linear");
  m.qk_layernorm = k.b("qk_layernorm");
  m.normalization = k.s("normalization");
  m.norm_epsilon = k.f("norm_epsilon");
  if (!k.is_null("layernorm_epsilon")) {  // Megatron's field name; Primus's newer presets write it
    m.norm_epsilon = k.f("layernorm_epsilon");
    rc.set_source("model.norm_epsilon", "layernorm_epsilon", k.origin("layernorm_epsilon"));
  }
  m.rotary_base = k.f("rotary_base");
  if (!k.is_null("rotary_percent")) m.rotary_percent = k.f("rotary_percent");
  src("rotary_percent", "rotary_percent");
  if (!k.is_null("final_logit_softcapping")) m.final_logit_softcap = k.f("final_logit_softcapping");
  m.use_rope_scaling = k.b("use_rope_scaling");
  m.rope_scaling_factor = k.f("rope_scaling_factor");
  m.init_method_std = k.f("init_method_std");
  map_megatron_moe(rc);
  map_megatron_mla(rc);
  map_megatron_sft(rc);
  m.family = family_of(m);

  // Sequence and positions.
  if (k.is_null("seq_length"))
    throw ConfigError(fmt::format("{}: seq_length must be set", k.origin("seq_length").str()));
  t.data.seq_length = k.i("seq_length");
  src("seq_length", "seq_length");
  if (!k.is_null("max_position_embeddings")) {
    m.max_position_embeddings = k.i("max_position_embeddings");
    src("max_position_embeddings", "max_position_embeddings");
  } else {
    m.max_position_embeddings = t.data.seq_length;
    derived("max_position_embeddings", m.max_position_embeddings, "= seq_length");
  }

  // Tokenizer and vocabulary.
  t.data.tokenizer_type = k.s("tokenizer_type");
  t.data.tokenizer_model = k.s("tokenizer_model");
  t.data.vocab_file = k.s("vocab_file");
  t.data.merge_file = k.s("merge_file");
  std::optional<int64_t> vocab;
  if (!k.is_null("vocab_size")) vocab = k.i("vocab_size");
  t.data.null_vocab_size = vocab.value_or(0);
  VocabChoice choice;
  try {
    choice = choose_vocab_size(t.data.tokenizer_type, t.data.tokenizer_model, vocab, t.data.vocab_file);
  } catch (const ConfigError& e) {
    const std::string msg = fmt::format("{} [tokenizer_type from {}, tokenizer_model from {}]", e.what(),
                                        k.origin("tokenizer_type").str(), k.origin("tokenizer_model").str());
    if (!rc.planning) throw ConfigError(msg, e.hint());
    rc.warnings.push_back("planning only, training would refuse: " + msg +
                          "; the vocabulary size is left at 0");
    choice = VocabChoice{};
  }
  m.vocab_size = choice.size;
  if (vocab) {
    src("vocab_size", "vocab_size");
  } else {
    derived("vocab_size", m.vocab_size, choice.how);
  }
  m.make_vocab_size_divisible_by = k.i("make_vocab_size_divisible_by");
  const int64_t tp = k.i("tensor_model_parallel_size");
  m.padded_vocab_size = padded_vocab_size(m.vocab_size, m.make_vocab_size_divisible_by, tp);
  derived("padded_vocab_size", m.padded_vocab_size,
          fmt::format("{} rounded up to a multiple of lcm(make_vocab_size_divisible_by {}, TP {})",
                      m.vocab_size, m.make_vocab_size_divisible_by, tp));

  // Training and optimizer.
  if (k.is_null("train_iters"))
    throw ConfigError(fmt::format("{}: train_iters must be set (train_samples is not supported yet)",
                                  k.origin("train_iters").str()));
  t.train_iters = k.i("train_iters");
  src("train_iters", "train_iters");
  t.micro_batch_size = k.i("micro_batch_size");
  src("micro_batch_size", "micro_batch_size");
  t.seed = k.i("seed");
  t.bf16 = k.b("bf16");
  {
    // Every FP8 key is read (and so recorded as used) whether or not fp8 turns it on.
    Fp8Config f;
    f.recipe = k.s("fp8_recipe");
    f.wgrad = k.b("fp8_wgrad");
    f.amax_history_len = k.i("fp8_amax_history_len");
    f.amax_compute_algo = k.s("fp8_amax_compute_algo");
    f.margin = k.i("fp8_margin");
    f.output_layer = k.b("fp8_output_layer");
    const int64_t bf16_start = k.i("num_layers_at_start_in_bf16"),
                  bf16_end = k.i("num_layers_at_end_in_bf16");
    if (k.b("first_last_layers_bf16")) {
      f.bf16_layers_at_start = bf16_start;
      f.bf16_layers_at_end = bf16_end;
    }
    if (!k.is_null("fp8")) {
      f.enabled = true;
      f.format = k.s("fp8");
      f.source = fmt::format("fp8: {} ({})", f.format, k.origin("fp8").str());
      src("fp8", "fp8");
      t.fp8 = f;
    }
  }
  t.device = k.s("device");
  t.gemm_tuning_file = k.s("gemm_tuning_file");
  t.deterministic = k.b("deterministic_mode");

  OptimConfig& o = t.optim;
  o.optimizer = k.s("optimizer");
  if (k.is_null("lr")) throw ConfigError(fmt::format("{}: lr must be set", k.origin("lr").str()));
  o.lr = k.f("lr");
  o.min_lr = k.f("min_lr");
  src("lr", "lr");
  src("min_lr", "min_lr");
  o.lr_decay_style = k.s("lr_decay_style");
  if (!k.is_null("lr_decay_iters")) {
    o.lr_decay_iters = k.i("lr_decay_iters");
    src("lr_decay_iters", "lr_decay_iters");
  } else {
    derived("lr_decay_iters", t.train_iters, "null: = train_iters");
  }
  o.lr_warmup_iters = k.i("lr_warmup_iters");
  src("lr_warmup_iters", "lr_warmup_iters");
  if (!k.is_null("lr_warmup_fraction")) {
    if (o.lr_warmup_iters != 0)
      throw ConfigError(fmt::format(
          "lr_warmup_fraction ({}) and lr_warmup_iters={} ({}) are both set (rule: set "
          "only one)",
          k.origin("lr_warmup_fraction").str(), o.lr_warmup_iters, k.origin("lr_warmup_iters").str()));
    const int64_t decay = o.lr_decay_iters.value_or(t.train_iters);
    o.lr_warmup_iters = static_cast<int64_t>(k.f("lr_warmup_fraction") * static_cast<double>(decay));
    derived("lr_warmup_iters", o.lr_warmup_iters, "lr_warmup_fraction x lr_decay_iters");
  }
  o.lr_wsd_decay_style = k.s("lr_wsd_decay_style");
  if (o.lr_decay_style == "WSD") {
    // Megatron asserts the anneal's length is given.
    if (k.is_null("lr_wsd_decay_iters"))
      throw ConfigError(
          fmt::format("{}: lr_decay_style WSD needs lr_wsd_decay_iters (the anneal's iterations)",
                      k.origin("lr_decay_style").str()));
    o.lr_wsd_decay_iters = k.i("lr_wsd_decay_iters");
    src("lr_wsd_decay_iters", "lr_wsd_decay_iters");
  } else if (!k.is_null("lr_wsd_decay_iters")) {
    (void)k.i("lr_wsd_decay_iters");  // read: set, it has no effect without WSD
    rc.warnings.push_back(fmt::format("{}: lr_wsd_decay_iters has no effect: lr_decay_style is {}, not WSD",
                                      k.origin("lr_wsd_decay_iters").str(), o.lr_decay_style));
  }
  o.weight_decay = k.f("weight_decay");
  o.adam_beta1 = k.f("adam_beta1");
  o.adam_beta2 = k.f("adam_beta2");
  o.adam_eps = k.f("adam_eps");
  o.clip_grad = k.f("clip_grad");
  map_precision_aware_optimizer(k, o, rc);

  // Data.
  DataConfig& d = t.data;
  d.mock_data = k.b("mock_data");
  d.data_path = string_list(k.value("data_path"));
  d.train_data_path = string_list(k.value("train_data_path"));
  d.valid_data_path = string_list(k.value("valid_data_path"));
  d.test_data_path = string_list(k.value("test_data_path"));
  d.data_cache_path = k.s("data_cache_path");
  d.text_data_path = k.s("text_data_path");
  d.split = k.is_null("split") ? "969,30,1" : k.s("split");
  d.eod_mask_loss = k.b("eod_mask_loss");

  // Parallelism (degrees other than 1 were rejected as "not supported yet").
  ParallelConfig& p = t.parallel;
  p.tensor_model_parallel_size = tp;
  // Megatron turns sequence parallelism off at TP 1 (Primus files often leave it on there).
  const bool sp = k.b("sequence_parallel"), tp_overlap = k.b("tp_comm_overlap");  // read at any TP
  p.sequence_parallel = tp > 1 && sp;
  if (tp == 1 && sp)
    rc.warnings.push_back(fmt::format("{}: sequence_parallel has no effect at tensor_model_parallel_size 1",
                                      k.origin("sequence_parallel").str()));
  // Async TP splits the sequence-parallel all-gathers / reduce-scatters around the GEMMs, so (as in Megatron)
  // it needs sequence parallelism; at TP 1 there is nothing to overlap.
  if (tp > 1 && tp_overlap && !sp)
    throw ConfigError(fmt::format("{}: tp_comm_overlap needs sequence_parallel: true at "
                                  "tensor_model_parallel_size {} (it overlaps the sequence-parallel "
                                  "all-gathers and reduce-scatters with the GEMMs)",
                                  k.origin("tp_comm_overlap").str(), tp),
                      "set sequence_parallel: true, or tp_comm_overlap: false");
  p.tp_comm_overlap = tp > 1 && tp_overlap;
  p.pipeline_model_parallel_size = k.i("pipeline_model_parallel_size");
  p.context_parallel_size = k.i("context_parallel_size");
  // Megatron also takes a per-layer list; every value runs as all_gather (the same attention).
  const Value& cct = k.value("cp_comm_type");
  p.cp_comm_type = cct.is_string() ? cct.as_string() : cct.is_null() ? "p2p" : "per-layer list";
  if (p.context_parallel_size > 1 && p.cp_comm_type != "all_gather")
    rc.warnings.push_back(
        fmt::format("{}: cp_comm_type {} runs as all_gather (the same attention; the ring with "
                    "overlapped transfers is not implemented yet)",
                    k.origin("cp_comm_type").str(), p.cp_comm_type));
  p.expert_model_parallel_size = k.i("expert_model_parallel_size");
  p.data_parallel_replicate_degree =
      k.is_null("data_parallel_replicate_degree") ? 1 : k.i("data_parallel_replicate_degree");
  p.use_distributed_optimizer = k.b("use_distributed_optimizer");
  p.use_torch_fsdp2 = k.b("use_torch_fsdp2");
  p.overlap_grad_reduce = k.b("overlap_grad_reduce");
  p.overlap_param_gather = k.b("overlap_param_gather");
  p.grad_reduce_in_bf16 = k.b("grad_reduce_in_bf16");
  p.data_parallel_sharding_strategy = k.s("data_parallel_sharding_strategy");
  p.distributed_timeout_s = 60.0 * static_cast<double>(k.i("distributed_timeout_minutes"));
  src("tensor_model_parallel_size", "tensor_model_parallel_size");
  src("pipeline_model_parallel_size", "pipeline_model_parallel_size");
  src("context_parallel_size", "context_parallel_size");

  // Global batch: null means one micro-batch per data-parallel rank (Megatron).
  const int64_t model_parallel =
      p.tensor_model_parallel_size * p.pipeline_model_parallel_size * p.context_parallel_size;
  const int64_t dp =
      model_parallel > 0 && rc.world_size % model_parallel == 0 ? rc.world_size / model_parallel : 1;
  if (k.is_null("global_batch_size")) {
    t.global_batch_size = t.micro_batch_size * dp;
    derived("global_batch_size", t.global_batch_size, "null: micro_batch_size x data-parallel size");
  } else {
    t.global_batch_size = k.i("global_batch_size");
    src("global_batch_size", "global_batch_size");
  }

  // Recomputation.
  RecomputeConfig& r = t.recompute;
  r.granularity = k.s("recompute_granularity");
  if (k.b("recompute_activations")) {
    if (!r.granularity.empty() && r.granularity != "selective")
      throw ConfigError(fmt::format(
          "recompute_activations is true ({}) but recompute_granularity={} ({}) (rule: "
          "recompute_activations means selective)",
          k.origin("recompute_activations").str(), r.granularity, k.origin("recompute_granularity").str()));
    r.granularity = "selective";
    derived("recompute_granularity", "selective", "recompute_activations is true");
  } else {
    src("recompute_granularity", "recompute_granularity");
  }
  r.method = k.s("recompute_method");
  src("recompute_method", "recompute_method");
  if (!k.is_null("recompute_num_layers")) r.num_layers = k.i("recompute_num_layers");
  src("recompute_num_layers", "recompute_num_layers");
  // Primus's recompute_layer_ids (its key check admitted the value), sorted and de-duplicated as Primus's
  // validate_specified_recompute_layers does.
  if (!k.is_null("recompute_layer_ids")) r.layer_ids = *keys::layer_ids_of(k.value("recompute_layer_ids"));
  std::sort(r.layer_ids.begin(), r.layer_ids.end());
  r.layer_ids.erase(std::unique(r.layer_ids.begin(), r.layer_ids.end()), r.layer_ids.end());
  if (!k.is_null("recompute_layer_ids") && r.layer_ids.empty())
    throw ConfigError(fmt::format("{}: recompute_layer_ids lists no layer (rule: null, or at least one id)",
                                  k.origin("recompute_layer_ids").str()));
  src("recompute_layer_ids", "recompute_layer_ids");

  // Checkpoints.
  CheckpointConfig& c = t.checkpoint;
  c.save = k.s("save");
  c.load = k.s("load");
  c.save_interval = k.is_null("save_interval") ? 0 : k.i("save_interval");
  c.no_save_optim = k.b("no_save_optim");
  c.no_save_rng = k.b("no_save_rng");
  c.no_load_optim = k.b("no_load_optim");
  c.no_load_rng = k.b("no_load_rng");
  c.finetune = k.b("finetune");
  c.auto_continue_train = k.b("auto_continue_train");
  c.async_save = k.b("async_save");
  c.disable_last_saving = k.b("disable_last_saving");
  c.exit_on_missing_checkpoint = k.b("exit_on_missing_checkpoint");
  c.exit_interval = k.is_null("exit_interval") ? 0 : k.i("exit_interval");
  c.exit_duration_in_mins = k.is_null("exit_duration_in_mins") ? 0.0 : k.f("exit_duration_in_mins");
  c.keep_latest_k = k.i("keep_latest_k");
  if (c.keep_latest_k == 1)
    throw ConfigError(
        fmt::format("{}: keep_latest_k: 1 (rule: 0 = keep all, or >= 2, so that a valid checkpoint "
                    "exists while the newest is written)",
                    k.origin("keep_latest_k").str()));

  // Guards.
  GuardConfig& g = t.guards;
  g.check_nan = k.b("check_for_nan_in_loss_and_grad");
  g.nan_policy = k.s("nan_policy");
  g.check_spiky_loss = k.b("check_for_spiky_loss");
  g.spiky_loss_policy = k.s("spiky_loss_policy");
  g.spiky_loss_factor = k.f("spiky_loss_factor");

  // Profiling and in-flight monitors.
  StabilityConfig& st = t.stability;
  st.profile = k.b("profile");
  st.profile_step_start = k.i("profile_step_start");
  st.profile_step_end = k.i("profile_step_end");
  st.profile_ranks.clear();
  if (const Value* pr = &k.value("profile_ranks"); pr->is_list())
    for (const Value& v : pr->items()) {
      if (!v.is_int())
        throw ConfigError(
            fmt::format("{}: profile_ranks: expected a list of ranks", k.origin("profile_ranks").str()));
      st.profile_ranks.push_back(v.as_int());
    }
  if (st.profile && st.profile_step_end < st.profile_step_start)
    throw ConfigError(fmt::format("{}: profile_step_end {} is before profile_step_start {}",
                                  k.origin("profile_step_end").str(), st.profile_step_end,
                                  st.profile_step_start));
  st.hang_timeout_s = k.f("hang_timeout_s");
  st.straggler_factor = k.f("straggler_factor");

  // Logging and evaluation.
  LoggingConfig& l = t.logging;
  l.log_interval = k.i("log_interval");
  l.eval_interval = k.is_null("eval_interval") ? 0 : k.i("eval_interval");
  l.eval_iters = k.i("eval_iters");
  map_tensorboard_megatron(k, l.tensorboard);
}

}  // namespace primus::config
