#pragma once
// Tokenizer interface and the factory that builds the tokenizer a config names (Megatron/Primus
// `tokenizer_type` + `tokenizer_model`). Implementations: ByteTokenizer (bytes + one EOD id), NullTokenizer
// (ids written as numbers), HfTokenizer (a Hugging Face tokenizer.json: byte-level BPE of GPT-2 / Llama 3 /
// Qwen 2, SentencePiece-style BPE with byte fallback; also GPT2BPETokenizer from vocab.json + merges.txt) and
// SentencePieceTokenizer (tokenizer.model through libsentencepiece, loaded on demand).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace primus {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Number of ids (the largest id + 1, added tokens included).
  virtual int64_t vocab_size() const = 0;
  // The end-of-document id appended by `preprocess --append-eod` and masked by eod_mask_loss (-1: none).
  virtual int32_t eod_id() const = 0;
  virtual int32_t bos_id() const { return -1; }
  // What Megatron's tokenize() returns: HF tokenizers add their post-processor's special tokens (HF's
  // add_special_tokens=True default), Llama2Tokenizer prepends BOS.
  std::vector<int32_t> encode(std::string_view text) const { return encode(text, true); }
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const = 0;
  std::string decode(const std::vector<int32_t>& ids) const { return decode(ids, false); }
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const = 0;
  virtual std::string name() const = 0;
};

// Bytes 0..255 are ids 0..255; id 256 is the end-of-document token.
class ByteTokenizer : public Tokenizer {
 public:
  using Tokenizer::decode;
  using Tokenizer::encode;
  int64_t vocab_size() const override { return 257; }
  int32_t eod_id() const override { return 256; }
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override;
  std::string name() const override { return "ByteTokenizer"; }
};

// Megatron's NullTokenizer: the text is whitespace-separated ids; vocab_size ids plus EOD = vocab_size.
class NullTokenizer : public Tokenizer {
 public:
  using Tokenizer::decode;
  using Tokenizer::encode;
  explicit NullTokenizer(int64_t vocab_size);
  int64_t vocab_size() const override { return vocab_ + 1; }
  int32_t eod_id() const override { return static_cast<int32_t>(vocab_); }
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override;
  std::string name() const override { return "NullTokenizer"; }

 private:
  int64_t vocab_;
};

struct TokenizerSpec {
  std::string type = "ByteTokenizer";  // tokenizer_type ("" = ByteTokenizer)
  std::string model;                   // tokenizer_model: a file, a directory, or a hub name found locally
  std::string vocab_file, merge_file;  // GPT2BPETokenizer
  int64_t vocab_size = 0;              // NullTokenizer
};

// Builds the tokenizer. Throws ConfigError naming the key for an unknown or unavailable type or a missing
// file.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerSpec& spec);
// Shorthand kept for callers that have only the type and model.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& tokenizer_type,
                                          const std::string& tokenizer_model);

}  // namespace primus
