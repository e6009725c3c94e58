// SftDataset rows exactly as the trainer reads them (targets -1 on prompts, at sample boundaries and on
// padding; positions restarting per sample; sample starts), first-fit-decreasing packing (against a plain
// first-fit, determinism, efficiency), truncation vs drop, padding mode, epochs, BOS prepending, and a
// byte-level BPE trained here whose ChatML markers are special tokens (one id each).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "data/bpe_trainer.h"
#include "data/hf_tokenizer.h"
#include "data/sft_dataset.h"
#include "data_test_util.h"

namespace primus::data {
namespace {

using data_test::error_of;
using data_test::ScratchDir;

// A template whose renders are easy to count in bytes: "u:<content>|a:<content>|" (one byte per token with
// the ByteTokenizer). The loss span of a reply is its content plus the "|" after it.
const char* const kTinyTemplate =
    "{% for m in messages %}{{ m.role[0] }}:{{ m.content }}|{% endfor %}{% if add_generation_prompt %}a:{% "
    "endif "
    "%}";

std::string alpaca(const std::string& instruction, const std::string& output) {
  return nlohmann::json({{"instruction", instruction}, {"output", output}}).dump() + "\n";
}

struct Row {
  std::vector<int32_t> tokens, targets, positions, starts;
};

Row read_row(const TokenDataset& ds, int64_t index) {
  const size_t n = static_cast<size_t>(ds.seq_length());
  Row r{std::vector<int32_t>(n), std::vector<int32_t>(n), std::vector<int32_t>(n), std::vector<int32_t>(n)};
  EXPECT_TRUE(ds.fill_row(index, r.tokens.data(), r.targets.data(), r.positions.data(), r.starts.data()));
  return r;
}

std::vector<int32_t> bytes(const std::string& s) {
  return std::vector<int32_t>(s.begin(), s.end());
}

SftDatasetOptions tiny_options(const std::string& path, const Tokenizer& tok, int64_t seq) {
  SftDatasetOptions o;
  o.paths = {path};
  o.seq_length = seq;
  o.tokenizer = &tok;
  o.chat_template = kTinyTemplate;
  return o;
}

TEST(SftDataset, PackedRowSemanticsExactly) {
  ScratchDir dir;
  const std::string path = dir.path("d.jsonl");
  // Rendered: "u:ab|a:cd|" (10 tokens) and "u:xyz|a:efg|" (12 tokens); FFD puts the longer one first.
  data_test::write_bytes(path, alpaca("ab", "cd") + "\n" + alpaca("xyz", "efg"));
  ByteTokenizer tok;
  const SftDataset ds(tiny_options(path, tok, 26));
  ASSERT_EQ(ds.num_samples(), 1);
  EXPECT_EQ(ds.pad_id(), 256);  // no pad token: EOD
  const Row r = read_row(ds, 0);

  std::vector<int32_t> tokens = bytes("u:xyz|a:efg|u:ab|a:cd|");
  tokens.insert(tokens.end(), 4, 256);
  EXPECT_EQ(r.tokens, tokens);
  // Targets: the next token when it is a loss token of the same sample. Sample 1 (0..11): the prompt
  // "u:xyz|a:" predicts nothing until ':' (7) -> 'e'; 'e' -> 'f', 'f' -> 'g', 'g' -> '|'; the final '|' (11)
  // does not predict the next sample's 'u'. Sample 2 (12..21) likewise; padding (22..25) has no targets.
  std::vector<int32_t> targets(26, -1);
  targets[7] = 'e', targets[8] = 'f', targets[9] = 'g', targets[10] = '|';
  targets[18] = 'c', targets[19] = 'd', targets[20] = '|';
  EXPECT_EQ(r.targets, targets);
  std::vector<int32_t> positions, starts;
  for (int i = 0; i < 12; ++i) positions.push_back(i), starts.push_back(0);
  for (int i = 0; i < 10; ++i) positions.push_back(i), starts.push_back(12);
  for (int i = 0; i < 4; ++i) positions.push_back(i), starts.push_back(22);
  EXPECT_EQ(r.positions, positions);
  EXPECT_EQ(r.starts, starts);

  const SftDatasetStats& s = ds.stats();
  EXPECT_EQ(s.samples_read, 2);
  EXPECT_EQ(s.samples, 2);
  EXPECT_EQ(s.rows, 1);
  EXPECT_EQ(s.tokens, 22);
  EXPECT_EQ(s.loss_tokens, 7);
  EXPECT_NEAR(s.packing_efficiency(), 22.0 / 26.0, 1e-12);
  const auto layout = ds.row_layout(0);
  ASSERT_EQ(layout.size(), 2u);
  EXPECT_EQ(layout[0].sample, 1);
  EXPECT_EQ(layout[0].start, 0);
  EXPECT_EQ(layout[1].sample, 0);
  EXPECT_EQ(layout[1].start, 12);
  EXPECT_EQ(ds.sample_source(1), path + ":3");  // the blank line is skipped but counted

  // sample(): the row's tokens and one padding id.
  std::vector<int32_t> plain(27);
  ds.sample(0, plain.data());
  EXPECT_EQ(std::vector<int32_t>(plain.begin(), plain.begin() + 26), tokens);
  EXPECT_EQ(plain[26], 256);
  EXPECT_NE(ds.describe().find("2 samples"), std::string::npos) << ds.describe();
}

// SQuAD records: their own text, no template; the loss on " answer" and the end-of-document token after it.
TEST(SftDataset, SquadSamplesLearnTheAnswerAndTheEnd) {
  ScratchDir dir;
  const std::string path = dir.path("squad.jsonl");
  data_test::write_bytes(path, R"({"question": "q?", "context": "c", "answers": {"text": ["ab"]}})"
                               "\n");
  ByteTokenizer tok;
  SftDatasetOptions o = tiny_options(path, tok, 40);
  o.format = SftFormat::kSquad;
  const SftDataset ds(o);
  const Row r = read_row(ds, 0);
  const std::string text = "Context: c Question: q? Answer: ab";
  std::vector<int32_t> tokens = bytes(text);
  tokens.push_back(256);  // the end-of-document token
  tokens.resize(40, 256);
  EXPECT_EQ(r.tokens, tokens);
  // ':' of "Answer:" predicts ' ', then ' ' -> 'a', 'a' -> 'b', 'b' -> EOD; nothing else.
  std::vector<int32_t> targets(40, -1);
  const int colon = static_cast<int>(text.size()) - 4;
  targets[colon] = ' ', targets[colon + 1] = 'a', targets[colon + 2] = 'b', targets[colon + 3] = 256;
  EXPECT_EQ(r.targets, targets);
  EXPECT_EQ(ds.stats().loss_tokens, 4);
}

TEST(SftDataset, PlainDatasetsHaveNoRows) {
  MockDataset mock(100, 8, 1);
  int32_t buf[8];
  EXPECT_FALSE(mock.fill_row(0, buf, buf, buf, buf));
}

TEST(SftDataset, TruncateKeepsTheLossMaskDropLeavesOut) {
  ScratchDir dir;
  const std::string path = dir.path("d.jsonl");
  data_test::write_bytes(path, alpaca("ab", "cdef") + alpaca("q", "r"));  // 12 and 8 tokens
  ByteTokenizer tok;
  SftDatasetOptions o = tiny_options(path, tok, 9);
  o.pack = false;
  const SftDataset cut(o);
  EXPECT_EQ(cut.stats().truncated, 1);
  EXPECT_EQ(cut.stats().samples, 2);
  EXPECT_EQ(cut.stats().longest, 12);
  const SftTokens t = cut.sample_tokens(0);
  EXPECT_EQ(t.ids, bytes("u:ab|a:cd"));
  EXPECT_EQ(t.loss, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 1, 1}));

  o.overflow = SftOverflow::kDrop;
  const SftDataset dropped(o);
  EXPECT_EQ(dropped.stats().dropped_too_long, 1);
  EXPECT_EQ(dropped.stats().samples, 1);
  EXPECT_EQ(dropped.sample_tokens(0).ids, bytes("u:q|a:r|"));

  // Cut before any reply token: nothing to predict, so the sample is left out; none left is an error.
  o.overflow = SftOverflow::kTruncate;
  o.seq_length = 6;
  const std::string msg = error_of([&] { SftDataset{o}; });
  EXPECT_NE(msg.find("no SFT sample to train on (2 read, 0 longer than seq_length 6 dropped, 2 without"),
            std::string::npos)
      << msg;
  EXPECT_EQ(parse_sft_overflow("drop"), SftOverflow::kDrop);
  EXPECT_NE(error_of([] { parse_sft_overflow("clip"); }).find("expected truncate or drop"),
            std::string::npos);
}

TEST(SftDataset, PaddingModeOneSamplePerRow) {
  ScratchDir dir;
  const std::string path = dir.path("d.jsonl");
  std::string text;
  for (int i = 0; i < 5; ++i) text += alpaca(std::string(static_cast<size_t>(i + 1), 'p'), "rr");
  data_test::write_bytes(path, text);
  ByteTokenizer tok;
  SftDatasetOptions o = tiny_options(path, tok, 16);
  o.pack = false;
  o.pad_id = 7;
  const SftDataset ds(o);
  ASSERT_EQ(ds.num_samples(), 5);
  std::set<int64_t> seen;
  for (int64_t i = 0; i < 5; ++i) {
    const Row r = read_row(ds, i);
    const auto layout = ds.row_layout(ds.row_of(i));
    ASSERT_EQ(layout.size(), 1u);
    seen.insert(layout[0].sample);
    const int64_t len = layout[0].length;  // 1 + k prompt bytes + "u:|a:rr|"
    EXPECT_EQ(len, 8 + layout[0].sample + 1);
    for (int64_t t = 0; t < 16; ++t) {
      if (t < len) {
        EXPECT_EQ(r.positions[t], t);
        EXPECT_EQ(r.starts[t], 0);
      } else {
        EXPECT_EQ(r.tokens[t], 7);
        EXPECT_EQ(r.targets[t], -1);
        EXPECT_EQ(r.positions[t], t - len);
        EXPECT_EQ(r.starts[t], len);
      }
    }
    // The loss: 'r', 'r', '|' predicted from the three tokens before them.
    int loss = 0;
    for (int32_t v : r.targets) loss += v >= 0;
    EXPECT_EQ(loss, 3);
    EXPECT_EQ(r.targets[len - 2], '|');
    EXPECT_EQ(r.targets[len - 1], -1);
  }
  EXPECT_EQ(seen.size(), 5u);  // the epoch visits every row once
}

TEST(SftDataset, EpochsAreSeededPermutationsOfTheRows) {
  ScratchDir dir;
  const std::string path = dir.path("d.jsonl");
  std::string text;
  for (int i = 0; i < 40; ++i)
    text += alpaca("prompt " + std::to_string(i), std::string(static_cast<size_t>(i % 7 + 1), 'x'));
  data_test::write_bytes(path, text);
  ByteTokenizer tok;
  SftDatasetOptions o = tiny_options(path, tok, 64);
  const SftDataset a(o), b(o);
  o.seed = 99;
  const SftDataset c(o);
  const int64_t n = a.num_samples();
  ASSERT_GT(n, 3);
  std::vector<int64_t> ea, eb, ec, e1;
  for (int64_t i = 0; i < n; ++i)
    ea.push_back(a.row_of(i)), eb.push_back(b.row_of(i)), ec.push_back(c.row_of(i));
  for (int64_t i = n; i < 2 * n; ++i) e1.push_back(a.row_of(i));
  EXPECT_EQ(ea, eb);  // deterministic
  EXPECT_NE(ea, ec);  // seeded
  EXPECT_NE(ea, e1);  // a new order each epoch
  std::sort(ea.begin(), ea.end());
  std::sort(e1.begin(), e1.end());
  EXPECT_EQ(ea, e1);
  EXPECT_EQ(ea.front(), 0);
  EXPECT_EQ(ea.back(), n - 1);
  EXPECT_EQ(a.stats().samples, 40);
  EXPECT_EQ(read_row(a, 2 * n + 1).tokens, read_row(a, 2 * n + 1).tokens);
}

TEST(SftDataset, MaxSamplesAndErrorsNameTheLine) {
  ScratchDir dir;
  const std::string path = dir.path("d.jsonl");
  data_test::write_bytes(path, alpaca("a", "b") + alpaca("c", "d") + "{\"text\": \"no format\"}\n");
  ByteTokenizer tok;
  SftDatasetOptions o = tiny_options(path, tok, 32);
  o.max_samples = 2;
  EXPECT_EQ(SftDataset(o).stats().samples_read, 2);
  o.max_samples = 0;
  std::string msg = error_of([&] { SftDataset{o}; });
  EXPECT_NE(msg.find(path + ":3: cannot tell the SFT format"), std::string::npos) << msg;
  o.paths = {dir.path("missing.jsonl")};
  msg = error_of([&] { SftDataset{o}; });
  EXPECT_NE(msg.find("missing.jsonl: cannot open SFT data file"), std::string::npos) << msg;
}

// --- packing
// --------------------------------------------------------------------------------------------------

// The textbook first fit over the decreasing order, O(n * rows): the reference for the tree version.
std::vector<std::vector<int64_t>> naive_ffd(const std::vector<int64_t>& lengths, int64_t capacity) {
  std::vector<int64_t> order(lengths.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
  std::vector<std::vector<int64_t>> rows;
  std::vector<int64_t> used;
  for (int64_t s : order) {
    size_t r = 0;
    while (r < rows.size() && used[r] + lengths[s] > capacity) ++r;
    if (r == rows.size()) rows.emplace_back(), used.push_back(0);
    rows[r].push_back(s);
    used[r] += lengths[s];
  }
  return rows;
}

TEST(SftPacking, FirstFitDecreasing) {
  EXPECT_EQ(pack_first_fit_decreasing({6, 5, 4, 3, 2}, 10),
            (std::vector<std::vector<int64_t>>{{0, 2}, {1, 3, 4}}));
  EXPECT_EQ(pack_first_fit_decreasing({10, 10, 1}, 10), (std::vector<std::vector<int64_t>>{{0}, {1}, {2}}));
  EXPECT_TRUE(pack_first_fit_decreasing({}, 10).empty());
  // Ties keep the file order.
  EXPECT_EQ(pack_first_fit_decreasing({3, 3, 3, 3}, 6), (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
  EXPECT_NE(error_of([] { pack_first_fit_decreasing({11}, 10); }), "");
}

TEST(SftPacking, MatchesPlainFirstFitAndPacksTightly) {
  uint32_t x = 7;
  for (int64_t capacity : {64, 2048}) {
    std::vector<int64_t> lengths;
    for (int i = 0; i < 3000; ++i) {
      x = x * 1103515245u + 12345u;
      lengths.push_back(1 + static_cast<int64_t>((x >> 8) % static_cast<uint32_t>(capacity / 2)));
    }
    const auto rows = pack_first_fit_decreasing(lengths, capacity);
    EXPECT_EQ(rows, naive_ffd(lengths, capacity));
    EXPECT_EQ(rows, pack_first_fit_decreasing(lengths, capacity));
    std::vector<int> seen(lengths.size(), 0);
    int64_t total = 0;
    for (const auto& row : rows) {
      int64_t used = 0;
      for (int64_t s : row) used += lengths[s], ++seen[s];
      EXPECT_LE(used, capacity);
      total += used;
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<int64_t>(lengths.size()));
    const double efficiency = static_cast<double>(total) / static_cast<double>(rows.size() * capacity);
    EXPECT_GT(efficiency, 0.97) << capacity;
  }
}

// --- tokenizers
// -----------------------------------------------------------------------------------------------

// A byte tokenizer whose post-processor puts BOS (id 257) first, as Llama 2's does.
class BosByteTokenizer : public ByteTokenizer {
 public:
  using Tokenizer::encode;
  int64_t vocab_size() const override { return 258; }
  int32_t bos_id() const override { return 257; }
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override {
    std::vector<int32_t> ids = ByteTokenizer::encode(text, false);
    if (add_special_tokens) ids.insert(ids.begin(), 257);
    return ids;
  }
};

TEST(SftDataset, PrependsBosWhenTheTokenizerAddsIt) {
  ScratchDir dir;
  const std::string path = dir.path("d.jsonl");
  data_test::write_bytes(path, alpaca("a", "b"));
  BosByteTokenizer bos;
  EXPECT_EQ(sft_required_bos(bos), 257);
  ByteTokenizer plain;
  EXPECT_EQ(sft_required_bos(plain), -1);
  const SftDataset ds(tiny_options(path, bos, 16));
  const Row r = read_row(ds, 0);
  EXPECT_EQ(std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + 10),
            (std::vector<int32_t>{257, 'u', ':', 'a', '|', 'a', ':', 'b', '|', 256}));
  EXPECT_EQ(r.targets[0], -1);
  EXPECT_EQ(r.targets[6], 'b');
  EXPECT_EQ(r.positions[9], 0);  // padding
}

// A byte-level BPE trained here with ChatML's markers as special tokens, in a directory with a
// tokenizer_config.json, as `primus data train-tokenizer` writes it.
std::string write_chatml_tokenizer(const ScratchDir& dir, const nlohmann::json& extra_config) {
  BpeTrainer trainer;
  for (int i = 0; i < 3; ++i) {
    trainer.add_text("Define the word bank. A financial institution that accepts deposits.");
    trainer.add_text("user assistant system the quick brown fox");
  }
  BpeTrainerOptions opt;
  opt.vocab_size = 320;
  opt.special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"};
  std::filesystem::create_directories(dir.path("tok"));
  data_test::write_bytes(dir.path("tok/tokenizer.json"), trainer.train(opt));
  nlohmann::json cfg = nlohmann::json::parse(BpeTrainer::tokenizer_config(opt));
  cfg.update(extra_config);
  data_test::write_bytes(dir.path("tok/tokenizer_config.json"), cfg.dump());
  return dir.path("tok");
}

TEST(SftDataset, HfTokenizerMatchesChatMlMarkersAsSpecialTokens) {
  ScratchDir dir;
  const std::string tok_dir = write_chatml_tokenizer(dir, {{"pad_token", "<pad>"}});
  auto tok = make_tokenizer("HuggingFaceTokenizer", tok_dir);
  const auto* hf = dynamic_cast<const HfTokenizer*>(tok.get());
  ASSERT_NE(hf, nullptr);
  const int32_t start = hf->token_to_id("<|im_start|>"), end = hf->token_to_id("<|im_end|>");
  ASSERT_GE(start, 0);
  ASSERT_GE(end, 0);
  EXPECT_EQ(tok->encode("<|im_start|>user", false).front(), start);

  const std::string path = dir.path("d.jsonl");
  data_test::write_bytes(path, alpaca("Define the word bank.", "A financial institution.") +
                                   nlohmann::json({{"messages",
                                                    {{{"role", "system"}, {"content", "Be brief."}},
                                                     {{"role", "user"}, {"content", "fox?"}},
                                                     {{"role", "assistant"}, {"content", "quick"}}}}})
                                       .dump() +
                                   "\n");
  SftDatasetOptions o;
  o.paths = {path};
  o.seq_length = 512;
  o.tokenizer = tok.get();
  o.tokenizer_model = tok_dir;  // no chat_template there: the ChatML fallback
  const SftDataset ds(o);
  EXPECT_EQ(ds.pad_id(), hf->token_to_id("<pad>"));
  const Row r = read_row(ds, 0);
  const auto layout = ds.row_layout(ds.row_of(0));
  ASSERT_EQ(layout.size(), 2u);
  for (const auto& e : layout) {
    const SftTokens t = ds.sample_tokens(e.sample);
    // The render round-trips, and the markers are single ids.
    const std::string text = tok->decode(t.ids);
    EXPECT_TRUE(text.starts_with("<|im_start|>")) << text;
    EXPECT_EQ(t.ids.front(), start);
    // The loss ends on <|im_end|>; the newline after it is loss-free.
    int64_t last_loss = -1;
    for (size_t i = 0; i < t.loss.size(); ++i)
      if (t.loss[i]) last_loss = static_cast<int64_t>(i);
    ASSERT_GE(last_loss, 0);
    EXPECT_EQ(t.ids[static_cast<size_t>(last_loss)], end);
    EXPECT_EQ(r.targets[e.start + last_loss - 1], end);
    EXPECT_EQ(tok->decode(std::vector<int32_t>(t.ids.begin() + last_loss + 1, t.ids.end())), "\n");
    // The reply tokens decode to the reply.
    std::vector<int32_t> reply;
    for (size_t i = 0; i < t.ids.size(); ++i)
      if (t.loss[i] && t.ids[i] != end) reply.push_back(t.ids[i]);
    const std::string want =
        ds.sample_source(e.sample).ends_with(":1") ? "A financial institution." : "quick";
    EXPECT_EQ(tok->decode(reply), want);
  }
  EXPECT_EQ(r.tokens[static_cast<size_t>(layout[1].start + layout[1].length)], ds.pad_id());
}

TEST(SftDataset, TokenizerConfigTemplateIsUsed) {
  ScratchDir dir;
  const std::string tok_dir = write_chatml_tokenizer(
      dir, {{"chat_template",
             "{% for m in messages %}[{{ m.role }}] {{ m.content }}<|im_end|>{% endfor %}"
             "{% if add_generation_prompt %}[assistant] {% endif %}"}});
  const SftTokenizerSetup setup = read_sft_tokenizer_setup(tok_dir);
  EXPECT_EQ(setup.config_path, tok_dir + "/tokenizer_config.json");
  EXPECT_TRUE(setup.pad_token.empty());
  auto tok = make_tokenizer("HuggingFaceTokenizer", tok_dir);
  const std::string path = dir.path("d.jsonl");
  data_test::write_bytes(path, alpaca("hi", "fox"));
  SftDatasetOptions o;
  o.paths = {path};
  o.seq_length = 64;
  o.tokenizer = tok.get();
  o.tokenizer_model = tok_dir + "/tokenizer.json";  // a file in the directory works too
  const SftDataset ds(o);
  EXPECT_EQ(tok->decode(ds.sample_tokens(0).ids), "[user] hi<|im_end|>[assistant] fox<|im_end|>");
  EXPECT_EQ(ds.pad_id(), tok->eod_id());
  EXPECT_TRUE(read_sft_tokenizer_setup("").chat.chat_template.empty());
}

}  // namespace
}  // namespace primus::data
