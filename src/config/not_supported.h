#pragma once
// The error for a configuration that is valid for Primus but asks for a feature Primus-C++ does not have yet:
// the message holds "not supported yet: <feature>". Exit code 2 like every ConfigError; a distinct type so
// that callers (`train posttrain`, the Primus-examples sweep) can tell "valid but not here yet" from a
// mistake in the file.
#include <string>

#include "core/error.h"

namespace primus::config {

class NotSupportedError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

}  // namespace primus::config
