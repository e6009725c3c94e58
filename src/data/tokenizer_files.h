#pragma once
// Finding a tokenizer on disk from `tokenizer_model`: a file, a directory holding tokenizer.json /
// tokenizer.model / vocab.json + merges.txt, or a hub name ("meta-llama/Llama-3.1-8B") found under
// PRIMUS_TOKENIZER_PATH or in a Hugging Face cache (HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub).
// This machine never downloads. Self-contained (no config types), so the config layer can ask for a
// vocabulary size.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace primus {

struct TokenizerFiles {
  enum Kind { kNone, kHfJson, kSentencePiece, kGpt2VocabMerges } kind = kNone;
  std::string path;                   // tokenizer.json or tokenizer.model or vocab.json
  std::string merges;                 // merges.txt (kGpt2VocabMerges)
  std::vector<std::string> searched;  // where a hub name was looked for
};

// Resolves `model`; kind kNone (with `searched` filled) when nothing is found.
TokenizerFiles find_tokenizer_files(const std::string& model);

// The vocabulary size of a tokenizer found on disk (tokenizer.json: the largest id + 1 over the vocabulary
// and the added tokens; tokenizer.model: the number of pieces; vocab.json: its entries), or null when `model`
// / `vocab_file` does not resolve to a local file. Throws ConfigError for a file that exists but cannot be
// read.
std::optional<int64_t> tokenizer_file_vocab_size(const std::string& tokenizer_type, const std::string& model,
                                                 const std::string& vocab_file);

// Checks every id of a tokenizer.json (model.vocab values and added_tokens[].id) and returns the largest + 1.
// An id must be an integer in [0, vocab entries + added tokens): ids index the embedding table, so a
// negative one, or one far past the number of tokens (2^31 - 1, 3,000,000 in a 2,048-token file), is a
// damaged file, not a vocabulary to allocate. Throws ConfigError naming `source`, the token and its id.
int64_t checked_tokenizer_json_vocab_size(const nlohmann::json& tokenizer, const std::string& source);

// Counts the pieces of a SentencePiece ModelProto (field 1) without libsentencepiece.
int64_t sentencepiece_piece_count(const std::string& path);

}  // namespace primus
