#pragma once
// Megatron's BlendedMegatronDatasetBuilder for GPT data: `data_path` blends ("w1 p1 w2 p2 ..." or plain
// prefixes), `split` ("99,1,0") into train/valid/test document ranges, or per-split paths
// (train_data_path / valid_data_path / test_data_path), with the requested sample counts of each split.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace primus {

struct Blend {
  std::vector<std::string> prefixes;
  std::optional<std::vector<double>> weights;  // null: unweighted (blend by dataset size)
};
// Megatron's get_blend_from_list: an even count of words whose every other word is a number is a weighted
// blend; anything else is a list of prefixes. `key` names the config key in errors.
Blend parse_blend(const std::vector<std::string>& words, const std::string& key);

struct Bookend {
  double begin = 0, end = 0;
};
// parse_and_normalize_split + convert_split_vector_to_split_matrix: one bookend per split (null: empty
// split).
std::array<std::optional<Bookend>, 3> split_matrix(const std::string& split);
// Documents [round(begin * n), round(end * n)) with Python's round (half to even).
std::pair<int64_t, int64_t> split_range(const Bookend& b, int64_t n);

struct MegatronDataRequest {
  std::vector<std::string> data_path;  // blend of all splits (with `split`)
  std::array<std::vector<std::string>, 3>
      split_path;  // train/valid/test_data_path (used when data_path is empty)
  std::string split = "969,30,1";
  std::array<int64_t, 3> num_samples{0, 0, 0};  // requested samples per split (0: not needed)
  int64_t seq_length = 0;
  uint32_t seed = 1234;
  std::string cache_dir;    // data_cache_path ("" = beside each dataset)
  int64_t vocab_limit = 0;  // token ids must be below this
};

struct MegatronDataSplits {
  std::array<std::shared_ptr<const TokenDataset>, 3> split;  // train, valid, test (null when not built)
  std::string summary;
};
MegatronDataSplits build_megatron_datasets(const MegatronDataRequest& req);

// Megatron's requested sample counts: train = train_iters x GBS, valid = (train_iters / eval_interval + 1) x
// eval_iters x GBS, test = eval_iters x GBS.
std::array<int64_t, 3> requested_samples(int64_t train_iters, int64_t global_batch, int64_t eval_interval,
                                         int64_t eval_iters);

}  // namespace primus
