// `primus report RUN_DIR [--output FILE]`: the post-flight HTML report of a run (report/run_report.h).
// `primus report timeline TRACE... [--json FILE] [--markdown FILE]`: the GPU timeline and op summary of
// Chrome traces, ours or torch.profiler's (profile/timeline.h).
#include <fstream>
#include <memory>

#include "cli/cli_context.h"
#include "core/error.h"
#include "core/log.h"
#include "profile/timeline.h"
#include "report/run_report.h"

namespace primus::cli {

namespace {

int run_timeline(const std::vector<std::string>& traces, const std::string& json_out,
                 const std::string& md_out) {
  if (traces.empty())
    throw ConfigError("report timeline: no trace given", "primus report timeline RUN_DIR/trace/rank0.json");
  nlohmann::json all = nlohmann::json::array();
  std::string md;
  for (const std::string& t : traces)
    for (const profile::TimelineReport& r : profile::analyse_trace_file(t)) {
      std::printf("%s\n", profile::format_timeline_text(r).c_str());
      all.push_back(profile::timeline_to_json(r));
      md += profile::format_timeline_markdown(r) + "\n";
    }
  if (!json_out.empty()) {
    std::ofstream f(json_out);
    if (!f) throw Error(ErrorKind::kRuntime, "report timeline: cannot write " + json_out);
    f << all.dump(1) << '\n';
  }
  if (!md_out.empty()) {
    std::ofstream f(md_out);
    if (!f) throw Error(ErrorKind::kRuntime, "report timeline: cannot write " + md_out);
    f << md;
  }
  return 0;
}

}  // namespace

void attach_report(CLI::App& root, CliContext& ctx) {
  auto args = std::make_shared<std::vector<std::string>>();
  auto output = std::make_shared<std::string>();
  auto json_out = std::make_shared<std::string>();
  auto md_out = std::make_shared<std::string>();
  auto compare = std::make_shared<std::vector<std::string>>();
  CLI::App* app = root.add_subcommand(
      "report",
      "Post-flight HTML report of a run directory, or `report timeline TRACE...`: GPU timeline analysis");
  app->add_option("args", *args, "RUN_DIR, or: timeline TRACE...")->required();
  app->add_option("--output,-o", *output, "HTML file (default RUN_DIR/report.html)");
  app->add_option("--json", *json_out, "timeline: also write the tables as JSON");
  app->add_option("--markdown", *md_out, "timeline: also write the tables as Markdown");
  app->add_option("--compare", *compare,
                  "other run directories whose loss curves are drawn beside this run's (e.g. BF16 vs FP8)");
  app->callback([args, output, json_out, md_out, compare, &ctx] {
    ctx.action = [args, output, json_out, md_out, compare] {
      if ((*args)[0] == "timeline")
        return run_timeline(std::vector<std::string>(args->begin() + 1, args->end()), *json_out, *md_out);
      if (args->size() != 1)
        throw ConfigError(fmt::format("report: expected one run directory, got {} arguments", args->size()),
                          "primus report RUN_DIR  |  primus report timeline TRACE...");
      const std::string path = report::write_run_report((*args)[0], *output, *compare);
      log::info("report: wrote {}", path);
      return 0;
    };
  });
}

}  // namespace primus::cli
