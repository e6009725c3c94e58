#pragma once
// SentencePiece tokenizer.model (Llama 2 and other SentencePiece models) through Debian's libsentencepiece,
// reached through the libprimus_sentencepiece.so plugin, which is loaded only here: a machine without
// libsentencepiece runs every other tokenizer.
#include <string>

#include "data/tokenizer.h"

namespace primus {

class SentencePieceTokenizer : public Tokenizer {
 public:
  using Tokenizer::decode;
  using Tokenizer::encode;
  // `add_bos`: prepend BOS to every encode (Megatron's Llama2Tokenizer); plain SentencePieceTokenizer does
  // not.
  SentencePieceTokenizer(const std::string& model_path, bool add_bos, const std::string& type_name);
  ~SentencePieceTokenizer() override;
  int64_t vocab_size() const override { return size_; }
  int32_t eod_id() const override { return eos_; }
  int32_t bos_id() const override { return bos_; }
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override;
  std::string name() const override { return name_; }

 private:
  void* handle_ = nullptr;
  int64_t size_ = 0;
  int32_t bos_ = -1, eos_ = -1;
  bool add_bos_;
  std::string name_;
};

// Where the plugin was found ("" when it cannot be loaded; `why` gets the reason).
std::string sentencepiece_plugin_path(std::string* why = nullptr);

}  // namespace primus
