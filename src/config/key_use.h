#pragma once
// Whether the key statuses tell the truth: a key declared *implemented* must be read by the dialect mapper
// (it decides something), and a key declared *no effect here* must not be (else --dry-run would list as inert
// a key that changes the run). CheckedKeys records every read of a mapper shorthand (config/schema.h).
//
// Checked by tests/unit/config_key_use_test.cpp over every shipped and Primus experiment, and by any load
// when PRIMUS_CHECK_KEY_USE=1 (the Primus-examples sweep sets it for the 351 experiments of Primus's tree).
#include <string>
#include <vector>

#include "config/schema.h"

namespace primus::config {

// "KEY: declared implemented but never read" / "KEY: declared no effect here but read", one per broken
// label, in table order. Keys declared "not supported yet" are not judged (a set one is refused earlier).
std::vector<std::string> key_use_violations(const CheckedKeys& keys);

}  // namespace primus::config
