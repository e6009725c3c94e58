#include "config/vocab.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <numeric>

#include "config/did_you_mean.h"
#include "config/not_supported.h"
#include "core/error.h"
#include "data/tokenizer_files.h"

namespace primus::config {

const std::vector<std::string>& known_tokenizer_types() {
  static const std::vector<std::string> kTypes = {
      "ByteTokenizer",          "HuggingFaceTokenizer",      "Llama2Tokenizer",
      "Llama3Tokenizer",        "MixtralTokenizer",          "DeepSeekV2Tokenizer",
      "DeepSeekV3Tokenizer",    "GPT2BPETokenizer",          "NullTokenizer",
      "SentencePieceTokenizer", "GPTSentencePieceTokenizer", "TikTokenizer",
      "BertWordPieceLowerCase", "BertWordPieceCase",         "MultimodalTokenizer",
      "NullMultimodalTokenizer"};
  return kTypes;
}

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// Number of tokens of each family's tokenizer (what Megatron's HuggingFace wrapper reports), except where the
// note says HF config: there the model's embedding rows, which is what its checkpoints hold.
struct KnownVocab {
  const char* pattern;  // matched against the lower-cased last path component
  int64_t size;
};
constexpr KnownVocab kKnown[] = {
    {"llama-2", 32000},   // Llama 2: SentencePiece, 32000
    {"llama-3", 128256},  // Llama 3, 3.1, 3.2, 3.3 (Meta-Llama-3-8B, Llama-3.1-8B, ...): tiktoken 128256
    {"llama3", 128256},
    {"mixtral-8x7b", 32000},  // Mixtral v0.1: 32000
    {"mixtral-8x22b-v0.1", 32000},
    {"mistral-7b-v0.1", 32000},
    {"qwen2.5", 151665},       // Qwen2.5 tokenizer: 151665 tokens (HF config pads the embedding to 151936)
    {"qwen3", 151936},         // Qwen3: HF config vocab_size
    {"deepseek-v2", 102400},   // DeepSeek-V2 / V2-Lite: HF config vocab_size
    {"deepseek-v3", 129280},   // DeepSeek-V3: HF config vocab_size
    {"deepseek-moe", 102400},  // DeepSeekMoE 16B (TorchTitan's deepseek_v3 16B flavor tokenizer): HF config
    {"deepseek-llm", 102400},  // DeepSeek LLM 7B / 67B: HF config vocab_size
    {"deepseek-r1-distill-qwen", 151936},   // DeepSeek-R1-Distill-Qwen-*: HF config vocab_size
    {"deepseek-r1-distill-llama", 128256},  // DeepSeek-R1-Distill-Llama-*: the Llama 3 vocabulary
    {"gpt2", 50257},
    {"glm-4", 151552},       // GLM-4 / 4.5 / 4.7 (THUDM/glm-4-9b, zai-org/GLM-4.*): HF config vocab_size
    {"minimax-m2", 200064},  // MiniMax-M2 / M2.1 / M2.5 (one architecture): HF config vocab_size
};

}  // namespace

std::optional<int64_t> known_vocab_size(std::string_view tokenizer_model) {
  std::string name = lower(tokenizer_model);
  while (!name.empty() && name.back() == '/') name.pop_back();
  size_t slash = name.rfind('/');
  std::string last = slash == std::string::npos ? name : name.substr(slash + 1);
  for (const KnownVocab& k : kKnown)
    if (last.find(k.pattern) != std::string::npos) return k.size;
  return std::nullopt;
}

VocabChoice choose_vocab_size(const std::string& type, const std::string& model,
                              std::optional<int64_t> vocab_size, const std::string& vocab_file) {
  const auto& types = known_tokenizer_types();
  // Primus's own tokenizer types for models Primus-C++ does not train yet: valid files, refused as such.
  if (type == "Llama4Tokenizer")
    throw NotSupportedError(fmt::format("not supported yet: tokenizer_type '{}' (Llama 4 models)", type),
                            "Llama 4 models (interleaved MoE with chunked attention) have no model code "
                            "here; use another family");
  // The rest of Primus's CUSTOM_TOKENIZER_TYPES (primus/backends/megatron/training/tokenizer/tokenizer.py).
  for (const char* primus_type : {"DeepSeekV4Tokenizer", "Lfm2Tokenizer", "KimiK2Tokenizer"})
    if (type == primus_type)
      throw NotSupportedError(fmt::format("not supported yet: tokenizer_type '{}' (a Primus tokenizer of a "
                                          "model family Primus-C++ does not train yet)",
                                          type),
                              "use HuggingFaceTokenizer with the model's tokenizer.json");
  if (!type.empty() && std::find(types.begin(), types.end(), type) == types.end())
    throw ConfigError(fmt::format("unknown tokenizer_type '{}'{}", type, did_you_mean_text(type, types)),
                      fmt::format("known: {}", fmt::join(types, ", ")));
  if (type == "ByteTokenizer") {
    if (vocab_size && *vocab_size < 257)
      throw ConfigError(
          fmt::format("vocab_size={} is smaller than the ByteTokenizer's 257 tokens (rule: vocab_size "
                      ">= 257 with ByteTokenizer)",
                      *vocab_size));
    if (vocab_size) return {*vocab_size, "vocab_size as set (ByteTokenizer uses ids 0..256)"};
    return {257, "ByteTokenizer: 256 bytes + end-of-document"};
  }
  if (type == "NullTokenizer") {
    if (!vocab_size)
      throw ConfigError("tokenizer_type NullTokenizer needs vocab_size",
                        "set vocab_size: N (ids 0..N-1, plus EOD N)");
    return {*vocab_size + 1, fmt::format("NullTokenizer: vocab_size {} + end-of-document", *vocab_size)};
  }
  if (vocab_size) return {*vocab_size, "vocab_size as set"};
  // A tokenizer on disk gives its own size (data/tokenizer_files.h reads it without building the tokenizer).
  if (auto n = tokenizer_file_vocab_size(type, model, vocab_file))
    return {*n, fmt::format("{}: {} tokens", type == "GPT2BPETokenizer" ? vocab_file : model, *n)};
  if (type == "GPT2BPETokenizer") return {50257, "GPT2BPETokenizer: 50257"};
  if (!model.empty()) {
    if (auto known = known_vocab_size(model))
      return {*known, fmt::format("tokenizer_model {}: {} (known tokenizer)", model, *known)};
  }
  if (type.empty() && model.empty())
    throw ConfigError(
        "cannot tell the vocabulary size: tokenizer_type, tokenizer_model and vocab_size are all null",
        "set tokenizer_type: ByteTokenizer (byte tokens) or vocab_size: N");
  throw ConfigError(
      fmt::format("cannot tell the vocabulary size of tokenizer_type={} tokenizer_model={} (not a "
                  "known tokenizer); set vocab_size",
                  type.empty() ? "null" : type, model.empty() ? "null" : model),
      "set vocab_size: N to the tokenizer's number of tokens");
}

int64_t padded_vocab_size(int64_t vocab, int64_t divisible_by, int64_t tp) {
  // Megatron pads to divisible_by x TP, so its padded vocabulary (and the model) changes with TP. We pad to
  // the least common multiple: the same table for every TP that divides divisible_by (1, 2, 4, 8 with 128),
  // so a checkpoint moves between TP degrees, and still divisible by TP.
  const int64_t multiple = std::lcm(std::max<int64_t>(1, divisible_by), std::max<int64_t>(1, tp));
  return (vocab + multiple - 1) / multiple * multiple;
}

}  // namespace primus::config
