#pragma once
// SFT data as training rows: JSONL samples rendered through the chat template (sft_sample.h), tokenized span
// by span with a per-token loss flag, then packed first-fit-decreasing into rows of seq_length tokens (or one
// sample per row, padded). Training reads rows through TokenDataset::fill_row: per-token targets (-1 where no
// loss is taken: prompts, sample boundaries, padding), positions restarting at every sample, and the start of
// each token's sample (for attention that does not cross samples). See docs/posttrain.md ("SFT data: rows,
// packing, padding").
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data/chat_template.h"
#include "data/dataset.h"
#include "data/sft_sample.h"
#include "data/tokenizer.h"

namespace primus::data {

// What to do with a sample longer than seq_length tokens.
enum class SftOverflow {
  kTruncate,  // keep its first seq_length tokens (with their loss flags)
  kDrop,      // leave it out
};
// "truncate" | "drop"; other names throw ConfigError.
SftOverflow parse_sft_overflow(const std::string& name);

// How a tokenizer's files dress a conversation: the chat template (tokenizer_config.json's, else the ChatML
// fallback), the bos/eos strings the template sees, and the padding id.
struct SftTokenizerSetup {
  TokenizerChatConfig chat;  // chat_template empty: the fallback is used
  std::string pad_token;     // tokenizer_config.json's pad_token ("" when none)
  std::string config_path;   // the tokenizer_config.json read ("" when none was found)
};
// Looks for tokenizer_config.json beside the tokenizer `model` resolves to (a directory, a file in it, or a
// hub name found locally); an empty model or no such file gives an empty setup (the fallback template).
SftTokenizerSetup read_sft_tokenizer_setup(const std::string& tokenizer_model);

// One sample as tokens: loss[i] = 1 when token i is to be predicted (assistant content and end-of-turn).
struct SftTokens {
  std::vector<int32_t> ids;
  std::vector<uint8_t> loss;
};

// Renders `messages` into loss spans and tokenizes each span with encode(span, add_special_tokens=false): the
// template writes BOS and markers such as <|im_start|> as text, and an HF tokenizer matches them as its
// special tokens. `prepend_bos` >= 0: an id put first (loss-free) when the rendered sample does not start
// with it (tokenizers whose post-processor adds BOS but whose template does not print it).
SftTokens tokenize_sft_messages(const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                                const std::vector<ChatMessage>& messages, const std::string& bos_token,
                                const std::string& eos_token, int32_t prepend_bos);
// The same for a sample: its spans as sft_sample_spans gives them (a SQuAD record's own text, else its
// messages through the template), tokenized alike; a raw (SQuAD) sample then ends with eod_id(), a loss
// token.
SftTokens tokenize_sft_sample(const Tokenizer& tokenizer, const ChatTemplate& tmpl, const SftSample& sample,
                              const std::string& bos_token, const std::string& eos_token,
                              int32_t prepend_bos);
// The BOS id to prepend for `tokenizer`: bos_id() when encode(text, add_special_tokens=true) puts it first
// (the tokenizer expects every sequence to start with it), else -1.
int32_t sft_required_bos(const Tokenizer& tokenizer);

struct SftDatasetOptions {
  std::vector<std::string> paths;  // JSONL files, read in this order
  int64_t seq_length = 2048;
  bool pack = true;  // true: first-fit-decreasing packing; false: one sample per row, padded
  uint64_t seed = 1234;
  int64_t max_samples = 0;  // > 0: read at most this many records (in file order)
  SftOverflow overflow = SftOverflow::kTruncate;
  SftFormat format = SftFormat::kAuto;
  const Tokenizer* tokenizer = nullptr;  // required; used only while the dataset is built
  std::string tokenizer_model;  // where tokenizer_config.json is looked for (read_sft_tokenizer_setup)
  std::string chat_template;    // non-empty: this template source instead of the tokenizer's
  int32_t pad_id = -1;          // -1: the tokenizer's pad token, else eod_id(), else 0
  std::string name;             // for describe() and errors ("" = the paths)
};

struct SftDatasetStats {
  int64_t samples_read = 0;  // records parsed
  int64_t samples = 0;       // placed in rows
  int64_t rows = 0;
  int64_t tokens = 0;            // sample tokens in rows (padding excluded)
  int64_t loss_tokens = 0;       // targets that are not -1 (what the loss is taken on)
  int64_t truncated = 0;         // samples cut to seq_length
  int64_t dropped_too_long = 0;  // overflow = drop
  int64_t dropped_no_loss = 0;   // no token to predict (after truncation, or an empty reply)
  int64_t longest = 0;           // the longest sample before truncation
  double packing_efficiency() const {
    return rows > 0 && seq_length > 0 ? static_cast<double>(tokens) / static_cast<double>(rows * seq_length)
                                      : 0.0;
  }
  int64_t seq_length = 0;
};

// Where a sample sits in a row.
struct SftRowEntry {
  int64_t sample = 0;  // index among the kept samples (file order)
  int64_t start = 0;   // first token within the row
  int64_t length = 0;
};

class SftDataset : public TokenDataset {
 public:
  // Reads, renders, tokenizes and packs everything up front. Errors name file:line and what was expected.
  explicit SftDataset(const SftDatasetOptions& options);

  int64_t num_samples() const override { return static_cast<int64_t>(row_offsets_.size()) - 1; }
  int64_t seq_length() const override { return seq_; }
  // Row tokens followed by one padding id (seq_length + 1 ids), for code that reads plain samples.
  void sample(int64_t index, int32_t* out) const override;
  std::string describe() const override;
  // tokens[t]: input id; targets[t]: the next token of the same sample when it is a loss token, else -1;
  // positions[t]: index within t's sample (padding counts from 0 in its own segment); seg_starts[t]: the row
  // index of the first token of t's sample (padding after the last sample starts at the first pad token).
  // `index` wraps around; every epoch visits the rows in a fresh seeded order.
  bool fill_row(int64_t index, int32_t* tokens, int32_t* targets, int32_t* positions,
                int32_t* seg_starts) const override;

  const SftDatasetStats& stats() const { return stats_; }
  int32_t pad_id() const { return pad_; }
  // The row that `index` reads, and its samples in row order.
  int64_t row_of(int64_t index) const;
  std::vector<SftRowEntry> row_layout(int64_t row) const;
  // A kept sample's tokens (after truncation) and its source ("file:line").
  SftTokens sample_tokens(int64_t sample) const;
  const std::string& sample_source(int64_t sample) const { return sources_[static_cast<size_t>(sample)]; }

 private:
  int64_t seq_;
  int32_t pad_;
  uint64_t seed_;
  std::string name_;
  bool pack_;
  SftDatasetStats stats_;
  // Kept samples, concatenated: sample i is ids_[offsets_[i], offsets_[i + 1]).
  std::vector<int32_t> ids_;
  std::vector<uint8_t> loss_;
  std::vector<int64_t> offsets_{0};
  std::vector<std::string> sources_;
  // Row r holds samples row_samples_[row_offsets_[r], row_offsets_[r + 1]), in row order.
  std::vector<int64_t> row_samples_;
  std::vector<int64_t> row_offsets_{0};

  uint64_t epoch_key(int64_t epoch) const;
  mutable std::mutex mu_;
  mutable int64_t epoch_ = -1;
  mutable std::vector<int64_t> order_;  // row order of epoch_
};

// First-fit-decreasing: samples (by index) sorted by length, longest first (ties by index), each put into the
// first row with room; rows in the order they were opened, samples within a row in placement order. Every
// length must be in [1, capacity]. O(n log n) (a max-tree over rows' free space finds the first fit).
std::vector<std::vector<int64_t>> pack_first_fit_decreasing(const std::vector<int64_t>& lengths,
                                                            int64_t capacity);

}  // namespace primus::data
