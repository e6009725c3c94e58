#pragma once
// The Megatron-dialect key table is assembled from one file per topic (keys_megatron_*.cpp).
#include "config/key_decl.h"

namespace primus::config::keys {

void add_common_keys(KeyTable& t);  // module_base keys, framework/name, Primus-C++ extension keys
void add_megatron_model_keys(KeyTable& t);
void add_megatron_moe_keys(KeyTable& t);
void add_megatron_parallel_keys(KeyTable& t);
void add_megatron_training_keys(KeyTable& t);
void add_megatron_checkpoint_keys(KeyTable& t);
void add_megatron_logging_keys(KeyTable& t);
void add_megatron_other_model_keys(KeyTable& t);
void add_megatron_primus_keys(KeyTable& t);
void add_megatron_sft_keys(KeyTable& t);
void add_megatron_upstream_keys(KeyTable& t);  // Megatron-LM arguments and Primus families not declared above
void add_megatron_upstream_knobs(KeyTable& t);

}  // namespace primus::config::keys
