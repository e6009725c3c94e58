#include "data/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "core/error.h"
#include "data/hf_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/tokenizer_files.h"

namespace primus {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text, bool) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids, bool) const {
  std::string out;
  out.reserve(ids.size());
  for (int32_t id : ids) {
    if (id >= 0 && id < 256) out.push_back(static_cast<char>(id));
  }
  return out;
}

NullTokenizer::NullTokenizer(int64_t vocab_size) : vocab_(vocab_size) {
  if (vocab_size <= 0) throw ConfigError("tokenizer_type NullTokenizer needs vocab_size > 0");
}

std::vector<int32_t> NullTokenizer::encode(std::string_view text, bool) const {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    if (j == i) break;
    int64_t v = -1;
    auto r = std::from_chars(text.data() + i, text.data() + j, v);
    if (r.ec != std::errc() || r.ptr != text.data() + j || v < 0 || v > vocab_)
      throw Error(ErrorKind::kRuntime,
                  fmt::format("NullTokenizer: '{}' is not an id in [0, {}]", text.substr(i, j - i), vocab_));
    ids.push_back(static_cast<int32_t>(v));
    i = j;
  }
  return ids;
}

std::string NullTokenizer::decode(const std::vector<int32_t>& ids, bool) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += fmt::format("{}{}", i ? " " : "", ids[i]);
  return out;
}

namespace {

// Tokenizer types that Primus maps to Hugging Face's AutoTokenizer(tokenizer_model).
bool is_hf_type(const std::string& t) {
  static const char* kHf[] = {"HuggingFaceTokenizer", "Llama2Tokenizer",     "Llama3Tokenizer",
                              "MixtralTokenizer",     "DeepSeekV2Tokenizer", "DeepSeekV3Tokenizer"};
  return std::find(std::begin(kHf), std::end(kHf), t) != std::end(kHf);
}

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerSpec& spec) {
  const std::string& type = spec.type;
  if (type == "ByteTokenizer" || type.empty()) return std::make_unique<ByteTokenizer>();
  if (type == "NullTokenizer") return std::make_unique<NullTokenizer>(spec.vocab_size);
  if (type == "GPT2BPETokenizer") {
    std::string vocab = spec.vocab_file, merges = spec.merge_file;
    if (vocab.empty() || merges.empty()) {
      // A tokenizer_model directory holding vocab.json + merges.txt also works.
      const TokenizerFiles f = find_tokenizer_files(spec.model);
      if (f.kind == TokenizerFiles::kGpt2VocabMerges) {
        vocab = f.path;
        merges = f.merges;
      } else {
        throw ConfigError(
            "tokenizer_type GPT2BPETokenizer needs vocab_file (vocab.json) and merge_file (merges.txt)",
            "set vocab_file and merge_file, or use HuggingFaceTokenizer with a tokenizer.json");
      }
    }
    return HfTokenizer::gpt2_from_files(vocab, merges);
  }
  const bool spm_type = type == "SentencePieceTokenizer" || type == "GPTSentencePieceTokenizer";
  if (is_hf_type(type) || spm_type) {
    if (spec.model.empty())
      throw ConfigError(
          fmt::format("tokenizer_type {} needs tokenizer_model (a tokenizer.json, a tokenizer.model, "
                      "or a directory holding one)",
                      type));
    const TokenizerFiles f = find_tokenizer_files(spec.model);
    switch (f.kind) {
      case TokenizerFiles::kNone:
        throw ConfigError(
            fmt::format(
                "tokenizer_model: '{}' is not a local tokenizer file or directory, and no local copy was "
                "found (looked in: {})",
                spec.model, fmt::join(f.searched, ", ")),
            "this machine does not download from the Hugging Face Hub: copy tokenizer.json (+ "
            "tokenizer_config.json) here and set tokenizer_model to its path or directory, or point "
            "PRIMUS_TOKENIZER_PATH (a directory holding <org>/<name>/tokenizer.json) or HF_HOME at a copy");
      case TokenizerFiles::kHfJson:
        if (spm_type)
          throw ConfigError(fmt::format("tokenizer_type {} needs a SentencePiece tokenizer.model, but "
                                        "tokenizer_model resolves to {}",
                                        type, f.path),
                            "use tokenizer_type HuggingFaceTokenizer for a tokenizer.json");
        return HfTokenizer::from_file(f.path);
      case TokenizerFiles::kGpt2VocabMerges:
        return HfTokenizer::gpt2_from_files(f.path, f.merges);
      case TokenizerFiles::kSentencePiece:
        // Megatron's Llama2Tokenizer prepends BOS; its SentencePiece tokenizers do not.
        return std::make_unique<SentencePieceTokenizer>(
            f.path, type == "Llama2Tokenizer",
            type == "HuggingFaceTokenizer" ? "SentencePieceTokenizer" : type);
    }
  }
  throw ConfigError(
      fmt::format(
          "tokenizer_type: '{}' is not supported by Primus-C++ (supported: ByteTokenizer, NullTokenizer, "
          "HuggingFaceTokenizer, Llama2Tokenizer, Llama3Tokenizer, MixtralTokenizer, DeepSeekV2Tokenizer, "
          "DeepSeekV3Tokenizer, GPT2BPETokenizer, SentencePieceTokenizer, GPTSentencePieceTokenizer)",
          type),
      "for a tiktoken or BERT vocabulary, convert it to a Hugging Face tokenizer.json");
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& type, const std::string& model) {
  TokenizerSpec s;
  s.type = type;
  s.model = model;
  return make_tokenizer(s);
}

}  // namespace primus
