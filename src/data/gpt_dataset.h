#pragma once
// Megatron's GPTDataset and BlendedDataset over indexed datasets (reference.md §1.2): samples of seq_length +
// 1 tokens that cross document boundaries, documents shuffled per epoch and samples shuffled with numpy's
// RandomState(seed), so that the indices equal Megatron's bit for bit; the indices are cached as .npy files
// named by a hash of everything that determines them.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/indexed_dataset.h"

namespace primus {

// The three index arrays of a GPTDataset.
struct GptIndices {
  std::vector<int32_t> document_index;  // document ids, num_epochs x (split's documents), shuffled
  std::vector<int64_t> sample_index;    // (num_samples + 1) x 2: (position in document_index, token offset)
  std::vector<int64_t> shuffle_index;   // permutation of [0, num_samples)
  int64_t num_epochs = 0;
  bool separate_final_epoch = false;
  int64_t num_samples() const { return static_cast<int64_t>(shuffle_index.size()); }
};

// Megatron's _build_document_sample_shuffle_indices for documents [doc_begin, doc_end) of a dataset whose
// sequence lengths are `lengths` (one sequence per document, as in text pretraining). `num_samples` null:
// one epoch. Throws ConfigError when the documents hold too few tokens for one sample.
GptIndices build_gpt_indices(const std::vector<int32_t>& lengths, int64_t doc_begin, int64_t doc_end,
                             std::optional<int64_t> num_samples, int64_t seq_length, uint32_t seed,
                             const std::string& what);

struct GptDatasetOptions {
  int64_t seq_length = 0;
  uint32_t seed = 1234;
  int64_t vocab_limit = 0;   // token ids must be < this (0: no check)
  std::string cache_dir;     // "": <dir of the prefix>/cache/GPTDataset_indices
  bool use_cache = true;     // false: build in memory only
  std::string split_string;  // recorded in the cache description
};

class GptDataset : public TokenDataset {
 public:
  GptDataset(std::shared_ptr<const IndexedDataset> data, int64_t doc_begin, int64_t doc_end,
             std::optional<int64_t> num_samples, const std::string& split_name, const GptDatasetOptions& opt);
  int64_t num_samples() const override { return indices_.num_samples(); }
  int64_t seq_length() const override { return opt_.seq_length; }
  // Sample `index` (wrapping around past num_samples()): seq_length + 1 token ids.
  void sample(int64_t index, int32_t* out) const override;
  std::string describe() const override;

  const GptIndices& indices() const { return indices_; }
  const std::string& cache_prefix() const { return cache_prefix_; }  // "" when not cached
  bool loaded_from_cache() const { return from_cache_; }
  const std::string& description() const { return description_; }

 private:
  bool try_load_cache(const std::string& base);
  void save_cache(const std::string& base) const;

  std::shared_ptr<const IndexedDataset> data_;
  int64_t doc_begin_, doc_end_;
  std::optional<int64_t> requested_;
  std::string split_name_;
  GptDatasetOptions opt_;
  GptIndices indices_;
  std::string description_, cache_prefix_;
  bool from_cache_ = false;
};

// Megatron's build_blending_indices: sample s goes to the dataset d maximising w_d * max(s, 1) - taken_d (the
// lowest index on ties), and is that dataset's taken_d-th sample.
void build_blending_indices(const std::vector<double>& weights, int64_t size,
                            std::vector<int16_t>* dataset_index, std::vector<int64_t>* dataset_sample_index);

class BlendedDataset : public TokenDataset {
 public:
  // `weights` are normalised here (as Megatron does, again). `cache_dir` "": no cache.
  BlendedDataset(std::vector<std::shared_ptr<const TokenDataset>> datasets, std::vector<double> weights,
                 int64_t size, const std::string& description, const std::string& cache_dir);
  int64_t num_samples() const override { return size_; }
  int64_t seq_length() const override { return datasets_.front()->seq_length(); }
  void sample(int64_t index, int32_t* out) const override;
  std::string describe() const override;

  const std::vector<int16_t>& dataset_index() const { return dataset_index_; }
  const std::vector<int64_t>& dataset_sample_index() const { return dataset_sample_index_; }
  const std::vector<double>& weights() const { return weights_; }

 private:
  std::vector<std::shared_ptr<const TokenDataset>> datasets_;
  std::vector<double> weights_;
  int64_t size_;
  std::vector<int16_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
};

// numpy's float64 sum (pairwise summation) and Megatron's normalize(): w / sum(w).
double numpy_sum(const std::vector<double>& v);
std::vector<double> normalize_weights(const std::vector<double>& w);

}  // namespace primus
