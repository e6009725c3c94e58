// `primus projection plan --config X --nnodes N --nproc-per-node G [--gpu NAME] [--output plan.yaml]`: the
// layouts the world allows, dropped when they do not fit, ranked by projected tokens/s per GPU; the best
// written as flat overrides that `train pretrain --overrides FILE` takes (projection/planner.h).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

#include "cli/projection_commands.h"
#include "cli/projection_load.h"
#include "core/error.h"
#include "projection/planner.h"
#include "projection/projection_page.h"

namespace primus::cli {
namespace {

struct PlanArgs : ModelProjectionArgs {
  int top = 5;
  std::string html;  // --html PAGE (--output is the overrides file here)
};

std::string row(int i, const projection::PlanCandidate& c) {
  const auto& p = c.perf;
  return fmt::format("{:>2}  {:<58} {:>8.1f} {:>9.0f} {:>6.1f}% {:>8.1f}  {:.0f}/{:.0f}/{:.0f}/{:.0f}\n", i,
                     c.label, c.memory.peak_bytes / 1e9, p.tokens_per_s_per_gpu, p.mfu * 100,
                     p.step_time_s * 1e3, p.compute_s * 1e3, p.exposed_comm_s * 1e3, p.bubble_s * 1e3,
                     p.optimizer_s * 1e3);
}

int run_plan(PlanArgs args) {
  if (args.target_nodes > 0 && args.nnodes == 0) {
    args.nnodes = args.target_nodes;
    if (args.nproc_per_node == 0) args.nproc_per_node = 8;
  }
  if (args.nnodes < 1 || args.nproc_per_node < 1)
    throw ConfigError("projection plan: --nnodes N --nproc-per-node G are required (the world to plan for)",
                      "primus projection plan --config EXP.yaml --nnodes 1 --nproc-per-node 8");
  if (args.top < 1) throw ConfigError(fmt::format("--top {} must be >= 1", args.top));
  const std::string overrides_file = args.output, html = args.html;
  const ProjectionContext pc = projection_context(args, "plan");
  const int world = args.nnodes * args.nproc_per_node;
  projection::PlanLoader loader = [&](const std::vector<std::string>& tokens) {
    std::vector<std::string> all = args.overrides;
    all.insert(all.end(), tokens.begin(), tokens.end());
    return load_for_projection(args.config, all, {.data_parallel = 1, .world_size = world}, "plan",
                               /*quiet=*/true);
  };
  const projection::PlanResult r = projection::plan_layouts(
      pc.rc, loader, {.world = world, .nproc_per_node = args.nproc_per_node, .top = args.top}, pc.gpu,
      pc.links, pc.cal());
  if (args.json) {
    nlohmann::ordered_json j;
    j["world_size"] = world;
    j["gpu"] = pc.gpu.name;
    j["structures"] = r.structures;
    j["candidates"] = r.candidates;
    j["invalid"] = r.invalid;
    j["refused"] = r.refused;
    j["too_big"] = r.too_big;
    nlohmann::ordered_json top = nlohmann::ordered_json::array();
    for (int i = 0; i < static_cast<int>(r.ranked.size()) && i < args.top; ++i) {
      const auto& c = r.ranked[i];
      nlohmann::ordered_json o;
      o["label"] = c.label;
      for (const auto& [k, v] : c.overrides) o["overrides"][k] = v;
      o["peak_bytes"] = c.memory.peak_bytes;
      o["step_time_s"] = c.perf.step_time_s;
      o["tokens_per_s_per_gpu"] = c.perf.tokens_per_s_per_gpu;
      o["mfu"] = c.perf.mfu;
      top.push_back(o);
    }
    j["top"] = top;
    j["reasons"] = r.reasons;
    std::puts(j.dump(1).c_str());
  } else {
    std::string out = pc.title + "\n";
    out += fmt::format("world    {} x {} = {} x {} ({:.1f} GB)\n", args.nnodes, args.nproc_per_node, world,
                       pc.gpu.name, pc.gpu.memory_gb);
    out += fmt::format(
        "searched {} parallel structures, {} layouts with micro-batch and recompute: {} fit and rank below, "
        "{} "
        "over the GPU's memory, {} not trainable yet, {} invalid\n",
        r.structures, r.candidates, r.ranked.size(), r.too_big, r.refused, r.invalid);
    if (r.ranked.empty()) {
      out += "no layout fits";
    } else {
      out += fmt::format("{:>2}  {:<58} {:>8} {:>9} {:>7} {:>8}  {}\n", "#", "layout", "peak GB", "tok/s/GPU",
                         "MFU", "step ms", "compute/DP comm/bubble/optimizer ms");
      for (int i = 0; i < static_cast<int>(r.ranked.size()) && i < args.top; ++i)
        out += row(i + 1, r.ranked[i]);
    }
    for (const std::string& why : r.reasons) out += "dropped  " + why + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  if (r.ranked.empty())
    throw ConfigError(fmt::format("projection plan: no layout of {} x {} fits {} GB per GPU", args.nnodes,
                                  args.nproc_per_node, pc.gpu.memory_gb),
                      "more GPUs, a larger GPU (--gpu), or a smaller micro-batch / sequence");
  const projection::PlanCandidate& best = r.ranked.front();
  if (!overrides_file.empty()) {
    write_file(overrides_file,
               projection::overrides_yaml(
                   best, fmt::format("# primus projection plan: the best of {} layouts for {} x {} {} ({})\n"
                                     "# {}: {:.0f} tokens/s/GPU projected, peak {:.1f} GB\n"
                                     "# use: primus train pretrain --config {} --overrides THIS_FILE\n",
                                     r.candidates, args.nnodes, args.nproc_per_node, pc.gpu.name, args.config,
                                     best.label, best.perf.tokens_per_s_per_gpu, best.memory.peak_bytes / 1e9,
                                     args.config)));
    std::fprintf(stderr, "projection: wrote %s\n", overrides_file.c_str());
  }
  if (!html.empty()) {
    write_file(html, projection::projection_page(pc.title + " — best layout: " + best.label, best.setup,
                                                 &best.memory, &best.perf));
    std::fprintf(stderr, "projection: wrote %s\n", html.c_str());
  }
  return 0;
}

}  // namespace

void attach_plan(CLI::App& projection, CliContext& ctx) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* app = projection.add_subcommand(
      "plan",
      "The best layout for a world: every valid DP/ZeRO/FSDP x TP x PP x VPP x CP x EP, recompute and "
      "micro-batch choice that fits, ranked by projected tokens/s per GPU");
  add_model_projection_options(*app, *args);
  app->get_option("--output")->description("Write the best layout as flat key: value overrides");
  app->add_option("--top", args->top, "How many layouts to print")->capture_default_str();
  app->add_option("--html", args->html, "Also write an HTML page of the best layout");
  app->footer(
      "Example:\n  primus projection plan --config exp.yaml --nnodes 2 --nproc-per-node 8 --gpu h100 -o "
      "plan.yaml\n"
      "  primus train pretrain --config exp.yaml --overrides plan.yaml");
  app->callback([app, args, &ctx] {
    args->overrides = app->remaining();
    check_mistyped_options(args->overrides, *app);
    ctx.action = [args] { return run_plan(*args); };
  });
}

}  // namespace primus::cli
