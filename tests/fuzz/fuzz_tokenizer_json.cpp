// Fuzzes tokenizer.json: the model (BPE vocab, merges, unk / byte_fallback / prefixes), added tokens, the
// normalizer, pre-tokenizer, post-processor and decoder options. A file that loads must then encode fixed
// text into ids inside the vocabulary and decode them again; anything else must be a ConfigError naming the
// file. Never a crash, an out-of-bounds write or an allocation sized by a hostile id.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/error.h"
#include "data/hf_tokenizer.h"

namespace {
const std::string_view kTexts[] = {
    "Hello world, the quick brown fox.", "  spaces\tand\nnewlines  ",           "naïve café 中文 😀 1234567",
    "<s> </s> <|endoftext|> <unk>",      std::string_view("nul\0byte\xff", 10),
};
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j =
      nlohmann::json::parse(reinterpret_cast<const char*>(data), reinterpret_cast<const char*>(data) + size,
                            /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  try {
    auto tok = primus::HfTokenizer::from_json(j, nullptr, "fuzz/tokenizer.json");
    const int64_t vocab = tok->vocab_size();
    for (std::string_view text : kTexts) {
      for (bool special : {false, true}) {
        const std::vector<int32_t> ids = tok->encode(text, special);
        for (int32_t id : ids)
          if (id < 0 || id >= vocab) __builtin_trap();
        (void)tok->decode(ids, !special);
      }
    }
    (void)tok->token_to_id("<s>");
    (void)tok->id_to_token(0);
  } catch (const primus::Error&) {
  }
  return 0;
}
