#pragma once
// `primus data train-tokenizer`: a byte-level BPE trainer (the algorithm of HF tokenizers' BpeTrainer: words
// from the GPT-2 pre-tokenizer regex, the 256 bytes as the alphabet, the most frequent adjacent pair merged
// first, the smallest pair on ties). It writes an HF-compatible tokenizer.json (+ tokenizer_config.json) that
// HuggingFaceTokenizer, Hugging Face's own libraries and Megatron's HuggingFaceTokenizer load.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/regex.h"

namespace primus {

struct BpeTrainerOptions {
  int64_t vocab_size = 4096;  // bytes + merges + special tokens
  int64_t min_frequency = 2;  // a pair seen fewer times is never merged
  std::vector<std::string> special_tokens{"<|endoftext|>"};
};

class BpeTrainer {
 public:
  BpeTrainer();
  // Counts the pre-tokenized words of one document.
  void add_text(std::string_view text);
  int64_t words() const { return static_cast<int64_t>(counts_.size()); }
  // Learns the merges; returns tokenizer.json's text. `merges_out` (optional) gets the number of merges.
  std::string train(const BpeTrainerOptions& opt, int64_t* merges_out = nullptr) const;
  // tokenizer_config.json naming the first special token as eos/bos.
  static std::string tokenizer_config(const BpeTrainerOptions& opt);

 private:
  std::unique_ptr<Regex> regex_;
  std::unordered_map<std::string, int64_t> counts_;
};

}  // namespace primus
