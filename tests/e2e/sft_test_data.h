#pragma once
// SFT data of the post-training end-to-end tests (train_sft_e2e_test.cpp, train_lora_e2e_test.cpp).
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace primus::cli_test {

// Deterministic instruction pairs a micro model can learn: spell a word backwards (alpaca records), or, every
// other record when `mixed`, repeat it twice (messages records).
inline void write_jsonl(const std::string& path, int n, int seed, bool mixed = true) {
  std::ofstream f(path);
  uint32_t x = static_cast<uint32_t>(seed) * 2654435761u + 1;
  for (int i = 0; i < n; ++i) {
    std::string w;
    const int len = 3 + static_cast<int>((x >> 8) % 6);
    for (int j = 0; j < len; ++j) {
      x = x * 1664525u + 1013904223u;
      w += static_cast<char>('a' + (x >> 24) % 26);
    }
    nlohmann::json j;
    if (!mixed || i % 2 == 0) {
      j["instruction"] = "Spell backwards: " + w;
      j["output"] = std::string(w.rbegin(), w.rend());
    } else {
      j["messages"] = {{{"role", "user"}, {"content", "Say it twice: " + w}},
                       {{"role", "assistant"}, {"content", w + " " + w}}};
    }
    f << j.dump() << "\n";
  }
}

}  // namespace primus::cli_test
