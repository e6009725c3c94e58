#pragma once
// The `primus` command line: builds the CLI11 app from the registered subcommands, parses, runs the chosen
// command and maps failures to exit codes: 0 ok, 1 runtime failure (primus::Error's own code), 2 bad
// configuration or arguments, 3 pre-flight failure, 4 halted by a training guard, 5 hang watchdog.
namespace primus::cli {

int run(int argc, char** argv);

}  // namespace primus::cli
