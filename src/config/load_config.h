#pragma once
// The configuration system's entry point: an experiment file (plus command-line overrides) in, a typed,
// validated TrainConfig out, with the provenance of every key. Touches no GPU and builds no model.
//
//   ResolvedConfig rc = load_config("exp.yaml", {.cli_overrides = {"--lr", "1e-5"}});
//   run_pretrain(rc.train, resolved_yaml(rc));
#include <map>
#include <string>
#include <vector>

#include "config/experiment.h"
#include "config/schema.h"
#include "config/train_config.h"

namespace primus::config {

// Which key (and where it was set) a TrainConfig field came from, for validation messages.
struct FieldSource {
  std::string key;
  Origin origin;
};

struct ResolvedConfig {
  ExperimentInfo info;
  CheckedKeys keys;      // every key of the module's dialect: typed value, origin, declaration (status, doc)
  CheckedKeys platform;  // the platform preset's keys
  TrainConfig train;
  int64_t world_size = 1;             // WORLD_SIZE from the environment (1 when unset)
  bool planning = false;              // loaded for a projection (ResolveOptions::planning)
  std::vector<std::string> derived;   // values computed from others ("ffn_hidden_size = ... (swiglu)")
  std::vector<std::string> warnings;  // accepted, but worth reading (shadowed values, unused keys)
  std::map<std::string, FieldSource> sources;  // TrainConfig field name -> key and origin

  void set_source(const std::string& field, const std::string& key, const Origin& origin) {
    sources[field] = {key, origin};
  }
  // "key=value (file:line:col)" of a field, for messages.
  std::string cite(const std::string& field, const std::string& value) const;
};

// Resolves, checks, maps and validates. Throws ConfigError (exit code 2) on any problem.
ResolvedConfig load_config(const std::string& experiment_path, const ResolveOptions& options = {});

// The dialect mappers and the cross-key validation (dialect_*.cpp, validate.cpp).
void map_megatron(ResolvedConfig& rc);
void map_megatron_moe(ResolvedConfig& rc);  // called by map_megatron
void map_megatron_mla(ResolvedConfig& rc);  // called by map_megatron: MLA, YaRN, MTP
void map_megatron_sft(ResolvedConfig& rc);  // called by map_megatron: stage: sft and its data keys
void map_torchtitan(ResolvedConfig& rc);
void validate_config(ResolvedConfig& rc);

}  // namespace primus::config
