// Tokenizers without external files: the byte and null tokenizers, a byte-level BPE trained here
// (train-tokenizer -> tokenizer.json -> HuggingFaceTokenizer) with exact round trips over hard strings, added
// / special tokens, byte fallback and NFC in hand-written tokenizer.json files, and the named errors of the
// factory. The comparison against real GPT-2 / Llama / Qwen files and Hugging Face's encoder is the
// TokenizerReference.* ctest (tools/tokenizer_ref).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/bpe_trainer.h"
#include "data/hf_tokenizer.h"
#include "data/tokenizer.h"
#include "data/tokenizer_files.h"
#include "data_test_util.h"

namespace primus {
namespace {

using data_test::error_of;
using data_test::ScratchDir;

const std::vector<std::string> kHard = {
    "",
    "Hello world",
    "  leading and trailing  ",
    "I'm can't they'll WE'VE",
    "tabs\tand\nnewlines\r\n\n",
    "1234567 3.14159",
    "naïve café e\u0301",
    "中文 日本語 한국어",
    "emoji 😀👍🏽 👨‍👩‍👧",
    "def f(x):\n    return x**2\n",
    "<|endoftext|> inside",
    std::string("nul\0byte", 8),
};

TEST(ByteTokenizer, RoundTripAndEod) {
  ByteTokenizer t;
  EXPECT_EQ(t.vocab_size(), 257);
  EXPECT_EQ(t.eod_id(), 256);
  for (const auto& s : kHard) EXPECT_EQ(t.decode(t.encode(s)), s);
  EXPECT_EQ(t.encode("A\xff"), (std::vector<int32_t>{65, 255}));
}

TEST(NullTokenizer, IdsAsNumbers) {
  NullTokenizer t(100);
  EXPECT_EQ(t.vocab_size(), 101);
  EXPECT_EQ(t.eod_id(), 100);
  EXPECT_EQ(t.encode(" 1 2\n30 "), (std::vector<int32_t>{1, 2, 30}));
  EXPECT_EQ(t.decode({4, 5}), "4 5");
  EXPECT_NE(error_of([&] { t.encode("1 x"); }), "");
  EXPECT_NE(error_of([&] { t.encode("101"); }), "");
}

std::unique_ptr<HfTokenizer> trained(int64_t vocab) {
  BpeTrainer trainer;
  for (int rep = 0; rep < 3; ++rep) {
    trainer.add_text(
        "The quick brown fox jumps over the lazy dog. The dog didn't care; the fox's tail was red.");
    trainer.add_text("Numbers like 12345 and 2026 appear, as do words such as tokenizer and tokenization.");
    trainer.add_text("def main():\n    print('hello world')\n    return 0\n");
  }
  BpeTrainerOptions opt;
  opt.vocab_size = vocab;
  opt.min_frequency = 2;
  const std::string json = trainer.train(opt);
  const nlohmann::json cfg = nlohmann::json::parse(BpeTrainer::tokenizer_config(opt));
  return HfTokenizer::from_json(nlohmann::json::parse(json), &cfg, "trained.json");
}

TEST(HfTokenizer, TrainedByteLevelBpeRoundTripsExactly) {
  auto t = trained(300);
  EXPECT_EQ(t->vocab_size(), 300);
  EXPECT_TRUE(t->byte_level());
  const int32_t eod = t->eod_id();
  EXPECT_EQ(eod, t->token_to_id("<|endoftext|>"));
  for (const auto& s : kHard) {
    const std::vector<int32_t> ids = t->encode(s, false);
    for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < t->vocab_size());
    if (s.find("<|endoftext|>") == std::string::npos) {
      EXPECT_EQ(t->decode(ids), s) << s;
    }
  }
  // Merges learned from the corpus make frequent words short.
  EXPECT_LT(t->encode(" the", false).size(), 4u);
  EXPECT_LT(t->encode("The quick brown fox", false).size(), t->encode("Tqh eukci bwron fxo", false).size());
}

TEST(HfTokenizer, SpecialTokensAreMatchedWholeAndSkippable) {
  auto t = trained(300);
  const int32_t eod = t->eod_id();
  const std::vector<int32_t> ids = t->encode("a<|endoftext|>b", false);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], eod);
  EXPECT_EQ(t->decode(ids), "a<|endoftext|>b");
  EXPECT_EQ(t->decode(ids, /*skip_special_tokens=*/true), "ab");
}

// A minimal SentencePiece-style BPE tokenizer.json (Llama 2's shape): Prepend/Replace normalizer, byte
// fallback for unknown characters, TemplateProcessing adding <s>, and the Replace/ByteFallback/Fuse/Strip
// decoder.
nlohmann::json llama2_style() {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 3 + b;
  int next = 259;
  for (const char* tok : {"\u2581", "h", "i", "\u2581h", "\u2581hi", "t", "\u2581t", "e", "r"})
    vocab[tok] = next++;
  return {{"version", "1.0"},
          {"added_tokens",
           {{{"id", 0}, {"content", "<unk>"}, {"special", true}, {"normalized", false}},
            {{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
            {{"id", 2}, {"content", "</s>"}, {"special", true}, {"normalized", false}}}},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", "\u2581"}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}}},
          {"pre_tokenizer", nullptr},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"pair", nlohmann::json::array()},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", "<unk>"},
            {"fuse_unk", true},
            {"byte_fallback", true},
            {"vocab", vocab},
            {"merges", {"\u2581 h", "\u2581h i", "\u2581 t"}}}}};
}

TEST(HfTokenizer, SentencePieceStyleBpeWithByteFallback) {
  const nlohmann::json j = llama2_style();
  auto t = HfTokenizer::from_json(j, nullptr, "llama2-style");
  const int32_t sp = j["model"]["vocab"]["\u2581"], hi = j["model"]["vocab"]["\u2581hi"],
                t_ = j["model"]["vocab"]["\u2581t"], h = j["model"]["vocab"]["h"],
                i = j["model"]["vocab"]["i"];
  // "hi hi": "▁hi▁hi" -> two merged pieces, with <s> first when special tokens are added.
  EXPECT_EQ(t->encode("hi hi", true), (std::vector<int32_t>{1, hi, hi}));
  EXPECT_EQ(t->encode("hi hi", false), (std::vector<int32_t>{hi, hi}));
  // "é" is not in the vocabulary: its UTF-8 bytes C3 A9 become <0xC3> <0xA9> (ids 3 + byte).
  EXPECT_EQ(t->encode("hé", false),
            (std::vector<int32_t>{j["model"]["vocab"]["\u2581h"], 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t->decode(t->encode("hé hi", true), true), "hé hi");
  EXPECT_EQ(t->encode("ih", false), (std::vector<int32_t>{sp, i, h}));
  EXPECT_EQ(t->encode(" t", false), (std::vector<int32_t>{sp, t_}));
  EXPECT_EQ(t->bos_id(), 1);  // no tokenizer_config.json: the template's leading special token
}

TEST(HfTokenizer, NfcNormalizerComposes) {
  nlohmann::json j = llama2_style();
  j["normalizer"] = {{"type", "NFC"}};
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}};
  auto t = HfTokenizer::from_json(j, nullptr, "nfc");
  // e + combining acute (U+0301) is NFC-composed to é (U+00E9, bytes C3 A9) before the model sees it.
  EXPECT_EQ(t->encode("e\u0301", false), (std::vector<int32_t>{3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t->decode(t->encode("e\u0301", false)), "\u00e9");
  EXPECT_EQ(t->encode("\u1100\u1161", false), t->encode("\uac00", false));  // Hangul jamo compose too
}

TEST(HfTokenizer, UnsupportedComponentsAreNamed) {
  nlohmann::json j = llama2_style();
  j["normalizer"] = {{"type", "NFKD"}};
  std::string msg = error_of([&] { HfTokenizer::from_json(j, nullptr, "x/tokenizer.json"); });
  EXPECT_NE(msg.find("x/tokenizer.json: normalizer 'NFKD' is not supported"), std::string::npos) << msg;
  j = llama2_style();
  j["model"]["type"] = "Unigram";
  msg = error_of([&] { HfTokenizer::from_json(j, nullptr, "y.json"); });
  EXPECT_NE(msg.find("y.json: model type 'Unigram'"), std::string::npos) << msg;
  j = llama2_style();
  j["model"]["merges"].push_back("zz qq");
  msg = error_of([&] { HfTokenizer::from_json(j, nullptr, "z.json"); });
  EXPECT_NE(msg.find("z.json: merge"), std::string::npos) << msg;
}

// Ids index the embedding table. A negative added-token id once wrote out of bounds (SIGSEGV in `primus data
// tokenize`), 2^31 - 1 sized a table until std::bad_alloc, and 3,000,000 in a 2,048-token file was accepted.
TEST(HfTokenizer, TokenIdsOutsideTheVocabularyAreNamedErrors) {
  nlohmann::json j = llama2_style();
  j["added_tokens"].push_back({{"id", -7}, {"content", "<bad>"}, {"special", true}});
  std::string msg = error_of([&] { HfTokenizer::from_json(j, nullptr, "neg/tokenizer.json"); });
  EXPECT_NE(msg.find("neg/tokenizer.json: added token '<bad>' has id -7, outside [0, "), std::string::npos)
      << msg;

  j = llama2_style();
  j["model"]["vocab"]["r"] = 2147483647;
  msg = error_of([&] { HfTokenizer::from_json(j, nullptr, "big/tokenizer.json"); });
  EXPECT_NE(msg.find("big/tokenizer.json: vocabulary token 'r' has id 2147483647, outside [0, 271)"),
            std::string::npos)
      << msg;

  // 2,048 vocabulary entries, one of them numbered 3,000,000.
  nlohmann::json vocab = nlohmann::json::object();
  for (int i = 0; i < 2048; ++i) vocab[fmt::format("t{}", i)] = i == 2047 ? 3000000 : i;
  j = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  msg = error_of([&] { HfTokenizer::from_json(j, nullptr, "sparse/tokenizer.json"); });
  EXPECT_NE(msg.find("sparse/tokenizer.json: vocabulary token 't2047' has id 3000000, outside [0, 2048): the "
                     "file holds 2048 vocabulary entries and 0 added tokens"),
            std::string::npos)
      << msg;

  j = llama2_style();
  j["model"]["vocab"]["r"] = 3.5;
  msg = error_of([&] { HfTokenizer::from_json(j, nullptr, "float.json"); });
  EXPECT_NE(msg.find("float.json: vocabulary token 'r' has id 3.5, which is not an integer"),
            std::string::npos)
      << msg;

  j = llama2_style();
  j["post_processor"]["special_tokens"]["<s>"]["ids"] = {100000};
  msg = error_of([&] { HfTokenizer::from_json(j, nullptr, "post.json"); });
  EXPECT_NE(msg.find("post.json: post-processor token '<s>' has id 100000, outside the vocabulary [0, 268)"),
            std::string::npos)
      << msg;
}

TEST(HfTokenizer, TokenIdsAreCheckedWhenTheFileIsFoundOnDiskToo) {
  // The same checks guard the config layer's vocabulary size and the `primus data tokenize` path.
  ScratchDir dir;
  nlohmann::json j = llama2_style();
  j["added_tokens"].push_back({{"id", -7}, {"content", "<bad>"}});
  std::filesystem::create_directories(dir.path("tok"));
  data_test::write_bytes(dir.path("tok/tokenizer.json"), j.dump());
  const std::string path = dir.path("tok/tokenizer.json");
  std::string msg = error_of([&] { tokenizer_file_vocab_size("HuggingFaceTokenizer", dir.path("tok"), ""); });
  EXPECT_NE(msg.find(path + ": added token '<bad>' has id -7"), std::string::npos) << msg;
  msg = error_of([&] { make_tokenizer("HuggingFaceTokenizer", dir.path("tok")); });
  EXPECT_NE(msg.find(path + ": added token '<bad>' has id -7"), std::string::npos) << msg;
  j = llama2_style();
  data_test::write_bytes(dir.path("tok/tokenizer.json"), j.dump());
  EXPECT_EQ(tokenizer_file_vocab_size("HuggingFaceTokenizer", dir.path("tok"), ""), 268);
}

TEST(TokenizerFactory, NamedErrors) {
  ScratchDir dir;
  std::string msg = error_of([] { make_tokenizer("NoSuchTokenizer", ""); });
  EXPECT_NE(msg.find("tokenizer_type: 'NoSuchTokenizer' is not supported"), std::string::npos) << msg;
  msg = error_of([] { make_tokenizer("HuggingFaceTokenizer", ""); });
  EXPECT_NE(msg.find("needs tokenizer_model"), std::string::npos) << msg;
  msg = error_of([&] { make_tokenizer("HuggingFaceTokenizer", dir.path("missing/tokenizer.json")); });
  EXPECT_NE(msg.find("is not a local tokenizer file or directory"), std::string::npos) << msg;
  data_test::write_bytes(dir.path("bad.json"), "{not json");
  msg = error_of([&] { make_tokenizer("HuggingFaceTokenizer", dir.path("bad.json")); });
  EXPECT_NE(msg.find("bad.json"), std::string::npos) << msg;
}

TEST(TokenizerFactory, TrainedTokenizerFromADirectory) {
  ScratchDir dir;
  BpeTrainer trainer;
  trainer.add_text("aaa bbb aaa bbb ccc aaa");
  BpeTrainerOptions opt;
  opt.vocab_size = 262;
  std::filesystem::create_directories(dir.path("tok"));
  data_test::write_bytes(dir.path("tok/tokenizer.json"), trainer.train(opt));
  data_test::write_bytes(dir.path("tok/tokenizer_config.json"), BpeTrainer::tokenizer_config(opt));
  auto t = make_tokenizer("HuggingFaceTokenizer", dir.path("tok"));
  EXPECT_EQ(t->vocab_size(), 262);
  EXPECT_EQ(t->eod_id(), 256 + 5);  // merges first, then the special token
  EXPECT_EQ(t->decode(t->encode("aaa bbb ccc")), "aaa bbb ccc");
}

}  // namespace
}  // namespace primus
