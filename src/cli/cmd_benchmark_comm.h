#pragma once
#include "cli/cli_context.h"

namespace primus::cli {

// Adds the collective benchmark (bench/comm_bench.h) as subcommand `name` of `parent`: `primus benchmark
// comm` and its older name `primus comm bench` are the same command.
void attach_benchmark_comm(CLI::App* parent, CliContext& ctx, const std::string& name);

}  // namespace primus::cli
