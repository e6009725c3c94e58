#pragma once
// Reads YAML text into a config Value tree with PyYAML's typing (config/yaml_scalar.h) and with every node's
// file:line:col. Duplicate keys are an error: PyYAML would silently keep the last one.
#include <string>

#include "config/value.h"

namespace primus::config {

// Parses a whole file. Throws primus::ConfigError naming the file (and line:col for syntax errors).
Value read_yaml_file(const std::string& path);

// Parses `text`; `source` is the name used in origins and messages.
Value read_yaml_text(const std::string& text, const std::string& source);

}  // namespace primus::config
