#pragma once
// A dataset of fixed-length training samples: sample i is seq_length + 1 token ids (inputs are the first
// seq_length, targets the last seq_length). Samples are addressed by a global index so that the position in
// the data is a single number (consumed samples), which makes resume exact at any data-parallel size.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace primus {

class TokenDataset {
 public:
  virtual ~TokenDataset() = default;
  virtual int64_t num_samples() const = 0;
  virtual int64_t seq_length() const = 0;
  // Writes seq_length + 1 ids of sample `index` (any index >= 0: datasets wrap around in epochs).
  virtual void sample(int64_t index, int32_t* out) const = 0;
  virtual std::string describe() const = 0;
  // Rows with per-token targets, positions and sample starts (SFT packing / padding): fills seq_length
  // entries each and returns true; false: the dataset has only plain samples (sample()).
  virtual bool fill_row(int64_t index, int32_t* tokens, int32_t* targets, int32_t* positions,
                        int32_t* seg_starts) const {
    (void)index, (void)tokens, (void)targets, (void)positions, (void)seg_starts;
    return false;
  }
};

// Deterministic random tokens in [0, vocab) keyed by (seed, sample index, position) (`mock_data: true`).
class MockDataset : public TokenDataset {
 public:
  MockDataset(int64_t vocab, int64_t seq_length, uint64_t seed, int64_t num_samples = int64_t(1) << 40);
  int64_t num_samples() const override { return num_samples_; }
  int64_t seq_length() const override { return seq_; }
  void sample(int64_t index, int32_t* out) const override;
  std::string describe() const override;

 private:
  int64_t vocab_, seq_, num_samples_;
  uint64_t key_;
};

// GPT-style samples over one token stream (documents concatenated with an EOD after each): sample j starts at
// token j * seq_length and takes seq_length + 1 tokens, so consecutive samples overlap by one token and cross
// document boundaries, as Megatron's GPTDataset does. The sample order is a seeded permutation per epoch.
class StreamDataset : public TokenDataset {
 public:
  StreamDataset(std::shared_ptr<const std::vector<int32_t>> tokens, int64_t seq_length, uint64_t seed,
                std::string name);
  int64_t num_samples() const override { return num_samples_; }
  int64_t seq_length() const override { return seq_; }
  void sample(int64_t index, int32_t* out) const override;
  std::string describe() const override;

 private:
  std::shared_ptr<const std::vector<int32_t>> tokens_;
  int64_t seq_;
  uint64_t seed_;
  uint64_t epoch_key(int64_t epoch) const;
  std::string name_;
  mutable std::mutex mu_;
  mutable int64_t epoch_ = -1;
  mutable std::vector<int64_t> order_;  // permutation of sample starts for epoch_
  int64_t num_samples_ = 0;
};

// Reads a text corpus: one file, or every regular file of a directory (sorted by name; files with a NUL byte
// in the first 4 KiB and fortune index files *.dat are skipped). Fortune-style files are split into documents
// at lines holding only "%"; other files are one document each.
std::vector<std::string> read_text_documents(const std::string& path);

// Deterministic train/valid split of documents by the Megatron-style `split` string ("969,30,1"): returns the
// document ranges [begin, end) for train, valid and test.
struct SplitRanges {
  size_t train_begin, train_end, valid_begin, valid_end, test_begin, test_end;
};
SplitRanges split_documents(size_t num_docs, const std::string& split);

}  // namespace primus
