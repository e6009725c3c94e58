#pragma once
// Resolves a Primus experiment file into the merged tree of one module, in Primus's order
// (primus/core/launcher/parser.py, train_runtime.py):
//   1. the module preset (modules/<framework>/<config>) and the model preset (models/<framework>/<model>),
//   each
//      with its extends chain;
//   2. model keys are added only where the module preset has no such top-level key (`name` skipped; `model`
//   set to
//      the model file name when the model preset has no `model` key);
//   3. the experiment's `overrides:` are deep-merged, then `framework` and `name` are set;
//   4. command-line overrides are deep-merged last; then the string "null" becomes null.
// Net priority: CLI > experiment overrides > module preset > model preset > extends parents (later >
// earlier).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/env_subst.h"
#include "config/value.h"

namespace primus::config {

struct ResolveOptions {
  std::vector<std::string> cli_overrides;  // raw tokens, see config/cli_overrides.h
  std::string module_name = "pre_trainer";
  EnvLookup env = process_env();
  std::optional<std::vector<std::string>> roots;  // preset search path; default: config_search_path(env)
  // Planning (`primus projection`): describe a run that this build may not be able to train. Values of
  // features not supported yet and broken cross-key rules (validate_config) become warnings
  // (ResolvedConfig::warnings) instead of errors, the pipeline split is left to parallel/pipeline_layout
  // (which checks it key by key), and the world size is the
  // model-parallel ranks (TP x PP x CP; TorchTitan also x dp_replicate) x plan_data_parallel, not WORLD_SIZE.
  bool planning = false;
  int64_t plan_data_parallel = 1;
  // Planning for a given world (`train pretrain --dry-run --nnodes N --nproc-per-node G`): its size, which
  // the parallel degrees must fit; 0 = the model-parallel ranks x plan_data_parallel, as above.
  int64_t plan_world_size = 0;
};

struct ExperimentInfo {
  std::string path;  // the experiment file
  std::string work_group, user_name, exp_name, workspace;
  Origin work_group_origin, user_name_origin, exp_name_origin, workspace_origin;
  std::string module_name;
  std::string framework;
  std::string module_preset;  // resolved files
  std::string model_preset;
  std::string model_name;       // the experiment's `model:` value
  std::string platform_preset;  // "" when none was found (no default platform file anywhere)
  std::vector<std::string> roots;
  std::vector<std::string> files_read;  // every YAML file read, in order
  std::vector<std::string> warnings;    // values that lost a merge silently in Primus, unused modules, ...
  // The experiment's top-level `env:` (name, value), exported for the run (variables already set win).
  std::vector<std::pair<std::string, std::string>> env;
};

struct ResolvedTree {
  ExperimentInfo info;
  Value module;    // the merged module tree (not yet checked against a key table)
  Value platform;  // the merged platform tree (map; empty when there is none)
};

// Throws ConfigError for a bad experiment (missing required keys, unknown keys at the experiment level, a
// module or preset that is missing, unset ${VAR}, cyclic extends, bad overrides).
ResolvedTree resolve_experiment(const std::string& path, const ResolveOptions& options);

}  // namespace primus::config
