#pragma once
// Tokenizer interface. The byte tokenizer maps each UTF-8 byte to its value and adds one end-of-document id;
// BPE tokenizers (data issue) implement the same interface.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace primus {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual int64_t vocab_size() const = 0;
  virtual int32_t eod_id() const = 0;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual std::string name() const = 0;
};

// Bytes 0..255 are ids 0..255; id 256 is the end-of-document token.
class ByteTokenizer : public Tokenizer {
 public:
  int64_t vocab_size() const override { return 257; }
  int32_t eod_id() const override { return 256; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::string name() const override { return "ByteTokenizer"; }
};

// Builds the tokenizer named by `tokenizer_type` (and `tokenizer_model` where it needs a file). Throws
// ConfigError naming the key for an unknown or unavailable type.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& tokenizer_type,
                                          const std::string& tokenizer_model);

}  // namespace primus
