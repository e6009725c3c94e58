#include "cli/projection_load.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>

#include "config/did_you_mean.h"
#include "config/not_supported.h"
#include "core/error.h"
#include "core/log.h"

namespace primus::cli {

void check_mistyped_options(const std::vector<std::string>& overrides, const CLI::App& command) {
  std::vector<std::string> options;
  for (const CLI::Option* o : command.get_options())
    for (const std::string& n : o->get_lnames()) options.push_back("--" + n);
  for (const std::string& token : overrides) {
    if (token.rfind("--", 0) != 0) continue;
    const std::string name = token.substr(0, token.find('='));
    std::vector<std::string> near = config::did_you_mean(name, options, 1);
    if (!near.empty() && near[0] != name && config::edit_distance(name, near[0]) <= 2)
      throw ConfigError(fmt::format("command line: unknown option '{}'; did you mean '{}'?", name, near[0]),
                        fmt::format("run `primus projection {} --help`", command.get_name()));
  }
}

config::ResolvedConfig load_for_projection(const std::string& path, const std::vector<std::string>& overrides,
                                           const ProjectionWorld& world, const std::string& command,
                                           bool quiet) {
  if (path.empty())
    throw ConfigError(
        fmt::format("projection {}: --config FILE is required (the Primus experiment YAML)", command),
        fmt::format("primus projection {} --config EXPERIMENT.yaml [key=value ...]", command));
  config::ResolveOptions options;
  options.cli_overrides = overrides;
  options.planning = true;
  options.plan_data_parallel = world.data_parallel;
  options.plan_world_size = world.world_size;
  config::ResolvedConfig rc;
  try {
    rc = config::load_config(path, options);
  } catch (const ConfigError& e) {
    // A post-training experiment (module post_trainer only) plans the same way.
    if (std::string(e.what()).find("defines module post_trainer") == std::string::npos) throw;
    options.module_name = "post_trainer";
    rc = config::load_config(path, options);
  }
  // Values a training run would refuse are expected here (a plan for a layout we cannot train yet): one line.
  std::vector<std::string> refused;
  for (const std::string& w : rc.warnings) {
    const size_t at = w.find("not supported yet: ");
    if (w.rfind("planning only", 0) == 0 && at != std::string::npos)
      refused.push_back(w.substr(at + 19, w.find(" (", at) - at - 19));
    else if (!quiet)
      log::warn("config: {}", w);
  }
  if (!refused.empty() && !quiet)
    // On stderr, like every message here: stdout is the table or the JSON.
    std::fprintf(stderr, "config: planning only; training would refuse %s: %s\n",
                 refused.size() == 1 ? "this value" : "these values",
                 fmt::format("{}", fmt::join(refused, ", ")).c_str());
  return rc;
}

}  // namespace primus::cli
