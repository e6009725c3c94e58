#pragma once
// Megatron's moe_layer_freq: which decoder layers are MoE. An int N makes every N-th layer MoE (layers 0, N,
// 2N, ...; 1 = all); a list of 0/1 per layer says it layer by layer; a string holds either, or a Python list
// expression as Primus's DeepSeek presets write it ("([0]*1+[1]*26)", "[1]*8", "([1]*1+[0]*1)*24"), which is
// evaluated here with a small grammar (lists of ints, +, * by an int, parentheses) instead of Python's eval.
#include <string>
#include <vector>

#include "config/value.h"

namespace primus::config {

// One flag per layer (1 = MoE). Throws ConfigError naming `where` when the value does not parse, holds
// values other than 0/1, or its length is not num_layers.
std::vector<char> moe_layer_pattern(const Value& freq, int64_t num_layers, const std::string& where);

}  // namespace primus::config
