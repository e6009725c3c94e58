// Fuzzes the YAML experiment loader: the input is an experiment file that may `extends:` a fixed parent
// (which uses ${VAR} and ${VAR:default}) and may use ${VAR} itself; load_preset reads it with yaml-cpp,
// converts it with PyYAML typing, substitutes variables and merges the chain. Any input must end in a Value
// or a primus::Error (ConfigError), never a crash, a hang or unbounded memory (YAML aliases: see
// yaml_reader.cpp).
#include <cstdint>
#include <optional>
#include <string>

#include "config/preset_loader.h"
#include "core/error.h"
#include "fuzz_util.h"

namespace {

const char* kParent = R"(# the fixed parent of every fuzzed experiment
work_group: ${PRIMUS_TEAM:amd}
user_name: ${PRIMUS_USER}
model:
  num_layers: 4
  hidden_size: ${HIDDEN:256}
  rope: {theta: 10000.0, scaling: null}
lr: 3.0e-4
tags: [base, ${PRIMUS_USER}]
)";

std::optional<std::string> fixed_env(const std::string& name) {
  if (name == "PRIMUS_USER") return "fuzz";
  if (name == "HIDDEN") return "512";
  if (name == "EMPTY") return "";
  if (name == "FLAG") return "True";
  return std::nullopt;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool parent_written = (primus::fuzz::write_file("parent.yaml", kParent), true);
  (void)parent_written;
  const std::string path = primus::fuzz::write_file("experiment.yaml", data, size);
  try {
    primus::config::Value v = primus::config::load_preset(path, fixed_env);
    (void)v;
  } catch (const primus::Error&) {
  }
  return 0;
}
