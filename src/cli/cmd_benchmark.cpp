// `primus benchmark <suite>`: Primus's micro-benchmark suite (reference.md §4.8). Suites here: gemm,
// gemm-dense, attention (cmd_benchmark_attention.cpp), comm (cmd_benchmark_comm.cpp).
//   primus benchmark gemm --M 8192 --N 8192 --K 8192 --dtype bf16 [--trans_a] [--trans_b] [--duration 10]
//                         [--output-file gemm_report.md|.csv|.jsonl] [--tune [--tuning-file F]]
//   primus benchmark gemm --M 8192 --N 4096 --K 4096 --dtype fp8 [--scaling tensorwise|rowwise|blockwise]
//                         [--fast-accum]   (TN: a [M, K], b [N, K]; e4m3 -> bf16; bf16 baseline row after it)
//   primus benchmark gemm-dense --model llama3.1_8B --micro-batch-size 1 --seq-length 8192 [--tune]
//                               [--tuning-file gemm_tuning.json] [--output-file gemm_dense_report.md]
//   primus benchmark grouped-gemm [--paths auto|grouped,batched,loop,streams|all] [--loads equal|uneven|both]
//                                 [--ops fwd,dgrad,wgrad] [--experts E --tokens-per-expert m --K K --N N]
#include <memory>

#include "bench/gemm_bench.h"
#include "bench/grouped_gemm_bench.h"
#include "cli/cli_context.h"
#include "cli/cmd_benchmark_attention.h"
#include "cli/cmd_benchmark_comm.h"

namespace primus::cli {

namespace {

void add_tune_options(CLI::App* app, bench::TuneOptions& t) {
  app->add_option("--tune-candidates", t.candidates, "Heuristic candidates timed per shape when tuning")
      ->capture_default_str();
  app->add_option("--tune-iters", t.iters, "Timed runs per candidate (median)")->capture_default_str();
  app->add_option("--tune-min-gain", t.min_gain, "Fraction by which a candidate must beat the heuristic")
      ->capture_default_str();
}

void attach_gemm(CLI::App* parent, CliContext& ctx) {
  auto o = std::make_shared<bench::GemmBenchOptions>();
  CLI::App* app = parent->add_subcommand("gemm", "Time one GEMM shape c[M,N] = op(a) op(b) through cuBLASLt");
  app->add_option("--M", o->m, "Rows of op(a) and c")->capture_default_str();
  app->add_option("--N", o->n, "Columns of op(b) and c")->capture_default_str();
  app->add_option("--K", o->k, "Inner dimension")->capture_default_str();
  app->add_flag("--trans_a,--trans-a", o->trans_a, "a is stored [K, M]");
  app->add_flag("--trans_b,--trans-b", o->trans_b, "b is stored [N, K]");
  app->add_option(
         "--dtype", o->dtype,
         "bf16 | fp16 | fp32 (fp32 without TF32) | fp8 (e4m3 x e4m3 -> bf16 in the TN layout, a [M, K] and "
         "b [N, K]; the bf16 GEMM of the same shape is timed after it)")
      ->capture_default_str();
  app->add_option(
      "--scaling", o->scaling,
      "--dtype fp8: tensorwise (default) | rowwise | blockwise (1x128 activations a x 128x128 weights b)");
  app->add_flag("--fast-accum", o->fast_accum,
                "--dtype fp8 --scaling tensorwise: cuBLASLt's fast FP8 accumulation (no promotion to f32)");
  app->add_option("--duration", o->duration_s, "Seconds of timed runs")->capture_default_str();
  app->add_option("--output-file", o->output_file, "Report: .md, .csv, .tsv or .jsonl")
      ->capture_default_str();
  app->add_flag("--tune", o->tune, "Tune the shape first (top-K heuristic candidates) and report the uplift");
  app->add_option("--tuning-file", o->tuning_file,
                  "With --tune: merge the winner into this file; without: load it before timing");
  app->add_option("--device", o->device, "GPU index")->capture_default_str();
  add_tune_options(app, o->tune_options);
  app->callback([o, &ctx] { ctx.action = [o] { return bench::run_gemm_bench(*o); }; });
}

void attach_gemm_dense(CLI::App* parent, CliContext& ctx) {
  auto o = std::make_shared<bench::GemmDenseOptions>();
  CLI::App* app = parent->add_subcommand(
      "gemm-dense",
      "Time (and with --tune, tune) every GEMM of one dense Llama training step as the model runs it");
  std::string presets;
  for (const auto& n : bench::dense_model_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  app->add_option("--model", o->model, "Model preset (" + presets + ") or a label for explicit dims")
      ->capture_default_str();
  app->add_option("--micro-batch-size,--mbs", o->micro_batch_size, "Sequences per micro-batch")
      ->capture_default_str();
  app->add_option("--seq-length,--seqlen", o->seq_length, "Tokens per sequence")->capture_default_str();
  app->add_option("--hidden-size", o->dims.hidden, "Override: hidden size");
  app->add_option("--ffn-hidden-size,--intermediate-size", o->dims.ffn, "Override: FFN width");
  app->add_option("--num-layers", o->dims.layers, "Override: decoder layers (per-step counts)");
  app->add_option("--num-attention-heads", o->dims.heads, "Override: query heads");
  app->add_option("--num-query-groups,--num-key-value-heads", o->dims.kv_heads, "Override: KV heads");
  app->add_option("--head-dim,--kv-channels", o->dims.head_dim, "Override: head dim");
  app->add_option("--vocab-size", o->dims.vocab, "Override: (padded) vocabulary");
  app->add_option("--dtype", o->dtype, "bf16 | fp16 | fp32")->capture_default_str();
  app->add_option("--duration", o->duration_s, "Seconds of timed runs per shape")->capture_default_str();
  app->add_option("--output-file", o->output_file, "Report: .md, .csv, .tsv or .jsonl")
      ->capture_default_str();
  app->add_flag("--tune", o->tune, "Tune every shape and write --tuning-file");
  app->add_option("--tuning-file", o->tuning_file,
                  "Written by --tune (existing entries kept); otherwise loaded before timing if it exists")
      ->capture_default_str();
  app->add_option("--device", o->device, "GPU index")->capture_default_str();
  add_tune_options(app, o->tune_options);
  app->callback([o, &ctx] { ctx.action = [o] { return bench::run_gemm_dense_bench(*o); }; });
}

void attach_grouped_gemm(CLI::App* parent, CliContext& ctx) {
  auto o = std::make_shared<bench::GroupedGemmBenchOptions>();
  CLI::App* app = parent->add_subcommand(
      "grouped-gemm", "Time the MoE expert grouped GEMMs (fwd, dgrad, wgrad) on the six anchor shapes");
  app->add_option("--paths", o->paths, "Comma list of auto, grouped, batched, loop, streams; or all")
      ->capture_default_str();
  app->add_option("--loads", o->loads, "Token loads: equal, uneven or both")->capture_default_str();
  app->add_option("--ops", o->ops, "Comma list of fwd, dgrad, wgrad")->capture_default_str();
  app->add_option("--experts", o->experts, "One custom shape: experts (with the next three)");
  app->add_option("--tokens-per-expert", o->tokens_per_expert, "One custom shape: mean rows per expert");
  app->add_option("--K", o->k, "One custom shape: input features");
  app->add_option("--N", o->n, "One custom shape: output features");
  app->add_option("--warmup", o->warmup, "Untimed runs first")->capture_default_str();
  app->add_option("--iters", o->iters, "Timed runs (median)")->capture_default_str();
  app->add_option("--seed", o->seed, "Seed of the inputs and the uneven loads")->capture_default_str();
  app->add_option("--device", o->device, "GPU index")->capture_default_str();
  app->add_option("--output-file", o->output_file, "Report: .md or .jsonl")->capture_default_str();
  app->callback([o, &ctx] { ctx.action = [o] { return bench::run_grouped_gemm_bench(*o); }; });
}

}  // namespace

void attach_benchmark(CLI::App& root, CliContext& ctx) {
  CLI::App* bench = root.add_subcommand("benchmark", "Micro-benchmarks (Primus's benchmark suites)");
  bench->require_subcommand(1);
  attach_gemm(bench, ctx);
  attach_gemm_dense(bench, ctx);
  attach_grouped_gemm(bench, ctx);
  attach_benchmark_attention(bench, ctx);
  attach_benchmark_comm(bench, ctx, "comm");
}

}  // namespace primus::cli
