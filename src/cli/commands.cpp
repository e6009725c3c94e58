#include "cli/cli_context.h"

namespace primus::cli {

const std::vector<CommandRegistration>& commands() {
  // Add a subcommand: write cmd_<name>.cpp with attach_<name>(), declare it in cli_context.h, list it here.
  static const std::vector<CommandRegistration> kCommands = {
      {"train", &attach_train},           {"benchmark", &attach_benchmark}, {"data", &attach_data},
      {"launch", &attach_launch},         {"comm", &attach_comm},           {"convert", &attach_convert},
      {"checkpoint", &attach_checkpoint}, {"preflight", &attach_preflight}, {"report", &attach_report},
      {"projection", &attach_projection},
  };
  return kCommands;
}

}  // namespace primus::cli
