// `primus checkpoint`: inspect checkpoints (docs/checkpoints.md).
//   primus checkpoint verify PATH             verify a checkpoint, or every checkpoint of a save directory
//   primus checkpoint logits --load PATH --tokens "1,2,3;4,5,6" [--device cpu|cuda|auto] [--output F]
//       [--adapter PEFT_DIR]
//       full logits of a Primus checkpoint or a Hugging Face directory (the HF numerics check uses it)
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/load.h"
#include "checkpoint/publish.h"
#include "checkpoint/safetensors.h"
#include "cli/cli_context.h"
#include "core/error.h"
#include "core/log.h"
#include "train/logits.h"

namespace primus::cli {

namespace {

int print_verification(const ckpt::Verification& v) {
  if (v.ok) {
    std::printf("OK   %s  iteration %lld, %zu files, %.1f MB verified in %.3f s (%.2f GB/s)\n", v.dir.c_str(),
                static_cast<long long>(v.state.iteration), v.manifest.files.size(), v.bytes / 1e6, v.seconds,
                v.gb_per_s());
    return 0;
  }
  std::printf("BAD  %s\n", v.dir.c_str());
  for (const ckpt::Problem& p : v.problems) std::printf("       %s\n", p.str().c_str());
  return 1;
}

int run_verify(const std::string& path) {
  switch (ckpt::classify_path(path)) {
    case ckpt::PathKind::kCheckpoint:
      return print_verification(ckpt::verify_checkpoint(path));
    case ckpt::PathKind::kSaveRoot: {
      int bad = 0;
      std::string pick;
      for (const std::string& d : ckpt::list_checkpoint_dirs(path)) {
        ckpt::Verification v = ckpt::verify_checkpoint(d);
        bad += print_verification(v);
        if (v.ok && pick.empty()) pick = d;
      }
      auto latest = ckpt::read_latest_pointer(path);
      std::printf("latest -> %s; auto-resume would load %s\n", latest ? latest->c_str() : "(none)",
                  pick.empty() ? "nothing (no valid checkpoint)" : pick.c_str());
      return bad == 0 ? 0 : 1;
    }
    default:
      throw ConfigError(fmt::format("{} is not a checkpoint directory or a save directory", path));
  }
}

// "1,2,3;4,5,6" -> i32 [2, 3]
Tensor parse_tokens(const std::string& text) {
  std::vector<std::vector<int32_t>> rows(1);
  std::string num;
  auto flush = [&] {
    if (num.empty()) return;
    rows.back().push_back(static_cast<int32_t>(std::stol(num)));
    num.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ' ') {
      flush();
    } else if (c == ';') {
      flush();
      rows.emplace_back();
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      num.push_back(c);
    } else {
      throw ConfigError(fmt::format("--tokens: unexpected '{}' (expected ids like \"1,2,3;4,5,6\")", c));
    }
  }
  flush();
  if (rows.back().empty()) rows.pop_back();
  if (rows.empty()) throw ConfigError("--tokens is empty");
  for (const auto& r : rows)
    if (r.size() != rows[0].size())
      throw ConfigError("--tokens: every sequence (';'-separated) needs the same length");
  std::vector<int32_t> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return Tensor::from_vector<int32_t>(
      flat, {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())});
}

struct LogitsArgs {
  std::string load, tokens, device = "auto", output, adapter;
};

int run_logits(const LogitsArgs& a) {
  InferenceModel m = load_inference_model(a.load, a.device);
  if (!a.adapter.empty()) attach_peft_adapter(m, a.adapter);
  Tensor tokens = parse_tokens(a.tokens);
  Tensor logits = compute_logits(m, tokens);
  const float* p = logits.data<float>();
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < logits.numel(); ++i) {
    sum += p[i];
    sq += static_cast<double>(p[i]) * p[i];
  }
  log::info("logits of {} on {}: shape {} | sum {:.6e} | rms {:.6e} | first {:.6f} {:.6f} {:.6f}", m.source,
            m.stream.device.str(), shape_str(logits.shape()), sum,
            std::sqrt(sq / static_cast<double>(logits.numel())), p[0], p[1], p[2]);
  if (!a.output.empty()) {
    ckpt::SafetensorsWriter w;
    w.set_metadata("format", "pt");
    w.set_metadata("source", m.source);
    w.set_metadata("device", m.stream.device.str());
    w.add("logits", DType::kF32, logits.shape(), logits.data_ptr());
    w.add("tokens", DType::kI32, tokens.shape(), tokens.data_ptr());
    w.write(a.output);
    log::info("wrote {}", a.output);
  }
  return 0;
}

}  // namespace

void attach_checkpoint(CLI::App& root, CliContext& ctx) {
  CLI::App* ck = root.add_subcommand("checkpoint", "Verify checkpoints; logits of a checkpoint or HF model");
  ck->require_subcommand(1);

  auto path = std::make_shared<std::string>();
  CLI::App* v =
      ck->add_subcommand("verify", "Verify sizes and xxh3 of a checkpoint (or of every one in a save dir)");
  v->add_option("path", *path, "Checkpoint directory or save directory")->required();
  v->callback([path, &ctx] { ctx.action = [path] { return run_verify(*path); }; });

  auto la = std::make_shared<LogitsArgs>();
  CLI::App* l =
      ck->add_subcommand("logits", "Full logits of a Primus checkpoint or a Hugging Face model directory");
  l->add_option("--load", la->load, "Checkpoint directory, save directory or HF model directory")->required();
  l->add_option("--tokens", la->tokens, "Token ids: \"1,2,3;4,5,6\" (sequences separated by ';')")
      ->required();
  l->add_option("--device", la->device, "auto | cpu | cuda (f32 on the CPU, bf16 on the GPU)")
      ->capture_default_str();
  l->add_option("--adapter", la->adapter,
                "A PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors) to apply");
  l->add_option("--output", la->output, "Write logits f32 [B, T, V] (and tokens) to this safetensors file");
  l->callback([la, &ctx] { ctx.action = [la] { return run_logits(*la); }; });
}

}  // namespace primus::cli
