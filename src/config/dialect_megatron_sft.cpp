// The Megatron dialect's post-training keys (Primus's sft_trainer.yaml) -> TrainConfig::sft
// (docs/posttrain.md). Every key is read whether or not the stage is SFT (config/key_use.h).
#include <fmt/format.h>

#include <sstream>

#include "config/load_config.h"
#include "core/error.h"

namespace primus::config {

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
      format == "chatml" || format == "prompt_response") {
    s.format = format == "auto" ? "" : format;
  } else {
    throw ConfigError(
        fmt::format("{}: sft_conversation_format '{}' is not one of alpaca, messages (openai, "
                    "chatml), prompt_response, or null (detected per record)",
                    at("sft_conversation_format"), format));
  }
  rc.set_source("sft.data", "sft_dataset_name", k.origin("sft_dataset_name"));
  if (s.packed_attention && !s.pack)
    rc.warnings.push_back(fmt::format(
        "use_packed_attention ({}) has no effect without enable_packed_sequences: every row holds one sample",
        at("use_packed_attention")));
}

}  // namespace primus::config
