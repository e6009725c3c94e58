#pragma once
// The TorchTitan-dialect key table, in two files (keys_torchtitan.cpp: what maps into TrainConfig;
// keys_torchtitan_aux.cpp: logging, tooling and kernel switches).
#include "config/key_decl.h"

namespace primus::config::keys {

void add_torchtitan_keys(KeyTable& t);
void add_torchtitan_aux_keys(KeyTable& t);
void add_torchtitan_upstream_keys(KeyTable& t);  // the rest of TorchTitan's JobConfig
void add_platform_keys(KeyTable& t);

}  // namespace primus::config::keys
