#include "data/bpe_trainer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_set>

#include "core/error.h"
#include "data/hf_tokenizer.h"
#include "data/unicode.h"

namespace primus {

namespace {
const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

uint64_t key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// A byte string as byte-level characters (the form tokens take in tokenizer.json).
std::string byte_level_text(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) utf8::append(byte_to_char(c), &out);
  return out;
}
}  // namespace

BpeTrainer::BpeTrainer() : regex_(std::make_unique<Regex>(kGpt2Pattern, "train-tokenizer")) {}

void BpeTrainer::add_text(std::string_view text) {
  std::string fixed;
  if (!utf8::is_valid(text)) {
    utf8::repair(text, &fixed);
    text = fixed;
  }
  std::vector<std::pair<size_t, size_t>> m;
  regex_->find_all(text, &m);
  // The gaps between matches are words too (Isolated split); with this pattern there are none.
  size_t prev = 0;
  for (const auto& [b, e] : m) {
    if (b > prev) ++counts_[std::string(text.substr(prev, b - prev))];
    if (e > b) ++counts_[std::string(text.substr(b, e - b))];
    prev = e;
  }
  if (prev < text.size()) ++counts_[std::string(text.substr(prev))];
}

std::string BpeTrainer::train(const BpeTrainerOptions& opt, int64_t* merges_out) const {
  const int64_t n_special = static_cast<int64_t>(opt.special_tokens.size());
  if (opt.vocab_size < 256 + n_special)
    throw ConfigError(fmt::format("--vocab-size {} is below the 256 byte tokens + {} special tokens",
                                  opt.vocab_size, n_special));
  // Words in a fixed order (sorted), so the result does not depend on hash-map iteration order.
  std::vector<std::pair<std::string, int64_t>> sorted(counts_.begin(), counts_.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::vector<int32_t>> words(sorted.size());
  std::vector<int64_t> freq(sorted.size());
  for (size_t w = 0; w < sorted.size(); ++w) {
    for (unsigned char c : sorted[w].first) words[w].push_back(c);
    freq[w] = sorted[w].second;
  }
  std::vector<std::string> tokens(256);  // id -> bytes
  for (int b = 0; b < 256; ++b) tokens[static_cast<size_t>(b)] = std::string(1, static_cast<char>(b));
  std::unordered_map<std::string, int32_t> token_id;
  for (int b = 0; b < 256; ++b) token_id[tokens[static_cast<size_t>(b)]] = b;

  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::unordered_set<int32_t>> where;
  for (size_t w = 0; w < words.size(); ++w) {
    for (size_t i = 0; i + 1 < words[w].size(); ++i) {
      const uint64_t k = key(words[w][i], words[w][i + 1]);
      pair_count[k] += freq[w];
      where[k].insert(static_cast<int32_t>(w));
    }
  }
  struct Entry {
    int64_t count;
    uint64_t pair;
    // Max count first; on ties the smaller pair (HF's BpeTrainer order).
    bool operator<(const Entry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
  };
  std::priority_queue<Entry> heap;
  for (const auto& [k, c] : pair_count) heap.push({c, k});

  std::vector<std::pair<int32_t, int32_t>> merges;
  const int64_t target_merges = opt.vocab_size - 256 - n_special;
  while (static_cast<int64_t>(merges.size()) < target_merges && !heap.empty()) {
    Entry top = heap.top();
    heap.pop();
    auto pc = pair_count.find(top.pair);
    const int64_t current = pc == pair_count.end() ? 0 : pc->second;
    if (current != top.count) {
      if (current > 0) heap.push({current, top.pair});
      continue;
    }
    if (current < opt.min_frequency) break;
    const int32_t a = static_cast<int32_t>(top.pair >> 32), b = static_cast<int32_t>(top.pair & 0xffffffffu);
    const std::string merged = tokens[static_cast<size_t>(a)] + tokens[static_cast<size_t>(b)];
    int32_t nid;
    auto existing = token_id.find(merged);
    if (existing != token_id.end()) {
      nid = existing->second;  // two merge paths to the same string share its id, as in HF
    } else {
      nid = static_cast<int32_t>(tokens.size());
      tokens.push_back(merged);
      token_id[merged] = nid;
    }
    merges.emplace_back(a, b);
    std::unordered_set<uint64_t> touched;
    auto add = [&](int32_t x, int32_t y, int64_t d, int32_t w) {
      const uint64_t k = key(x, y);
      pair_count[k] += d;
      if (d > 0) where[k].insert(w);
      touched.insert(k);
    };
    const std::unordered_set<int32_t> ws = where[top.pair];
    for (int32_t w : ws) {
      std::vector<int32_t>& s = words[static_cast<size_t>(w)];
      const int64_t f = freq[static_cast<size_t>(w)];
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        if (s[i] != a || s[i + 1] != b) continue;
        if (i > 0) add(s[i - 1], a, -f, w);
        if (i + 2 < s.size()) add(b, s[i + 2], -f, w);
        add(a, b, -f, w);
        s[i] = nid;
        s.erase(s.begin() + static_cast<std::ptrdiff_t>(i) + 1);
        if (i > 0) add(s[i - 1], nid, f, w);
        if (i + 1 < s.size()) add(nid, s[i + 1], f, w);
      }
    }
    for (uint64_t k : touched) {
      const int64_t c = pair_count[k];
      if (c > 0) heap.push({c, k});
    }
  }
  if (merges_out != nullptr) *merges_out = static_cast<int64_t>(merges.size());

  using nlohmann::ordered_json;
  ordered_json vocab = ordered_json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[byte_level_text(tokens[i])] = i;
  ordered_json merge_list = ordered_json::array();
  for (const auto& [a, b] : merges)
    merge_list.push_back(byte_level_text(tokens[static_cast<size_t>(a)]) + " " +
                         byte_level_text(tokens[static_cast<size_t>(b)]));
  ordered_json added = ordered_json::array();
  for (size_t i = 0; i < opt.special_tokens.size(); ++i) {
    added.push_back({{"id", tokens.size() + i},
                     {"content", opt.special_tokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  j["post_processor"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}};
  j["decoder"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merge_list}};
  return j.dump(1) + "\n";
}

std::string BpeTrainer::tokenizer_config(const BpeTrainerOptions& opt) {
  nlohmann::ordered_json c;
  c["tokenizer_class"] = "PreTrainedTokenizerFast";
  if (!opt.special_tokens.empty()) {
    c["bos_token"] = opt.special_tokens[0];
    c["eos_token"] = opt.special_tokens[0];
  }
  c["add_prefix_space"] = false;
  c["clean_up_tokenization_spaces"] = false;
  c["model_max_length"] = 1000000;
  return c.dump(2) + "\n";
}

}  // namespace primus
