// The Megatron dialect's post-training keys (Primus's sft_trainer.yaml) -> TrainConfig::sft
// (docs/posttrain.md). Every key is read whether or not the stage is SFT (config/key_use.h).
#include <fmt/format.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <sstream>

#include "config/load_config.h"
#include "config/not_supported.h"
#include "core/error.h"

namespace primus::config {

namespace {

// Primus's target names (Megatron modules) and the HF ones, to our projections. Our attention and MLP input
// projections are fused (q|k|v, gate|up): an HF name stands for its whole fused projection only together
// with its siblings. A multi-latent-attention model's attention projections are MLA's own (HF DeepSeek names
// are ours); Megatron names them linear_q_proj (q_lora_rank 0) or linear_q_down_proj + linear_q_up_proj,
// linear_kv_down_proj and linear_kv_up_proj.
struct LoraTarget {
  const char* ours;
  std::vector<const char*> megatron, hf;
};
const std::vector<LoraTarget>& lora_targets(bool mla) {
  static const std::vector<LoraTarget> packed_qkv = {
      {"qkv_proj", {"linear_qkv"}, {"q_proj", "k_proj", "v_proj"}},
      {"o_proj", {"linear_proj"}, {"o_proj"}},
      {"gate_up_proj", {"linear_fc1"}, {"gate_proj", "up_proj"}},
      {"down_proj", {"linear_fc2"}, {"down_proj"}},
  };
  static const std::vector<LoraTarget> latent = {
      {"q_proj", {"linear_q_proj"}, {"q_proj"}},
      {"q_a_proj", {"linear_q_down_proj"}, {"q_a_proj"}},
      {"q_b_proj", {"linear_q_up_proj"}, {"q_b_proj"}},
      {"kv_a_proj_with_mqa", {"linear_kv_down_proj"}, {"kv_a_proj_with_mqa"}},
      {"kv_b_proj", {"linear_kv_up_proj"}, {"kv_b_proj"}},
      {"o_proj", {"linear_proj"}, {"o_proj"}},
      {"gate_up_proj", {"linear_fc1"}, {"gate_proj", "up_proj"}},
      {"down_proj", {"linear_fc2"}, {"down_proj"}},
  };
  return mla ? latent : packed_qkv;
}

// Whether the model has the projection `ours` (MLA: q_proj without a query latent, q_a/q_b_proj with one).
bool model_has(const ModelConfig& m, const std::string& ours) {
  if (!m.mla.enabled) return true;
  if (ours == "q_proj") return m.mla.q_lora_rank == 0;
  if (ours == "q_a_proj" || ours == "q_b_proj") return m.mla.q_lora_rank > 0;
  return true;
}

void map_lora(ResolvedConfig& rc) {
  const CheckedKeys& k = rc.keys;
  LoraConfig& l = rc.train.lora;
  const ModelConfig& model = rc.train.model;
  const bool mla = model.mla.enabled;
  auto at = [&](const char* key) { return k.origin(key).str(); };
  l.enabled = k.b("lora.enabled");
  l.rank = k.i("lora.dim");
  l.alpha = k.f("lora.alpha");
  l.a_init = k.s("lora.lora_A_init_method");
  l.dropout = k.is_null("lora.dropout") ? 0.0 : k.f("lora.dropout");
  const Value& targets = k.value("lora.target_modules");
  std::vector<std::string> names;
  if (targets.is_list())
    for (const Value& v : targets.items()) {
      if (!v.is_string())
        throw ConfigError(fmt::format("{}: lora.target_modules holds {} {} (expected module names)",
                                      v.origin().str(), v.type_name(), v.repr()));
      names.push_back(v.as_string());
    }
  if (!l.enabled) return;
  if (names.empty()) {
    for (const LoraTarget& t : lora_targets(mla))
      if (model_has(model, t.ours)) l.targets.push_back(t.ours);
    return;
  }
  std::vector<char> used(names.size(), 0);
  std::vector<std::string> absent;  // named projections of the model family that this model lacks
  for (const LoraTarget& t : lora_targets(mla)) {
    bool megatron = false;
    std::vector<bool> hf(t.hf.size(), false);
    for (size_t i = 0; i < names.size(); ++i) {
      for (const char* m : t.megatron)
        if (names[i] == m) {
          megatron = true;
          used[i] = 1;
        }
      for (size_t j = 0; j < t.hf.size(); ++j)
        if (names[i] == t.hf[j]) {
          hf[j] = true;
          used[i] = 1;
        }
    }
    const size_t hf_count = static_cast<size_t>(std::count(hf.begin(), hf.end(), true));
    if (hf_count > 0 && hf_count < t.hf.size())
      throw NotSupportedError(
          fmt::format("{}: not supported yet: LoRA on part of a fused projection ({} names {} of {}; our {} "
                      "is one GEMM)",
                      at("lora.target_modules"), fmt::join(names, ", "), hf_count, fmt::join(t.hf, "+"),
                      t.ours),
          fmt::format("name all of {} (or {})", fmt::join(t.hf, ", "), t.megatron[0]));
    if (!megatron && hf_count == 0) continue;
    if (model_has(model, t.ours))
      l.targets.push_back(t.ours);
    else
      absent.push_back(megatron ? t.megatron[0] : t.hf[0]);
  }
  // An MLA model has no fused q|k|v projection: Megatron's module matcher adapts nothing for linear_qkv
  // there (Primus's sft_trainer.yaml names it by default), and a query projection of the other q_lora_rank
  // is absent alike. Accepted as Megatron does, but said.
  for (size_t i = 0; i < names.size(); ++i)
    if (!used[i] && mla && names[i] == "linear_qkv") {
      used[i] = 1;
      absent.push_back(names[i]);
    }
  for (size_t i = 0; i < names.size(); ++i)
    if (!used[i])
      throw ConfigError(
          fmt::format("{}: lora.target_modules names '{}', which matches no projection of the model",
                      at("lora.target_modules"), names[i]),
          mla ? "an MLA model's: linear_q_proj (q_lora_rank 0) or linear_q_down_proj and linear_q_up_proj, "
                "linear_kv_down_proj, linear_kv_up_proj, linear_proj, linear_fc1, linear_fc2 (or the HF "
                "names "
                "q_proj or q_a_proj and q_b_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj, gate_proj+up_proj, "
                "down_proj)"
              : "use linear_qkv, linear_proj, linear_fc1, linear_fc2 (or q_proj, k_proj, v_proj, o_proj, "
                "gate_proj, up_proj, down_proj)");
  if (!absent.empty())
    rc.warnings.push_back(fmt::format(
        "{}: lora.target_modules {} match no projection of this model (multi-latent attention{}): no "
        "adapters there, as Megatron's module matcher does",
        at("lora.target_modules"), fmt::join(absent, ", "),
        model.mla.q_lora_rank > 0 ? " with a query latent: linear_q_down_proj, linear_q_up_proj"
                                  : " without a query latent: linear_q_proj"));
  if (l.targets.empty())
    throw ConfigError(fmt::format("{}: lora.target_modules [{}] adapts no projection of the model",
                                  at("lora.target_modules"), fmt::join(names, ", ")),
                      "name at least one projection the model has (or [] for all of them)");
}

}  // namespace

void map_megatron_sft(ResolvedConfig& rc) {
  const CheckedKeys& k = rc.keys;
  SftConfig& s = rc.train.sft;
  auto at = [&](const char* key) { return k.origin(key).str(); };

  const std::string stage = k.is_null("stage") ? "pretrain" : k.s("stage");
  if (stage != "pretrain" && stage != "sft")
    throw ConfigError(fmt::format("{}: stage '{}' is not one of pretrain, sft", at("stage"), stage));
  s.enabled = stage == "sft";
  const std::string name = k.is_null("sft_dataset_name") ? "" : k.s("sft_dataset_name");
  const std::string format = k.is_null("sft_conversation_format") ? "" : k.s("sft_conversation_format");
  const std::string split = k.is_null("sft_dataset_split") ? "train" : k.s("sft_dataset_split");
  s.pack = k.b("enable_packed_sequences");
  s.packed_attention = k.b("use_packed_attention");
  map_lora(rc);
  if (rc.train.lora.enabled && !s.enabled)
    throw ConfigError(
        fmt::format("{}: LoRA adapters train in the SFT stage, but stage is '{}'", at("lora.enabled"), stage),
        "set stage: sft (Primus's sft_trainer.yaml does) and run `primus train posttrain`");
  if (!s.enabled) return;
  rc.set_source("sft.enabled", "stage", k.origin("stage"));

  // The data: local JSONL files, resolved when training starts (data/data_loader.cpp), so that a dry run
  // plans without them. Primus also takes Hugging Face hub dataset names, which would need a download.
  if (name.empty())
    throw ConfigError(
        fmt::format("{}: stage: sft needs sft_dataset_name (a JSONL file or a directory of them)",
                    at("stage")),
        "e.g. sft_dataset_name: data/train.jsonl (records in alpaca, messages or prompt/response form)");
  std::stringstream list(name);
  for (std::string item; std::getline(list, item, ',');) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) s.data.push_back(item);
  }
  s.split = split;
  if (format == "" || format == "auto" || format == "alpaca" || format == "messages" || format == "openai" ||
      format == "chatml" || format == "prompt_response" || format == "squad" || format == "bridge_squad") {
    // squad: Primus's SQuAD formatter, "Context: c Question: q Answer: a" without a chat template
    // (data/sft_sample.h), read from local JSONL records of the squad dataset.
    s.format = format == "auto" ? "" : format;
  } else {
    throw ConfigError(
        fmt::format("{}: sft_conversation_format '{}' is not one of alpaca, messages (openai, "
                    "chatml), prompt_response, squad, or null (detected per record)",
                    at("sft_conversation_format"), format));
  }
  rc.set_source("sft.data", "sft_dataset_name", k.origin("sft_dataset_name"));
  if (s.packed_attention && !s.pack)
    rc.warnings.push_back(fmt::format(
        "use_packed_attention ({}) has no effect without enable_packed_sequences: every row holds one sample",
        at("use_packed_attention")));
}

}  // namespace primus::config
