#include "data/sft_dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.h"
#include "core/philox.h"
#include "data/hf_tokenizer.h"
#include "data/tokenizer_files.h"

namespace primus::data {

SftOverflow parse_sft_overflow(const std::string& name) {
  if (name == "truncate") return SftOverflow::kTruncate;
  if (name == "drop") return SftOverflow::kDrop;
  throw ConfigError(
      fmt::format("unknown treatment of over-long SFT samples '{}': expected truncate or drop", name));
}

SftTokenizerSetup read_sft_tokenizer_setup(const std::string& tokenizer_model) {
  SftTokenizerSetup setup;
  if (tokenizer_model.empty()) return setup;
  namespace fs = std::filesystem;
  fs::path dir;
  if (fs::is_directory(tokenizer_model)) {
    dir = tokenizer_model;
  } else {
    const TokenizerFiles files = find_tokenizer_files(tokenizer_model);
    if (files.kind == TokenizerFiles::kNone) return setup;
    dir = fs::path(files.path).parent_path();
  }
  const fs::path config = dir / "tokenizer_config.json";
  if (!fs::exists(config)) {
    // Newer transformers may save only chat_template.jinja; read_tokenizer_chat_config needs the config path,
    // and without a config there are no bos/eos strings either.
    return setup;
  }
  setup.config_path = config.string();
  setup.chat = read_tokenizer_chat_config(setup.config_path);
  std::ifstream in(config, std::ios::binary);
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("{}: not valid JSON: {}", setup.config_path, e.what()));
  }
  if (j.contains("pad_token")) {
    const auto& p = j["pad_token"];
    if (p.is_string()) setup.pad_token = p.get<std::string>();
    if (p.is_object() && p.contains("content") && p["content"].is_string())
      setup.pad_token = p["content"].get<std::string>();
  }
  return setup;
}

int32_t sft_required_bos(const Tokenizer& tokenizer) {
  const int32_t bos = tokenizer.bos_id();
  if (bos < 0) return -1;
  const std::vector<int32_t> with = tokenizer.encode("a", true);
  return !with.empty() && with.front() == bos ? bos : -1;
}

namespace {
SftTokens tokenize_spans(const Tokenizer& tokenizer, const std::vector<TextSpan>& spans,
                         int32_t prepend_bos) {
  SftTokens out;
  for (const TextSpan& span : spans) {
    if (span.text.empty()) continue;
    const std::vector<int32_t> ids = tokenizer.encode(span.text, /*add_special_tokens=*/false);
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.loss.insert(out.loss.end(), ids.size(), span.loss ? 1 : 0);
  }
  if (prepend_bos >= 0 && (out.ids.empty() || out.ids.front() != prepend_bos)) {
    out.ids.insert(out.ids.begin(), prepend_bos);
    out.loss.insert(out.loss.begin(), 0);
  }
  return out;
}
}  // namespace

SftTokens tokenize_sft_messages(const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                                const std::vector<ChatMessage>& messages, const std::string& bos_token,
                                const std::string& eos_token, int32_t prepend_bos) {
  return tokenize_spans(tokenizer, render_sft_spans(tmpl, messages, bos_token, eos_token), prepend_bos);
}

SftTokens tokenize_sft_sample(const Tokenizer& tokenizer, const ChatTemplate& tmpl, const SftSample& sample,
                              const std::string& bos_token, const std::string& eos_token,
                              int32_t prepend_bos) {
  SftTokens out =
      tokenize_spans(tokenizer, sft_sample_spans(tmpl, sample, bos_token, eos_token), prepend_bos);
  // A raw sample has no template to end it: the end-of-document token closes the answer and is learned with
  // it (Megatron-Bridge's add_eos), so that the model learns to stop.
  if (!sample.raw.empty()) {
    out.ids.push_back(tokenizer.eod_id());
    out.loss.push_back(1);
  }
  return out;
}

std::vector<std::vector<int64_t>> pack_first_fit_decreasing(const std::vector<int64_t>& lengths,
                                                            int64_t capacity) {
  const int64_t n = static_cast<int64_t>(lengths.size());
  std::vector<int64_t> by_length(static_cast<size_t>(n));
  std::iota(by_length.begin(), by_length.end(), int64_t{0});
  std::stable_sort(by_length.begin(), by_length.end(),
                   [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
  // A max-tree over the free space of n potential rows (unopened rows are empty): the leftmost leaf with
  // enough room is the first open row that fits, or the next new row -- first fit in O(log n).
  int64_t leaves = 1;
  while (leaves < std::max<int64_t>(n, 1)) leaves *= 2;
  std::vector<int64_t> free(static_cast<size_t>(2 * leaves), capacity);
  std::vector<std::vector<int64_t>> rows;
  for (int64_t s : by_length) {
    const int64_t len = lengths[s];
    PRIMUS_CHECK(len >= 1 && len <= capacity, "sample {} has length {}, outside [1, {}]", s, len, capacity);
    int64_t node = 1;
    while (node < leaves) node = free[2 * node] >= len ? 2 * node : 2 * node + 1;
    const int64_t row = node - leaves;
    if (row >= static_cast<int64_t>(rows.size())) rows.emplace_back();
    rows[row].push_back(s);
    free[node] -= len;
    for (node /= 2; node >= 1; node /= 2) free[node] = std::max(free[2 * node], free[2 * node + 1]);
  }
  return rows;
}

namespace {

// Fisher-Yates driven by Philox: the same order on every platform for a given (seed, epoch).
std::vector<int64_t> permutation(int64_t n, uint64_t key) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  for (int64_t i = n - 1; i > 0; --i) {
    Philox4 r = philox4x32(key, static_cast<uint64_t>(i), 1);
    const uint64_t u = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
    std::swap(p[i], p[static_cast<int64_t>(u % static_cast<uint64_t>(i + 1))]);
  }
  return p;
}

bool blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\n") == std::string::npos;
}

int32_t resolve_pad(const SftDatasetOptions& o, const SftTokenizerSetup& setup) {
  if (o.pad_id >= 0) return o.pad_id;
  if (!setup.pad_token.empty()) {
    if (const auto* hf = dynamic_cast<const HfTokenizer*>(o.tokenizer)) {
      const int32_t id = hf->token_to_id(setup.pad_token);
      if (id >= 0) return id;
    }
  }
  return o.tokenizer->eod_id() >= 0 ? o.tokenizer->eod_id() : 0;
}

}  // namespace

SftDataset::SftDataset(const SftDatasetOptions& o) : seq_(o.seq_length), seed_(o.seed), pack_(o.pack) {
  if (o.tokenizer == nullptr) throw ConfigError("SFT dataset: no tokenizer given");
  if (o.paths.empty())
    throw ConfigError("SFT dataset: no data files given (expected one or more .jsonl files)");
  if (seq_ < 2)
    throw ConfigError(fmt::format("SFT dataset: seq_length {} is too short (expected >= 2)", seq_));
  name_ = o.name;
  if (name_.empty())
    for (const std::string& p : o.paths) name_ += (name_.empty() ? "" : ",") + p;

  const SftTokenizerSetup setup = read_sft_tokenizer_setup(o.tokenizer_model);
  const ChatTemplate tmpl = o.chat_template.empty()
                                ? chat_template_or_fallback(setup.chat)
                                : ChatTemplate::parse(o.chat_template, "<SFT chat template option>");
  pad_ = resolve_pad(o, setup);
  const int32_t bos = sft_required_bos(*o.tokenizer);
  stats_.seq_length = seq_;

  for (const std::string& path : o.paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ConfigError(fmt::format("{}: cannot open SFT data file (expected a JSONL file)", path));
    std::string line;
    size_t line_no = 0;
    while ((o.max_samples <= 0 || stats_.samples_read < o.max_samples) && std::getline(in, line)) {
      ++line_no;
      if (blank(line)) continue;
      const SftSample sample = parse_sft_line(line, path, line_no, o.format);
      ++stats_.samples_read;
      const std::string where = fmt::format("{}:{}", path, line_no);
      SftTokens t;
      try {
        t = tokenize_sft_sample(*o.tokenizer, tmpl, sample, setup.chat.bos_token, setup.chat.eos_token, bos);
      } catch (const Error& e) {
        throw ConfigError(fmt::format("{}: {}", where, e.what()), e.hint());
      }
      const int64_t len = static_cast<int64_t>(t.ids.size());
      stats_.longest = std::max(stats_.longest, len);
      if (len > seq_) {
        if (o.overflow == SftOverflow::kDrop) {
          ++stats_.dropped_too_long;
          continue;
        }
        t.ids.resize(static_cast<size_t>(seq_));
        t.loss.resize(static_cast<size_t>(seq_));
        ++stats_.truncated;
      }
      // The first token is never predicted (nothing precedes it within the sample).
      const int64_t targets =
          t.loss.size() < 2 ? 0 : std::count(t.loss.begin() + 1, t.loss.end(), uint8_t{1});
      if (targets == 0) {
        ++stats_.dropped_no_loss;
        continue;
      }
      stats_.loss_tokens += targets;
      stats_.tokens += static_cast<int64_t>(t.ids.size());
      ids_.insert(ids_.end(), t.ids.begin(), t.ids.end());
      loss_.insert(loss_.end(), t.loss.begin(), t.loss.end());
      offsets_.push_back(static_cast<int64_t>(ids_.size()));
      sources_.push_back(where);
    }
  }
  stats_.samples = static_cast<int64_t>(sources_.size());
  if (stats_.samples == 0) {
    throw ConfigError(
        fmt::format(
            "{}: no SFT sample to train on ({} read, {} longer than seq_length {} dropped, {} without a "
            "token to predict)",
            name_, stats_.samples_read, stats_.dropped_too_long, seq_, stats_.dropped_no_loss),
        "check the files and the format; raise seq_length or use overflow = truncate");
  }

  if (pack_) {
    std::vector<int64_t> lengths(static_cast<size_t>(stats_.samples));
    for (int64_t i = 0; i < stats_.samples; ++i) lengths[i] = offsets_[i + 1] - offsets_[i];
    for (const auto& row : pack_first_fit_decreasing(lengths, seq_)) {
      row_samples_.insert(row_samples_.end(), row.begin(), row.end());
      row_offsets_.push_back(static_cast<int64_t>(row_samples_.size()));
    }
  } else {
    for (int64_t i = 0; i < stats_.samples; ++i) {
      row_samples_.push_back(i);
      row_offsets_.push_back(i + 1);
    }
  }
  stats_.rows = num_samples();
  order_ = permutation(stats_.rows, epoch_key(0));
  epoch_ = 0;
}

uint64_t SftDataset::epoch_key(int64_t epoch) const {
  return mix64(seed_ ^ 0x5346545f726f7773ull ^ mix64(static_cast<uint64_t>(epoch)));
}

int64_t SftDataset::row_of(int64_t index) const {
  PRIMUS_CHECK(index >= 0, "SFT row index {} is negative", index);
  const int64_t n = num_samples();
  const int64_t epoch = index / n;
  std::lock_guard<std::mutex> lock(mu_);
  if (epoch != epoch_) {
    // Each epoch visits the rows in its own order, keyed by the epoch so every process computes the same.
    order_ = permutation(n, epoch_key(epoch));
    epoch_ = epoch;
  }
  return order_[index % n];
}

std::vector<SftRowEntry> SftDataset::row_layout(int64_t row) const {
  PRIMUS_CHECK(row >= 0 && row < num_samples(), "SFT row {} outside [0, {})", row, num_samples());
  std::vector<SftRowEntry> layout;
  int64_t start = 0;
  for (int64_t k = row_offsets_[row]; k < row_offsets_[row + 1]; ++k) {
    const int64_t s = row_samples_[k];
    const int64_t len = offsets_[s + 1] - offsets_[s];
    layout.push_back({s, start, len});
    start += len;
  }
  return layout;
}

SftTokens SftDataset::sample_tokens(int64_t sample) const {
  PRIMUS_CHECK(sample >= 0 && sample < stats_.samples, "SFT sample {} outside [0, {})", sample,
               stats_.samples);
  const auto b = offsets_[sample], e = offsets_[sample + 1];
  return {std::vector<int32_t>(ids_.begin() + b, ids_.begin() + e),
          std::vector<uint8_t>(loss_.begin() + b, loss_.begin() + e)};
}

bool SftDataset::fill_row(int64_t index, int32_t* tokens, int32_t* targets, int32_t* positions,
                          int32_t* seg_starts) const {
  const int64_t row = row_of(index);
  int64_t t = 0;
  for (int64_t k = row_offsets_[row]; k < row_offsets_[row + 1]; ++k) {
    const int64_t s = row_samples_[k];
    const int64_t off = offsets_[s], len = offsets_[s + 1] - off;
    const int64_t start = t;
    for (int64_t i = 0; i < len; ++i, ++t) {
      tokens[t] = ids_[off + i];
      // No target across the sample's end: the next sample's first token is not a continuation.
      targets[t] = i + 1 < len && loss_[off + i + 1] ? ids_[off + i + 1] : -1;
      positions[t] = static_cast<int32_t>(i);
      seg_starts[t] = static_cast<int32_t>(start);
    }
  }
  const int64_t pad_start = t;
  for (; t < seq_; ++t) {
    tokens[t] = pad_;
    targets[t] = -1;
    positions[t] = static_cast<int32_t>(t - pad_start);
    seg_starts[t] = static_cast<int32_t>(pad_start);
  }
  return true;
}

void SftDataset::sample(int64_t index, int32_t* out) const {
  std::vector<int32_t> targets(static_cast<size_t>(seq_)), positions(static_cast<size_t>(seq_)),
      starts(static_cast<size_t>(seq_));
  fill_row(index, out, targets.data(), positions.data(), starts.data());
  out[seq_] = pad_;
}

std::string SftDataset::describe() const {
  const SftDatasetStats& s = stats_;
  std::string dropped;
  if (s.dropped_too_long + s.dropped_no_loss > 0)
    dropped = fmt::format(", {} dropped ({} too long, {} nothing to predict)",
                          s.dropped_too_long + s.dropped_no_loss, s.dropped_too_long, s.dropped_no_loss);
  return fmt::format(
      "SFT {}: {} samples ({} read, {} truncated{}) in {} {} rows of {} tokens, {:.1f}% filled, {} tokens, "
      "{} "
      "loss tokens",
      name_, s.samples, s.samples_read, s.truncated, dropped, s.rows, pack_ ? "packed" : "padded", seq_,
      100.0 * s.packing_efficiency(), s.tokens, s.loss_tokens);
}

}  // namespace primus::data
