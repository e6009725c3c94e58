#pragma once
// What every `primus projection <what>` command shares: loading the experiment in planning mode for a world,
// and telling a mistyped option from a config override.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "config/load_config.h"

namespace primus::cli {

// An unknown "--word" close to one of the options `command` declares is a mistyped option, not a config
// override: ConfigError naming the option it resembles. The options are read from the command itself, so the
// check cannot drift from what the command takes.
void check_mistyped_options(const std::vector<std::string>& overrides, const CLI::App& command);

struct ProjectionWorld {
  int64_t data_parallel = 1;  // the world is the model-parallel degrees times this (when world_size is 0)
  int64_t world_size = 0;     // a world of this many ranks (--nnodes x --nproc-per-node)
};

// The experiment with the command line's overrides, in planning mode: values training would refuse are
// listed on stderr in one line (a plan for a layout we cannot train yet), not refused. A post-training
// experiment (module post_trainer only) plans the same way.
config::ResolvedConfig load_for_projection(const std::string& path, const std::vector<std::string>& overrides,
                                           const ProjectionWorld& world, const std::string& command,
                                           bool quiet = false);

}  // namespace primus::cli
