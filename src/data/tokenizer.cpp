#include "data/tokenizer.h"

#include "core/error.h"

namespace primus {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (int32_t id : ids) {
    if (id >= 0 && id < 256) out.push_back(static_cast<char>(id));
  }
  return out;
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& type, const std::string& model) {
  if (type == "ByteTokenizer" || type.empty()) return std::make_unique<ByteTokenizer>();
  throw ConfigError(
      fmt::format("tokenizer_type: '{}' cannot tokenize text in this build (available: ByteTokenizer)", type),
      "use mock_data: true, or tokenizer_type: ByteTokenizer with text_data_path");
}

}  // namespace primus
