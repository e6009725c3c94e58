#pragma once
// Entry point from the CLI into training. The CLI has resolved and validated the configuration before
// calling.
#include <string>

#include "config/train_config.h"

namespace primus {

// Runs pretraining as configured; returns the process exit code (0 ok). `resolved_yaml` is the fully resolved
// configuration as YAML text, saved in the run directory so that a run records exactly what it trained with.
// Throws primus::Error on failure (the CLI maps it to an exit code).
int run_pretrain(const TrainConfig& cfg, const std::string& resolved_yaml);

}  // namespace primus
