#pragma once
// Loads one preset file with its `extends:` chain, as Primus's yaml_loader.parse_yaml does: the file is read,
// `${VAR}` is substituted, then each parent (paths relative to this file's directory, a list or one string)
// is loaded recursively and merged left to right (later wins), and this file's own keys merge last.
// `bases:` (Primus's old spelling of `extends:`) is read as `extends:`, with a deprecation warning.
#include <string>
#include <vector>

#include "config/env_subst.h"
#include "config/value.h"

namespace primus::config {

// Returns the merged map. Throws ConfigError for a missing parent (naming it and where it was referenced),
// a cycle (naming the chain), a non-map file, or an empty one.
Value load_preset(const std::string& path, const EnvLookup& env);

// Same, also reporting every file read, in load order (for --dry-run and tests), and warnings (`bases:`).
Value load_preset(const std::string& path, const EnvLookup& env, std::vector<std::string>* files_read,
                  std::vector<std::string>* warnings = nullptr);

}  // namespace primus::config
