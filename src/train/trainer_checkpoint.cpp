// The trainer's side of checkpoints: what to load at start (auto_continue_train, load, finetune, a Hugging
// Face directory) and what a save holds. The mechanics (verification, fallback, atomic publication, async
// writes) live in src/checkpoint.
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>

#include "checkpoint/file_io.h"
#include "checkpoint/hf_weights.h"
#include "checkpoint/load.h"
#include "checkpoint/peft_adapter.h"
#include "checkpoint/publish.h"
#include "core/error.h"
#include "core/log.h"
#include "parallel/process_groups.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace primus {

namespace {

// The model a checkpoint was saved from must be the configured one: anything that changes the function is
// an error (never a silent reinterpretation). Weights-only loads may have fewer vocabulary rows (padding).
void check_same_model(const ModelConfig& saved, const ModelConfig& cfg, bool weights_only,
                      const std::string& what) {
  std::vector<std::string> diffs;
  auto cmp = [&](const char* name, auto a, auto b) {
    if (a != b) diffs.push_back(fmt::format("{}: checkpoint {}, config {}", name, a, b));
  };
  cmp("num_layers", saved.num_layers, cfg.num_layers);
  cmp("hidden_size", saved.hidden_size, cfg.hidden_size);
  cmp("ffn_hidden_size", saved.ffn_hidden_size, cfg.ffn_hidden_size);
  cmp("num_attention_heads", saved.num_attention_heads, cfg.num_attention_heads);
  cmp("num_query_groups", saved.num_query_groups, cfg.num_query_groups);
  cmp("kv_channels", saved.kv_channels, cfg.kv_channels);
  cmp("untie_embeddings_and_output_weights", saved.untie_embeddings_and_output_weights,
      cfg.untie_embeddings_and_output_weights);
  cmp("add_qkv_bias", saved.add_qkv_bias, cfg.add_qkv_bias);
  // (With MLA the flag names the latent norms every DeepSeek model has: HF imports before 2026-12-07 said
  // false, Megatron configs say true, for the same weights.)
  if (!(saved.mla.enabled && cfg.mla.enabled)) cmp("qk_layernorm", saved.qk_layernorm, cfg.qk_layernorm);
  cmp("norm_epsilon", saved.norm_epsilon, cfg.norm_epsilon);
  cmp("rotary_base", saved.rotary_base, cfg.rotary_base);
  cmp("rotary_percent", saved.rotary_percent, cfg.rotary_percent);
  cmp("final_logit_softcapping", saved.final_logit_softcap, cfg.final_logit_softcap);
  cmp("use_rope_scaling", saved.use_rope_scaling, cfg.use_rope_scaling);
  if (saved.use_rope_scaling && cfg.use_rope_scaling) {
    cmp("rope_scaling_factor", saved.rope_scaling_factor, cfg.rope_scaling_factor);
    cmp("rope low_freq_factor", saved.rope_low_freq_factor, cfg.rope_low_freq_factor);
    cmp("rope high_freq_factor", saved.rope_high_freq_factor, cfg.rope_high_freq_factor);
    cmp("rope original_max_position_embeddings", saved.rope_original_max_position,
        cfg.rope_original_max_position);
  }
  // Mixture of experts: everything that changes the layer's function (training knobs such as the loss
  // coefficients or the capacity may differ).
  const MoeConfig &a = saved.moe, &b = cfg.moe;
  cmp("num_experts", a.num_experts, b.num_experts);
  if (a.enabled() && b.enabled()) {
    auto renormalises = [](const MoeConfig& e) {
      return ((e.score_function == "sigmoid" && e.topk > 1) || e.pre_softmax) && e.normalize_topk;
    };
    auto layers = [](const MoeConfig& e) {
      std::string s;
      for (char x : e.layer_is_moe) s += x ? '1' : '0';
      return s;
    };
    cmp("moe_router_topk", a.topk, b.topk);
    cmp("moe_ffn_hidden_size", a.ffn_hidden_size, b.ffn_hidden_size);
    cmp("moe_shared_expert_intermediate_size", a.shared_ffn_hidden_size, b.shared_ffn_hidden_size);
    cmp("moe_shared_expert_gate", a.shared_expert_gate, b.shared_expert_gate);
    cmp("moe_layer_freq (MoE layers)", layers(a), layers(b));
    cmp("moe_router_score_function", a.score_function, b.score_function);
    cmp("moe_router_pre_softmax", a.pre_softmax, b.pre_softmax);
    cmp("top-k renormalisation", renormalises(a), renormalises(b));
    cmp("moe_router_num_groups", a.num_groups, b.num_groups);
    cmp("moe_router_group_topk", a.group_topk, b.group_topk);
    cmp("moe_router_topk_scaling_factor", a.topk_scaling_factor, b.topk_scaling_factor);
    cmp("moe_router_enable_expert_bias", a.expert_bias, b.expert_bias);
    cmp("router_logit_softcapping", a.router_softcap, b.router_softcap);
  }
  cmp("multi_latent_attention", saved.mla.enabled, cfg.mla.enabled);
  if (saved.mla.enabled && cfg.mla.enabled) {
    cmp("q_lora_rank", saved.mla.q_lora_rank, cfg.mla.q_lora_rank);
    cmp("kv_lora_rank", saved.mla.kv_lora_rank, cfg.mla.kv_lora_rank);
    cmp("qk_head_dim", saved.mla.qk_head_dim, cfg.mla.qk_head_dim);
    cmp("qk_pos_emb_head_dim", saved.mla.qk_pos_emb_head_dim, cfg.mla.qk_pos_emb_head_dim);
    cmp("v_head_dim", saved.mla.v_head_dim, cfg.mla.v_head_dim);
    cmp("rope_type yarn", saved.mla.yarn, cfg.mla.yarn);
    cmp("rotary_scaling_factor", saved.mla.rotary_scaling_factor, cfg.mla.rotary_scaling_factor);
    cmp("mscale_all_dim", saved.mla.mscale_all_dim, cfg.mla.mscale_all_dim);
  }
  cmp("mtp_num_layers", saved.mtp_num_layers, cfg.mtp_num_layers);
  const int64_t saved_rows = saved.vocab_rows();
  const int64_t cfg_rows = cfg.vocab_rows();
  if (weights_only ? saved_rows > cfg_rows : saved_rows != cfg_rows)
    diffs.push_back(fmt::format("vocabulary rows: checkpoint {}, config {} (padded_vocab_size{})", saved_rows,
                                cfg_rows, weights_only ? " must be at least the checkpoint's" : ""));
  if (diffs.empty()) return;
  throw ConfigError(
      fmt::format("{} was saved from a different model:\n    {}", what, fmt::join(diffs, "\n    ")),
      "set the model keys to the checkpoint's (`primus convert hf-to-primus` writes a matching "
      "model preset, primus_model.yaml)");
}

// Which base model LoRA adapters train on: the files of an HF directory (config.json's bytes, every weight
// file's name and size: HF directories are not rewritten in place) or a Primus checkpoint's file hashes.
std::string hf_dir_identity(const std::string& dir) {
  std::string key = ckpt::read_text_file(dir + "/config.json");
  std::vector<std::pair<std::string, uintmax_t>> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".safetensors")
      files.emplace_back(e.path().filename().string(), e.file_size());
  std::sort(files.begin(), files.end());
  for (const auto& [name, size] : files) key += fmt::format("\n{} {}", name, size);
  return "hf:" + ckpt::hex64(ckpt::xxh3_bytes(key.data(), key.size()));
}

std::string checkpoint_identity(const ckpt::Verification& v) {
  std::string key;
  for (const ckpt::FileRecord& f : v.manifest.files)
    key += fmt::format("{} {}\n", f.name, ckpt::hex64(f.xxh3));
  return "primus:" + ckpt::hex64(ckpt::xxh3_bytes(key.data(), key.size()));
}

std::string describe_selection(const ckpt::Verification& v) {
  return fmt::format("verified {:.1f} MB in {:.3f} s, {:.2f} GB/s", static_cast<double>(v.bytes) / 1e6,
                     v.seconds, v.gb_per_s());
}

}  // namespace

void Trainer::load_lora_base() {
  const CheckpointConfig& c = cfg_.checkpoint;
  if (c.load.empty()) {
    log::warn(
        "LoRA: no `load` names a base model, so the adapters train on a randomly initialised one (seed {})",
        cfg_.seed);
    base_identity_ = fmt::format("random:seed={}", cfg_.seed);
    return;
  }
  switch (ckpt::classify_path(c.load)) {
    case ckpt::PathKind::kHuggingFace: {
      ckpt::HfCheckpoint hf(c.load);
      check_same_model(hf.info().model, cfg_.model, /*weights_only=*/true, c.load);
      fill_base([&](ParamStore& p, const Stream& s) { ckpt::load_hf_into_params(hf, p, s); });
      hf_config_ = hf.config().dump();
      base_identity_ = hf_dir_identity(c.load);
      log::info("LoRA: the frozen base model is {} ({}, {} tensors)", c.load, hf.info().model_type,
                hf.names().size());
      return;
    }
    case ckpt::PathKind::kCheckpoint:
    case ckpt::PathKind::kSaveRoot: {
      const ckpt::Selection sel = ckpt::select_explicit(c.load);
      const ckpt::Verification& v = sel.verification;
      if (v.state.lora)
        throw ConfigError(
            fmt::format("load: {} holds LoRA adapters (rank {}), not a base model", v.dir,
                        v.state.lora->rank),
            "point load at the base model (an HF directory or a full checkpoint); the adapters' own "
            "checkpoints continue from `save` (auto_continue_train)");
      check_same_model(v.state.model, cfg_.model, /*weights_only=*/true, v.dir);
      ckpt::LoadOptions opt;
      opt.weights_only = true;
      opt.load_optim = false;
      fill_base([&](ParamStore& p, const Stream& s) { ckpt::load_into_params(v, p, s, opt); });
      hf_config_ = v.state.hf_config;
      base_identity_ = checkpoint_identity(v);
      log::info("LoRA: the frozen base model is the weights of {} (iteration {}; {})", v.dir,
                v.state.iteration, describe_selection(v));
      return;
    }
    case ckpt::PathKind::kMissing:
    case ckpt::PathKind::kUnknown:
      throw ConfigError(fmt::format("load: {} is not a base model for LoRA (no HF config.json + safetensors, "
                                    "no checkpoint manifest.json, latest or iter_*)",
                                    c.load),
                        "point load at the model to fine-tune");
  }
}

void Trainer::resume_or_start() {
  const CheckpointConfig& c = cfg_.checkpoint;
  std::optional<ckpt::Selection> sel;
  bool from_save = false;
  // LoRA: `load` names the frozen base model (loaded first, on every start); only the adapters' own
  // checkpoints under `save` continue a run.
  if (base_) load_lora_base();
  // 1. auto_continue_train: the newest valid checkpoint under `save` (falling back over corrupt ones).
  if (c.auto_continue_train && !c.save.empty() && fs::exists(c.save)) {
    sel = ckpt::select_newest_valid(c.save);
    const bool any = !ckpt::list_checkpoint_dirs(c.save).empty();
    if (!sel && any)
      throw Error(
          ErrorKind::kRuntime,
          fmt::format("auto_continue_train: no checkpoint under {} passed verification (problems above)",
                      c.save),
          {}, "nothing was loaded; move the directory away to start from scratch");
    if (sel) {
      from_save = true;
      if (!sel->rejected.empty()) {
        log::warn("checkpoint: fell back to {} ({} problem(s) in newer checkpoints, listed above)",
                  sel->verification.dir, sel->rejected.size());
        ckpt::quarantine(sel->rejected_dirs);
      }
    }
  }
  // 2. load: a checkpoint directory, a save root (its latest), or a Hugging Face model directory.
  if (!sel && !c.load.empty() && !base_) {
    switch (ckpt::classify_path(c.load)) {
      case ckpt::PathKind::kHuggingFace: {
        ckpt::HfCheckpoint hf(c.load);
        check_same_model(hf.info().model, cfg_.model, /*weights_only=*/true, c.load);
        load_hf_params(hf);  // trainer_dist.cpp: each rank keeps its shard
        hf_config_ = hf.config().dump();
        log::info(
            "loaded Hugging Face weights from {} ({}, {} tensors); starting at iteration 0 with a fresh "
            "optimizer",
            c.load, hf.info().model_type, hf.names().size());
        return;
      }
      case ckpt::PathKind::kCheckpoint:
      case ckpt::PathKind::kSaveRoot:
        sel = ckpt::select_explicit(c.load);  // throws naming the bad file: an explicit path never falls back
        break;
      case ckpt::PathKind::kMissing:
      case ckpt::PathKind::kUnknown:
        if (c.exit_on_missing_checkpoint)
          throw ConfigError(
              fmt::format("load: {} is not a checkpoint (no manifest.json, latest, iter_* or HF "
                          "config.json + safetensors)",
                          c.load),
              "fix the path, or set exit_on_missing_checkpoint: false to start from scratch");
        log::warn("load: {} holds no checkpoint; starting from scratch (exit_on_missing_checkpoint: false)",
                  c.load);
        return;
    }
  }
  if (!sel) return;

  const ckpt::Verification& v = sel->verification;
  const ckpt::TrainingState& st = v.state;
  // finetune applies to `load`; a checkpoint found under `save` continues that (finetuning) run.
  const bool weights_only = c.finetune && !from_save;
  check_same_model(st.model, cfg_.model, weights_only, v.dir);
  if (base_) {
    const LoraConfig& l = cfg_.lora;
    if (!st.lora)
      throw ConfigError(fmt::format("{} holds a fully trained model's state, not LoRA adapters", v.dir),
                        "use another save directory for the LoRA run, or lora.enabled: false to continue it");
    if (st.lora->rank != l.rank || st.lora->alpha != l.alpha || st.lora->targets != l.targets)
      throw ConfigError(fmt::format("{} holds LoRA adapters of rank {}, alpha {} on [{}]; the config asks "
                                    "for rank {}, alpha {} on [{}]",
                                    v.dir, st.lora->rank, st.lora->alpha, fmt::join(st.lora->targets, ", "),
                                    l.rank, l.alpha, fmt::join(l.targets, ", ")),
                        "set lora.dim, lora.alpha and lora.target_modules to the checkpoint's");
    if (st.lora->base != base_identity_)
      throw ConfigError(
          fmt::format("{} holds LoRA adapters trained on another base model ({}) than `load` gives now ({})",
                      v.dir, st.lora->base, base_identity_),
          fmt::format("set load to the base model the adapters were trained on ({})", c.load));
  } else if (st.lora) {
    throw ConfigError(
        fmt::format("{} holds LoRA adapters (rank {}), not a whole model", v.dir, st.lora->rank),
        "set lora.enabled: true (with the same base model as `load`) to continue it");
  }
  ckpt::LoadOptions opt;
  opt.weights_only = weights_only;
  opt.load_optim = !weights_only && !c.no_load_optim;
  const ckpt::LoadReport rep = load_checkpoint_params(v, opt);  // trainer_dist.cpp: any DP size and mode
  hf_config_ = st.hf_config;
  if (weights_only) {
    log::info(
        "checkpoint: loaded weights of {} (iteration {}; {}); finetune: starting at iteration 0 with a fresh "
        "optimizer",
        v.dir, st.iteration, describe_selection(v));
    return;
  }
  if (!c.no_load_rng && st.rng && st.rng->seed != static_cast<uint64_t>(cfg_.seed))
    throw ConfigError(
        fmt::format("{} was trained with seed {}, the config has seed {} (the data order and every "
                    "random stream depend on it)",
                    v.dir, st.rng->seed, cfg_.seed),
        fmt::format("set seed: {}, or no_load_rng: true to continue with the new seed", st.rng->seed));
  if (Fp8State* f8 = model_->fp8()) {
    if (st.fp8)
      f8->load(*st.fp8, v.dir);
    else
      log::warn("checkpoint: {} was trained without FP8; the FP8 scales start fresh", v.dir);
  } else if (st.fp8) {
    log::warn("checkpoint: {} was trained with FP8 ({}); this run continues in BF16", v.dir, st.fp8->recipe);
  }
  start_iter_ = st.iteration;
  start_consumed_ = st.consumed_samples;
  skipped_total_ = st.skipped_iterations;
  spikes_.restore(st.loss_reference);
  optim_->set_steps_taken(rep.loaded_optim ? st.optimizer_steps : 0);
  resumed_ = true;
  const ckpt::LrScheduleState& l = st.lr_schedule;
  const int64_t decay_iters = cfg_.optim.lr_decay_iters.value_or(cfg_.train_iters);
  if (l.lr != cfg_.optim.lr || l.min_lr != cfg_.optim.min_lr ||
      l.warmup_iters != cfg_.optim.lr_warmup_iters || l.decay_iters != decay_iters ||
      l.decay_style != cfg_.optim.lr_decay_style)
    log::warn(
        "checkpoint: the LR schedule differs from the checkpoint's (lr {} -> {}, min_lr {} -> {}, warmup {} "
        "-> {}, decay iters {} -> {}, style {} -> {}); the configured schedule applies from iteration {}",
        l.lr, cfg_.optim.lr, l.min_lr, cfg_.optim.min_lr, l.warmup_iters, cfg_.optim.lr_warmup_iters,
        l.decay_iters, decay_iters, l.decay_style, cfg_.optim.lr_decay_style, st.iteration + 1);
  if (st.global_batch_size != cfg_.global_batch_size)
    log::warn("checkpoint: global batch size {} -> {}; the data continues at sample {}", st.global_batch_size,
              cfg_.global_batch_size, st.consumed_samples);
  log::info("checkpoint: resuming from {} (iteration {}, {} consumed samples, optimizer state {}{}; {})",
            v.dir, st.iteration, st.consumed_samples, rep.loaded_optim ? "loaded" : "reset",
            rep.loaded_master ? ", f32 master weights" : "", describe_selection(v));
}

ckpt::TrainingState Trainer::current_state(int64_t iter) const {
  ckpt::TrainingState st;
  st.iteration = iter;
  st.consumed_samples = consumed_samples();
  st.optimizer_steps = optim_->steps_taken();
  st.skipped_iterations = skipped_total_;
  st.global_batch_size = cfg_.global_batch_size;
  st.loss_reference = spikes_.window();
  st.lr_schedule.lr = cfg_.optim.lr;
  st.lr_schedule.min_lr = cfg_.optim.min_lr;
  st.lr_schedule.warmup_iters = cfg_.optim.lr_warmup_iters;
  st.lr_schedule.decay_iters = cfg_.optim.lr_decay_iters.value_or(cfg_.train_iters);
  st.lr_schedule.decay_style = cfg_.optim.lr_decay_style;
  if (!cfg_.checkpoint.no_save_rng) {
    ckpt::RngState r;
    r.seed = static_cast<uint64_t>(cfg_.seed);
    r.step = iter;
    st.rng = r;
  }
  st.config_xxh3 = ckpt::hex64(ckpt::xxh3_bytes(resolved_yaml_.data(), resolved_yaml_.size()));
  st.model = cfg_.model;
  st.hf_config = hf_config_;
  if (fp8_stages_)
    st.fp8 = *fp8_stages_;  // every pipeline stage's projections (save_checkpoint)
  else if (const Fp8State* f8 = model_->fp8())
    st.fp8 = f8->save();
  if (base_)
    st.lora = ckpt::TrainingState::Lora{cfg_.lora.rank, cfg_.lora.alpha, cfg_.lora.targets, base_identity_};
  return st;
}

void Trainer::save_checkpoint(int64_t iter) {
  if (last_saved_iter_ == iter) return;
  // Data parallel: world rank 0 writes whole-model files; sharded state is gathered first (trainer_dist.cpp).
  const ParamStore* src = params_for_save();
  // Pipeline parallelism: each stage holds its own projections' FP8 histories; the checkpoint records every
  // stage's (a collective of the pp group, like the parameters' gather), and a stage that loads it takes its
  // own by name.
  fp8_stages_.reset();
  if (pp_plan_ && model_->fp8())
    fp8_stages_ = gather_fp8_saved(model_->fp8()->save(), groups_->get("pp"), stream_);
  last_saved_iter_ = iter;
  if (!src || !writer_) return;
  const Stream save_stream = src == params_.get() ? stream_ : Stream::cpu();
  const ckpt::SaveReport r =
      writer_->save(*src, save_stream, current_state(iter), resolved_yaml_, !cfg_.checkpoint.no_save_optim);
  if (!cfg_.checkpoint.async_save)
    log::info(
        "checkpoint: iteration {}: training blocked {:.3f} s (synchronous; the host copy took {:.1f} ms)",
        iter, r.blocked_seconds, r.stage_seconds * 1e3);
}

void Trainer::export_peft_adapter() {
  const ParamStore* src = params_for_save();  // a collective when sharded or split: the whole adapters
  if (!src) return;
  const Stream s = src == params_.get() ? stream_ : Stream::cpu();
  std::vector<ckpt::LoraTensor> adapters;
  for (int i = 0; i < static_cast<int>(src->entries().size()); ++i)
    adapters.push_back({src->entry(i).name, src->master_f32(i, s).to(Stream::cpu())});
  const std::string dir = run_dir_ + "/peft_adapter";
  std::error_code ec;
  fs::remove_all(dir, ec);  // a resumed run's earlier export (the checkpoints hold the adapters too)
  // The run has trained: an export that cannot be written must not turn it into a failed one (the
  // checkpoints, when `save` is set, hold the adapters; the start of the run warned about this model).
  ckpt::PeftWriteReport r;
  try {
    r = ckpt::write_peft_adapter(dir, adapters, cfg_.model, cfg_.lora, hf_config_, cfg_.checkpoint.load);
  } catch (const ConfigError& e) {
    log::warn("LoRA: no PEFT adapter written: {}{}", e.what(),
              cfg_.checkpoint.save.empty() ? " (and `save` is not set: the adapters are not kept)"
                                           : "; the checkpoints under `save` hold the adapters");
    return;
  }
  log::info(
      "LoRA: PEFT adapter written to {} ({} {} modules, {:.2f} MB; PeftModel.from_pretrained loads it, "
      "`primus convert merge-lora` merges it)",
      r.dir, r.modules, r.model_type, static_cast<double>(r.bytes) / 1e6);
  // Seen on the device (peft 0.21, transformers 5.17): for DeepSeek models PEFT maps gate/up/down target
  // names onto the routed experts' fused parameters and drops the dense MLP layers' adapters, with only a
  // RuntimeWarning; the merged model keeps them.
  const bool mlp = cfg_.lora.targets_projection("gate_up_proj") || cfg_.lora.targets_projection("down_proj");
  if (mlp && r.model_type.rfind("deepseek", 0) == 0)
    log::warn(
        "LoRA: PEFT (0.21 with transformers 5) skips adapters on a {} model's dense MLP layers (it takes "
        "gate_proj / up_proj / down_proj for expert parameters); `primus convert merge-lora` applies all of "
        "them",
        r.model_type);
}

}  // namespace primus
