// `primus benchmark attention`: fwd and bwd TFLOP/s of causal grouped-query flash attention.
//   primus benchmark attention --batch 4 --heads 32 --kv-heads 8 --seq 4096 --head-dim 128
//   [--causal|--no-causal]
//                              [--backend auto|cudnn|flash|all] [--warmup 5] [--iters 20]
//                              [--output-file attention_report.md|.csv|.jsonl] [--device 0]
#include "cli/cmd_benchmark_attention.h"

#include <memory>

#include "bench/attention_bench.h"

namespace primus::cli {

void attach_benchmark_attention(CLI::App* benchmark, CliContext& ctx) {
  auto o = std::make_shared<bench::AttentionBenchOptions>();
  CLI::App* app = benchmark->add_subcommand(
      "attention",
      "Time causal grouped-query attention forward and backward (cuDNN fused graph or flash kernels)");
  app->add_option("--batch,-b", o->batch, "Sequences per batch")->capture_default_str();
  app->add_option("--heads", o->heads, "Query heads")->capture_default_str();
  app->add_option("--kv-heads,--num-query-groups", o->kv_heads, "Key/value heads (divides --heads)")
      ->capture_default_str();
  app->add_option("--seq,--seq-length", o->seq, "Tokens per sequence")->capture_default_str();
  app->add_option("--head-dim", o->head_dim, "Head dimension")->capture_default_str();
  app->add_flag("--causal,!--no-causal", o->causal, "Causal mask (default on; FLOPs halved)");
  app->add_option("--backend", o->backend, "auto | cudnn | flash | all")->capture_default_str();
  app->add_option("--warmup", o->warmup, "Untimed runs first")->capture_default_str();
  app->add_option("--iters", o->iters, "Timed runs (median reported)")->capture_default_str();
  app->add_option("--output-file", o->output_file, "Report: .md, .csv or .jsonl (\"\" = none)")
      ->capture_default_str();
  app->add_option("--device", o->device, "GPU index")->capture_default_str();
  app->callback([o, &ctx] { ctx.action = [o] { return bench::run_attention_bench(*o); }; });
}

}  // namespace primus::cli
