#include "data/dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "core/philox.h"
#include "data/document_reader.h"
#include "data/megatron_data.h"

namespace primus {

MockDataset::MockDataset(int64_t vocab, int64_t seq_length, uint64_t seed, int64_t num_samples)
    : vocab_(vocab), seq_(seq_length), num_samples_(num_samples), key_(mix64(seed ^ 0x6d6f636bull)) {
  PRIMUS_CHECK(vocab > 0 && seq_length > 0, "mock dataset needs vocab > 0 and seq_length > 0");
}

void MockDataset::sample(int64_t index, int32_t* out) const {
  const uint64_t base = static_cast<uint64_t>(index) * static_cast<uint64_t>(seq_ + 1);
  for (int64_t t = 0; t <= seq_; ++t) out[t] = static_cast<int32_t>(philox_u32(key_, base + t) % vocab_);
}

std::string MockDataset::describe() const {
  return fmt::format("mock data (vocab {}, seq {})", vocab_, seq_);
}

namespace {
// Fisher-Yates driven by Philox: the same permutation on every platform for a given (seed, epoch).
std::vector<int64_t> permutation(int64_t n, uint64_t key) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    Philox4 r = philox4x32(key, static_cast<uint64_t>(i), 1);
    uint64_t u = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
    std::swap(p[i], p[static_cast<int64_t>(u % static_cast<uint64_t>(i + 1))]);
  }
  return p;
}
}  // namespace

StreamDataset::StreamDataset(std::shared_ptr<const std::vector<int32_t>> tokens, int64_t seq_length,
                             uint64_t seed, std::string name)
    : tokens_(std::move(tokens)), seq_(seq_length), seed_(seed), name_(std::move(name)) {
  const int64_t n_tok = static_cast<int64_t>(tokens_->size());
  PRIMUS_CHECK(seq_ > 0, "seq_length must be positive");
  const int64_t n = (n_tok - 1) / seq_;  // trailing partial sample dropped, as Megatron does
  if (n <= 0) {
    throw ConfigError(
        fmt::format("{}: {} tokens cannot fill one sample of seq_length {} + 1", name_, n_tok, seq_),
        "lower seq_length or use a larger corpus");
  }
  num_samples_ = n;
  order_ = permutation(n, epoch_key(0));
  epoch_ = 0;
}

uint64_t StreamDataset::epoch_key(int64_t epoch) const {
  return mix64(seed_ ^ 0x73747265616dull ^ mix64(static_cast<uint64_t>(epoch)));
}

void StreamDataset::sample(int64_t index, int32_t* out) const {
  const int64_t n = num_samples();
  const int64_t epoch = index / n;
  int64_t j = index % n;
  std::lock_guard<std::mutex> lock(mu_);
  if (epoch != epoch_) {
    // A new epoch draws a fresh permutation (keyed by the epoch, so any process computes the same one).
    order_ = permutation(n, epoch_key(epoch));
    epoch_ = epoch;
  }
  const int64_t start = order_[j] * seq_;
  std::copy_n(tokens_->data() + start, seq_ + 1, out);
}

std::string StreamDataset::describe() const {
  return fmt::format("{}: {} tokens, {} samples of {}+1", name_, tokens_->size(), num_samples(), seq_);
}

std::vector<std::string> read_text_documents(const std::string& path) {
  const std::vector<std::string> files = corpus_files(
      path, "text_data_path", "on Debian, `apt-get install fortunes` provides /usr/share/games/fortunes");
  std::vector<std::string> docs;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw Error(ErrorKind::kRuntime, fmt::format("cannot read {}", f));
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    // Split at lines that hold only "%" (fortune's separator); a file without one is a single document.
    std::string cur;
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
      if (line == "%") {
        if (!cur.empty()) docs.push_back(std::move(cur));
        cur.clear();
      } else {
        cur += line;
        cur += '\n';
      }
    }
    if (!cur.empty()) docs.push_back(std::move(cur));
  }
  if (docs.empty())
    throw ConfigError(fmt::format("text_data_path: no text documents found under '{}'", path));
  return docs;
}

SplitRanges split_documents(size_t num_docs, const std::string& split) {
  // Megatron's bookends (megatron_data.h), so text and indexed data split the same way.
  const auto m = split_matrix(split);
  size_t r[3][2] = {{0, 0}, {0, 0}, {0, 0}};
  size_t prev = 0;
  for (int i = 0; i < 3; ++i) {
    if (m[static_cast<size_t>(i)]) {
      auto [b, e] = split_range(*m[static_cast<size_t>(i)], static_cast<int64_t>(num_docs));
      r[i][0] = static_cast<size_t>(b);
      r[i][1] = static_cast<size_t>(e);
      prev = r[i][1];
    } else {
      r[i][0] = r[i][1] = prev;
    }
  }
  return {r[0][0], r[0][1], r[1][0], r[1][1], r[2][0], r[2][1]};
}

}  // namespace primus
