// Rules that involve several keys (reference.md §2.4 and Megatron's arguments.py): checked once, after
// mapping, before anything is built. Each message names the keys, their values, the rule and where the values
// came from.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>

#include "config/load_config.h"
#include "config/not_supported.h"
#include "config/plan.h"
#include "config/problems.h"
#include "core/error.h"

namespace primus::config {

void validate_config(ResolvedConfig& rc) {
  TrainConfig& t = rc.train;
  const ModelConfig& m = t.model;
  ParallelConfig& p = t.parallel;
  Problems bad;
  auto cite = [&](const char* field, auto value) { return rc.cite(field, fmt::format("{}", value)); };

  // Model shape.
  if (m.num_query_groups <= 0 || m.num_attention_heads % m.num_query_groups != 0)
    bad.add(fmt::format("{} is not divisible by {} (rule: num_attention_heads % num_query_groups == 0)",
                        cite("num_attention_heads", m.num_attention_heads),
                        cite("num_query_groups", m.num_query_groups)));
  if (rc.sources.count("kv_channels") != 0 &&
      rc.sources.at("kv_channels").origin.kind == Origin::Kind::kDerived &&
      m.hidden_size % m.num_attention_heads != 0)
    bad.add(
        fmt::format("{} is not divisible by {} and kv_channels is not set (rule: hidden_size % "
                    "num_attention_heads == 0 unless kv_channels is set)",
                    cite("hidden_size", m.hidden_size), cite("num_attention_heads", m.num_attention_heads)));
  if (m.ffn_hidden_size <= 0)
    bad.add(fmt::format("{} must be > 0", cite("ffn_hidden_size", m.ffn_hidden_size)));
  // Partial rotary: Megatron rotates int(kv_channels x rotary_percent) dimensions of each head, in pairs.
  if (m.rotary_percent != 1.0 && !m.mla.enabled) {
    const int64_t head_dim = m.kv_channels > 0 ? m.kv_channels : m.hidden_size / m.num_attention_heads;
    const auto rotated = static_cast<int64_t>(static_cast<double>(head_dim) * m.rotary_percent);
    if (rotated < 2 || rotated % 2 != 0)
      bad.add(
          fmt::format("{} of the head dimension {} rotates {} dimensions (rule: int(head_dim x "
                      "rotary_percent) must be even and at least 2)",
                      cite("rotary_percent", m.rotary_percent), head_dim, rotated));
  }
  if (m.num_attention_heads % p.tensor_model_parallel_size != 0)
    bad.add(fmt::format("{} is not divisible by {} (rule: num_attention_heads % TP == 0)",
                        cite("num_attention_heads", m.num_attention_heads),
                        cite("tensor_model_parallel_size", p.tensor_model_parallel_size)));
  // Megatron configs leave the pipeline split to parallel/pipeline_layout (config/load_config.cpp), which
  // knows the uneven splits and layouts.
  if (!rc.planning && rc.info.framework != "megatron" && m.num_layers % p.pipeline_model_parallel_size != 0)
    bad.add(fmt::format("{} is not divisible by {} (rule: num_layers % PP == 0)",
                        cite("num_layers", m.num_layers),
                        cite("pipeline_model_parallel_size", p.pipeline_model_parallel_size)));
  if (t.data.seq_length > m.max_position_embeddings)
    bad.add(fmt::format("{} exceeds {} (rule: seq_length <= max_position_embeddings)",
                        cite("seq_length", t.data.seq_length),
                        cite("max_position_embeddings", m.max_position_embeddings)));

  // Data parallelism and batch.
  const int64_t model_parallel =
      p.tensor_model_parallel_size * p.pipeline_model_parallel_size * p.context_parallel_size;
  if (rc.world_size % model_parallel != 0) {
    bad.add(fmt::format("WORLD_SIZE={} is not divisible by TP x PP x CP = {} (rule: world % (TP*PP*CP) == 0)",
                        rc.world_size, model_parallel));
  } else {
    p.data_parallel_size = rc.world_size / model_parallel;
  }
  if (const BatchLayout b = batch_layout(t); !b.fits && b.micro_batch > 0)  // the rule: config/plan.h
    bad.add(fmt::format(
        "{} is not divisible by {} x data-parallel size {} = {} (rule: global_batch_size % "
        "(micro_batch_size * DP) == 0)",
        cite("global_batch_size", t.global_batch_size), cite("micro_batch_size", t.micro_batch_size),
        b.data_parallel, b.micro_batch * b.data_parallel));

  // Multi-latent attention rotates its qk_pos_emb_head_dim slice; Megatron's MLA with rope_type rope would
  // rotate only a percentage of that slice (with yarn it ignores rotary_percent): not built.
  if (m.mla.enabled && m.rotary_percent != 1.0 && !rc.planning)
    throw NotSupportedError(
        fmt::format("{}: not supported yet: rotary_percent {} with multi_latent_attention (a part of MLA's "
                    "qk_pos_emb_head_dim slice)",
                    rc.keys.origin("rotary_percent").str(), m.rotary_percent),
        "set rotary_percent: 1.0, or size the rotary slice with qk_pos_emb_head_dim");

  // Packed SFT rows with isolated samples: the positions and sample starts reach the decoder's RoPE (MLA's in
  // its pack step), attention, the MTP depths' shift (mtp_batch) and the pipeline's micro-batches; the
  // context-parallel chunking does not carry them yet.
  if (t.sft.isolated_rows() && !rc.planning && p.context_parallel_size > 1)
    throw NotSupportedError(
        fmt::format("{}: not supported yet: packed attention (use_packed_attention) with context parallelism",
                    rc.keys.origin("use_packed_attention").str()),
        "set use_packed_attention: false (samples of a row then see each other, as Primus's default "
        "packing) or enable_packed_sequences: false (one sample per row)");

  // LoRA adapters (model/lora_adapter.h) sit on the decoder's attention projections (packed QKV or MLA's
  // five) and dense MLP projections; in MoE models on the attention only (the experts, router and shared
  // expert stay frozen without adapters: PEFT's gate/up/down targets would adapt every expert, which is not
  // built). Under FP8 the frozen projections run in FP8 and the adapters' thin GEMMs in BF16. Multi-token-
  // prediction depths run frozen, without adapters.
  const bool lora_mlp = t.lora.targets_projection("gate_up_proj") || t.lora.targets_projection("down_proj");
  if (t.lora.enabled && !rc.planning && t.model.moe.enabled() && lora_mlp)
    throw NotSupportedError(
        fmt::format(
            "{}: not supported yet: LoRA (lora.enabled) with the MLP projections of a mixture-of-experts "
            "model (adapters on every expert)",
            rc.keys.origin("lora.enabled").str()),
        t.model.mla.enabled
            ? "target the attention projections only (lora target modules linear_q_proj or "
              "linear_q_down_proj "
              "and linear_q_up_proj, linear_kv_down_proj, linear_kv_up_proj, linear_proj), or full SFT "
              "(lora.enabled: false)"
            : "target the attention projections only (lora target modules linear_qkv and linear_proj; "
              "q_proj, "
              "k_proj, v_proj, o_proj), or full SFT (lora.enabled: false)");

  // Learning-rate schedule.
  if (t.optim.lr < t.optim.min_lr)
    bad.add(fmt::format("{} is below {} (rule: lr >= min_lr >= 0)", cite("lr", t.optim.lr),
                        cite("min_lr", t.optim.min_lr)));
  const int64_t decay = t.optim.lr_decay_iters.value_or(t.train_iters);
  if (t.optim.lr_warmup_iters > 0 && t.optim.lr_warmup_iters >= decay)
    bad.add(fmt::format(
        "{} is not below the decay length {} (rule: lr_warmup_iters < lr_decay_iters, as Megatron)",
        cite("lr_warmup_iters", t.optim.lr_warmup_iters), cite("lr_decay_iters", decay)));
  // WSD: the anneal is the last lr_wsd_decay_iters iterations before lr_decay_iters, after the warm-up.
  if (t.optim.lr_decay_style == "WSD" &&
      (t.optim.lr_wsd_decay_iters < 1 || t.optim.lr_wsd_decay_iters > decay - t.optim.lr_warmup_iters))
    bad.add(
        fmt::format("{} must lie in [1, lr_decay_iters {} - lr_warmup_iters {}] (rule: the WSD anneal comes "
                    "after the warm-up)",
                    cite("lr_wsd_decay_iters", t.optim.lr_wsd_decay_iters), decay, t.optim.lr_warmup_iters));

  // Recomputation (Megatron transformer_config.py).
  const RecomputeConfig& r = t.recompute;
  if (!r.layer_ids.empty()) {
    // Primus's recompute_layer_ids (validate_specified_recompute_layers): full recomputation of exactly the
    // listed layers, so no method, and ids within the decoder layers and the MTP depths after them.
    const std::string ids = cite("recompute_layer_ids", fmt::format("{}", fmt::join(r.layer_ids, ",")));
    const int64_t last = m.num_layers + m.mtp_num_layers - 1;
    if (r.granularity != "full")
      bad.add(fmt::format(
          "{} needs {} (rule: recompute_layer_ids recompute whole layers)", ids,
          cite("recompute_granularity", r.granularity.empty() ? "null" : r.granularity) + " to be full"));
    if (!r.method.empty())
      bad.add(fmt::format("{} is set with {} (rule: recompute_layer_ids takes recompute_method null)", ids,
                          cite("recompute_method", r.method)));
    if (r.layer_ids.back() > last)
      bad.add(fmt::format(
          "{}: layer {} does not exist (rule: ids lie in [0, {}]: 0..{} are the decoder "
          "layers{})",
          ids, r.layer_ids.back(), last, m.num_layers - 1,
          m.mtp_num_layers > 0 ? fmt::format(", {}..{} the MTP depths", m.num_layers, last) : ""));
  } else if (r.granularity == "full") {
    if (r.method.empty())
      bad.add(
          fmt::format("{} needs recompute_method uniform or block (rule: full recomputation names a method)",
                      cite("recompute_granularity", r.granularity)));
    if (r.method == "block" && r.num_layers > m.num_layers / p.pipeline_model_parallel_size)
      bad.add(fmt::format(
          "{} exceeds the {} layers per pipeline stage (rule: block recomputation covers at most "
          "num_layers / PP layers)",
          cite("recompute_num_layers", r.num_layers), m.num_layers / p.pipeline_model_parallel_size));
    if (r.num_layers <= 0)
      bad.add(
          fmt::format("{} must be > 0 with full recomputation", cite("recompute_num_layers", r.num_layers)));
  } else if (!r.method.empty()) {
    bad.add(
        fmt::format("{} is set but {} (rule: recompute_method applies only to recompute_granularity full)",
                    cite("recompute_method", r.method),
                    cite("recompute_granularity", r.granularity.empty() ? "null" : r.granularity)));
  }

  // Device: CUDA must be compiled in (checked without touching any GPU).
#ifndef PRIMUS_WITH_CUDA
  if (t.device == "cuda" && !rc.planning)
    bad.add(
        "device=cuda but this build has no CUDA backend (built with PRIMUS_CUDA=OFF); use device: cpu or "
        "auto");
#endif

  // Accepted, but worth saying.
  if (t.data.mock_data && (!t.data.text_data_path.empty() || !t.data.data_path.empty()))
    rc.warnings.push_back("mock_data is true: text_data_path / data_path are not read");
  std::error_code exists_ec;  // the non-throwing form: any path string is user input
  if (!t.data.mock_data && !t.data.text_data_path.empty() &&
      !std::filesystem::exists(t.data.text_data_path, exists_ec))
    rc.warnings.push_back(
        fmt::format("text_data_path '{}' does not exist (yet); the run stops when it opens its data",
                    t.data.text_data_path));

  bad.throw_if_any("the configuration");
}

}  // namespace primus::config
