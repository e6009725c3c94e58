#pragma once
// Finding a tokenizer on disk from `tokenizer_model`: a file, a directory holding tokenizer.json /
// tokenizer.model / vocab.json + merges.txt, or a hub name ("meta-llama/Llama-3.1-8B") found under
// PRIMUS_TOKENIZER_PATH or in a Hugging Face cache (HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub).
// This machine never downloads. Self-contained (no config types), so the config layer can ask for a
// vocabulary size.
#include <cstdint>
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

// Counts the pieces of a SentencePiece ModelProto (field 1) without libsentencepiece.
int64_t sentencepiece_piece_count(const std::string& path);

}  // namespace primus
