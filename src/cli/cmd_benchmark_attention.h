#pragma once
// `primus benchmark attention` (see cmd_benchmark_attention.cpp). Wired in by cmd_benchmark.cpp's
// attach_benchmark(): `attach_benchmark_attention(bench, ctx);`.
#include <CLI/CLI.hpp>

#include "cli/cli_context.h"

namespace primus::cli {

void attach_benchmark_attention(CLI::App* benchmark, CliContext& ctx);

}  // namespace primus::cli
