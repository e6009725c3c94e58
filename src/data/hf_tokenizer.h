#pragma once
// A Hugging Face tokenizer.json, encoded as the `tokenizers` library does: added tokens are matched first
// (leftmost-longest, special tokens never split), the rest is normalized (NFC, Prepend, Replace),
// pre-tokenized (Split regex through PCRE2, ByteLevel, Metaspace, Digits), BPE-encoded (ignore_merges,
// byte_fallback, unk), and post-processed (TemplateProcessing adds BOS when add_special_tokens). Decoding
// runs the decoder chain (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace). An unsupported component
// is a ConfigError naming the file and the component, never a silent approximation.
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace primus {

struct HfPipeline;  // normalizer, pre-tokenizer, model, post-processor, decoder (hf_tokenizer.cpp)

class HfTokenizer : public Tokenizer {
 public:
  using Tokenizer::decode;
  using Tokenizer::encode;
  // tokenizer.json; tokenizer_config.json beside it (if any) names the eos/bos tokens.
  static std::unique_ptr<HfTokenizer> from_file(const std::string& path);
  // `config` may be null. `source` names the file in errors.
  static std::unique_ptr<HfTokenizer> from_json(const nlohmann::json& tokenizer, const nlohmann::json* config,
                                                const std::string& source);
  // Megatron's GPT2BPETokenizer: GPT-2's vocab.json + merges.txt (byte-level BPE, GPT-2 regex, no
  // special-token matching in text; EOD = <|endoftext|>).
  static std::unique_ptr<HfTokenizer> gpt2_from_files(const std::string& vocab_json,
                                                      const std::string& merges_txt);
  ~HfTokenizer() override;

  int64_t vocab_size() const override;
  int32_t eod_id() const override { return eod_; }
  int32_t bos_id() const override { return bos_; }
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override;
  std::string name() const override { return name_; }

  int32_t token_to_id(const std::string& token) const;  // -1 when absent (model vocab or added tokens)
  std::string id_to_token(int32_t id) const;            // "" when absent
  bool byte_level() const;

 private:
  HfTokenizer();
  std::unique_ptr<HfPipeline> p_;
  int32_t eod_ = -1, bos_ = -1;
  std::string name_;
};

// The byte <-> character map of byte-level BPE (GPT-2's bytes_to_unicode).
char32_t byte_to_char(uint8_t b);
int byte_from_char(char32_t c);  // -1: not a byte-level character

}  // namespace primus
