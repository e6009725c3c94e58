#pragma once
// The names that build the run directory {workspace}/{work_group}/{user_name}/{exp_name}
// (docs/configuration.md): each of work_group (Primus's "team"), user_name and exp_name must be one directory
// name, so that no value (often taken from an environment variable) can leave the workspace or land in
// another run's directory.
#include <string>

#include "config/train_config.h"

namespace primus::config {

// Throws ConfigError naming `key`, the value and `where` (a file:line, or "" when unknown) unless `value` is
// a single directory name: not empty, not "." or "..", without '/' or '\\' and without control characters.
void check_run_name(const std::string& key, const std::string& value, const std::string& where);
// The workspace is a directory path ('/' allowed, absolute or relative, ".." allowed: it is the root the user
// chose); it must not be empty nor hold control characters.
void check_workspace(const std::string& value, const std::string& where);
// All four of a run.
void check_run_names(const RunInfo& run);

}  // namespace primus::config
