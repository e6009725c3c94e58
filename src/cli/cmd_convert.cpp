// `primus convert`: checkpoint format conversion (docs/checkpoints.md).
//   primus convert hf-to-primus --input HF_DIR --output OUT_DIR
//   primus convert primus-to-hf --input CHECKPOINT --output HF_DIR [--model-type TYPE]
//                               [--dtype bfloat16|float16|float32] [--max-shard-size 5GB]
//                               [--expert-layout per-expert|fused]
//   primus convert merge-lora --base HF_DIR --adapter PEFT_DIR --output HF_DIR
//                             [--dtype bfloat16|float16|float32] [--max-shard-size 5GB]
#include <fmt/format.h>

#include <memory>
#include <string>

#include "checkpoint/convert.h"
#include "checkpoint/peft_adapter.h"
#include "cli/cli_context.h"
#include "core/error.h"
#include "core/log.h"

namespace primus::cli {

namespace {

struct ConvertArgs {
  std::string input, output, model_type, dtype, max_shard = "5GB", expert_layout = "per-expert";
  std::string adapter;  // merge-lora (its base is `input`)
};

// "5GB", "500MB", "2GiB", "1000000" -> bytes.
uint64_t parse_size(const std::string& text) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    throw ConfigError(fmt::format("--max-shard-size '{}' is not a size", text), "e.g. 5GB, 500MB, 2GiB");
  }
  std::string unit = text.substr(pos);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = 1;
  if (unit == "KB")
    mult = 1e3;
  else if (unit == "MB")
    mult = 1e6;
  else if (unit == "GB")
    mult = 1e9;
  else if (unit == "KIB")
    mult = 1024.0;
  else if (unit == "MIB")
    mult = 1024.0 * 1024;
  else if (unit == "GIB")
    mult = 1024.0 * 1024 * 1024;
  else if (!unit.empty() && unit != "B")
    throw ConfigError(fmt::format("--max-shard-size: unknown unit '{}'", unit));
  if (v <= 0) throw ConfigError("--max-shard-size must be positive");
  return static_cast<uint64_t>(v * mult);
}

int run_hf_to_primus(const ConvertArgs& a) {
  ckpt::ConvertReport r = ckpt::convert_hf_to_primus(a.input, a.output);
  log::info("converted {} ({}, {}, {} tensors) -> {} ({:.1f} MB in {:.2f} s)", a.input, r.model_type, r.dtype,
            r.tensors, r.output, static_cast<double>(r.bytes) / 1e6, r.seconds);
  log::info("model preset: {} (use it as the experiment's model, and load: {} with finetune: true)", r.preset,
            a.output);
  return 0;
}

int run_primus_to_hf(const ConvertArgs& a) {
  ckpt::PrimusToHfOptions o;
  o.model_type = a.model_type;
  o.dtype = a.dtype;
  o.max_shard_bytes = parse_size(a.max_shard);
  if (a.expert_layout != "per-expert" && a.expert_layout != "fused")
    throw ConfigError(fmt::format("--expert-layout '{}' (expected per-expert or fused)", a.expert_layout));
  o.fused_experts = a.expert_layout == "fused";
  ckpt::ConvertReport r = ckpt::convert_primus_to_hf(a.input, a.output, o);
  log::info("exported {} -> {} ({}, {}, {} tensors, {:.1f} MB in {:.2f} s)", a.input, r.output, r.model_type,
            r.dtype, r.tensors, static_cast<double>(r.bytes) / 1e6, r.seconds);
  return 0;
}

int run_merge_lora(const ConvertArgs& a) {
  ckpt::MergeLoraReport r =
      ckpt::merge_lora_into_hf(a.input, a.adapter, a.output, a.dtype, parse_size(a.max_shard));
  log::info("merged {} into {} -> {} ({}, {}, {} of {} tensors adapted, {:.1f} MB in {:.2f} s)", a.adapter,
            a.input, r.output, r.model_type, r.dtype, r.merged, r.tensors, static_cast<double>(r.bytes) / 1e6,
            r.seconds);
  return 0;
}

}  // namespace

void attach_convert(CLI::App& root, CliContext& ctx) {
  CLI::App* convert =
      root.add_subcommand("convert", "Convert checkpoints (Hugging Face <-> Primus, LoRA adapter merge)");
  convert->require_subcommand(1);

  auto h2p = std::make_shared<ConvertArgs>();
  CLI::App* a = convert->add_subcommand(
      "hf-to-primus",
      "Hugging Face model directory (llama, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe; deepseek_v2/v3 once "
      "MLA is in the model) -> Primus checkpoint + model preset");
  a->add_option("--input,-i", h2p->input,
                "HF directory: config.json + model.safetensors (or sharded + index)")
      ->required();
  a->add_option("--output,-o", h2p->output, "New directory: iter_0000000/, latest, primus_model.yaml")
      ->required();
  a->callback([h2p, &ctx] { ctx.action = [h2p] { return run_hf_to_primus(*h2p); }; });

  auto p2h = std::make_shared<ConvertArgs>();
  CLI::App* b = convert->add_subcommand("primus-to-hf", "Primus checkpoint -> Hugging Face model directory");
  b->add_option("--input,-i", p2h->input,
                "Checkpoint directory (iter_NNNNNNN) or save directory (its latest)")
      ->required();
  b->add_option("--output,-o", p2h->output, "New HF directory")->required();
  b->add_option(
      "--model-type", p2h->model_type,
      "llama | qwen2 | qwen3 | mixtral | qwen2_moe | qwen3_moe | deepseek_v2 | deepseek_v3 (default: "
      "the source config.json's, else from the model flags)");
  b->add_option(
      "--dtype", p2h->dtype,
      "bfloat16 | float16 | float32 (default: the source config.json's torch_dtype, else bfloat16)");
  b->add_option("--max-shard-size", p2h->max_shard, "Shard the weights above this size (index file)")
      ->capture_default_str();
  b->add_option("--expert-layout", p2h->expert_layout,
                "per-expert (one tensor per expert, as released checkpoints) | fused (transformers 5's "
                "mlp.experts.gate_up_proj / down_proj)")
      ->capture_default_str();
  b->callback([p2h, &ctx] { ctx.action = [p2h] { return run_primus_to_hf(*p2h); }; });

  auto merge = std::make_shared<ConvertArgs>();
  CLI::App* c = convert->add_subcommand(
      "merge-lora",
      "Hugging Face model + PEFT LoRA adapter -> Hugging Face model with W + (lora_alpha / r) B A merged");
  c->add_option("--base,-b", merge->input, "HF directory of the model the adapter was trained on")
      ->required();
  c->add_option("--adapter,-a", merge->adapter,
                "PEFT LoRA directory: adapter_config.json + adapter_model.safetensors")
      ->required();
  c->add_option("--output,-o", merge->output, "New HF directory (config.json and tokenizer files copied)")
      ->required();
  c->add_option(
      "--dtype", merge->dtype,
      "bfloat16 | float16 | float32 (default: the base config.json's torch_dtype, else bfloat16; the "
      "merge itself is computed in float32)");
  c->add_option("--max-shard-size", merge->max_shard, "Shard the weights above this size (index file)")
      ->capture_default_str();
  c->callback([merge, &ctx] { ctx.action = [merge] { return run_merge_lora(*merge); }; });
}

}  // namespace primus::cli
