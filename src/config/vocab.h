#pragma once
// Vocabulary size from the tokenizer when the config leaves vocab_size null, as Megatron derives it from the
// tokenizer it loads (we cannot load HuggingFace tokenizers here, so well-known names come from a table).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace primus::config {

// Tokenizer types Megatron/Primus know, plus Primus-C++'s ByteTokenizer.
const std::vector<std::string>& known_tokenizer_types();

// Size of a well-known tokenizer model ("meta-llama/Llama-3.1-8B", a local folder named like one, ...).
std::optional<int64_t> known_vocab_size(std::string_view tokenizer_model);

struct VocabChoice {
  int64_t size = 0;
  std::string how;  // e.g. "ByteTokenizer: 256 bytes + end-of-document"
};

// The vocabulary size: `vocab_size` when given (checked against fixed-size tokenizers), else derived from the
// tokenizer. Throws ConfigError asking for vocab_size when it cannot be derived.
// A tokenizer file on disk (tokenizer.json, tokenizer.model, GPT-2 vocab.json) gives its own size, as
// Megatron takes it from the tokenizer it loads.
VocabChoice choose_vocab_size(const std::string& tokenizer_type, const std::string& tokenizer_model,
                              std::optional<int64_t> vocab_size, const std::string& vocab_file = "");

// Rounds up to a multiple of lcm(divisible_by, tp). Megatron's _vocab_size_with_padding uses divisible_by *
// tp, which makes the padded table (and the model) depend on TP; see vocab.cpp.
int64_t padded_vocab_size(int64_t vocab, int64_t divisible_by, int64_t tp);

}  // namespace primus::config
