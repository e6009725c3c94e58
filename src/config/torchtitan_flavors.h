#pragma once
// TorchTitan names a model by family and flavor (model.name: llama3, model.flavor: 8B); the sizes live in
// TorchTitan's code, so they are tabulated here (plus Primus-C++'s tiny test flavors).
#include <optional>
#include <string>
#include <vector>

#include "config/train_config.h"

namespace primus::config {

struct Flavor {
  std::string family;  // llama3 | qwen3 | deepseek_v3
  std::string flavor;  // 8B, 70B, ...
  ModelConfig model;   // dimensions and flags; vocabulary left 0 (it comes from the tokenizer)
};

const std::vector<Flavor>& torchtitan_flavors();
const Flavor* find_flavor(const std::string& family, const std::string& flavor);

// TorchTitan's Llama-3 FFN width: 4*dim -> 2/3 -> x multiplier -> round up to a multiple.
int64_t llama3_ffn_dim(int64_t dim, double ffn_dim_multiplier, int64_t multiple_of);

}  // namespace primus::config
