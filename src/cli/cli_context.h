#pragma once
// What the subcommands share: the global flags, and the action the parsed command line selected (run after
// parsing, so that parse errors and command failures map to exit codes in one place: cli/app.cpp).
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace primus::cli {

struct CliContext {
  bool debug = false;
  std::function<int()> action;  // set by the chosen subcommand's callback
  // `primus launch ... -- COMMAND`: the words after the `--`, verbatim. They are cut off before CLI11 parses
  // the rest (it would split a list value such as "[3,2,2,1]" into words and take `--` from a subcommand
  // without positional arguments); empty when there is no `--`.
  std::vector<std::string> passthrough;
};

// One subcommand: `attach` adds it (and its own subcommands) to the root app. Each lives in cmd_<name>.cpp.
struct CommandRegistration {
  const char* name;
  void (*attach)(CLI::App& root, CliContext& ctx);
};

// Every top-level subcommand. An explicit list rather than static self-registration: the subcommand files
// live in the primus_lib static library, and the linker drops objects nothing refers to, registrars included.
const std::vector<CommandRegistration>& commands();

// Subcommand attach functions (one per cmd_<name>.cpp).
void attach_train(CLI::App& root, CliContext& ctx);
void attach_benchmark(CLI::App& root, CliContext& ctx);  // cmd_benchmark.cpp
void attach_data(CLI::App& root, CliContext& ctx);       // cmd_data.cpp
void attach_launch(CLI::App& root, CliContext& ctx);     // cmd_launch.cpp
void attach_comm(CLI::App& root, CliContext& ctx);       // cmd_comm.cpp
void attach_convert(CLI::App& root, CliContext& ctx);    // cmd_convert.cpp
// cmd_checkpoint.cpp:
void attach_checkpoint(CLI::App& root, CliContext& ctx);
void attach_preflight(CLI::App& root, CliContext& ctx);   // cmd_preflight.cpp
void attach_report(CLI::App& root, CliContext& ctx);      // cmd_report.cpp
void attach_projection(CLI::App& root, CliContext& ctx);  // cmd_projection.cpp

}  // namespace primus::cli
