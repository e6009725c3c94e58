#pragma once
// Micro-batches for the trainer. The position in the data is the global count of consumed samples; batch k of
// a run covers samples [k*B, (k+1)*B) of the (shuffled) dataset, so a resume at consumed-samples c continues
// the exact same stream. A background thread assembles the next batches while the current step runs.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "config/train_config.h"
#include "core/tensor.h"
#include "data/dataset.h"
#include "data/tokenizer.h"

namespace primus {

struct Batch {
  Tensor tokens;   // i32 [B, T] on the host
  Tensor targets;  // i32 [B, T]; -1 where the loss does not count
  // Packed SFT rows (TokenDataset::fill_row): i32 [B, T] RoPE positions and sample starts; undefined for
  // plain samples.
  Tensor positions, seg_starts;
  int64_t valid_tokens = 0;
  int64_t first_sample = 0;
};

// Builds one sample batch (used by the loader and directly by tests).
Batch make_batch(const TokenDataset& ds, int64_t first_sample, int64_t batch_size, int32_t eod_id,
                 bool eod_mask_loss);

// Which of the global micro-batches a data-parallel rank reads: rank `rank` of `ranks` takes every ranks-th
// one, starting with its own, so that the k-th batch of rank d covers samples start + (k * ranks + d) * B --
// the order in which one process with the same global batch reads them (train/train_step.cpp).
struct LoaderStride {
  int ranks = 1, rank = 0;
};

class DataLoader {
 public:
  // Produces batches of `batch_size` samples starting at sample `start`, `depth` batches ahead; under data
  // parallelism this rank's share (LoaderStride). consumed_samples() counts every rank's samples.
  DataLoader(std::shared_ptr<const TokenDataset> ds, int64_t batch_size, int64_t start, int32_t eod_id,
             bool eod_mask_loss, int depth = 4, LoaderStride stride = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  Batch next();  // blocks until the next batch is ready; rethrows a loader-thread error
  int64_t consumed_samples() const { return consumed_; }

 private:
  void run();
  std::shared_ptr<const TokenDataset> ds_;
  int64_t batch_size_;
  int32_t eod_;
  bool eod_mask_;
  int depth_;
  LoaderStride stride_;
  int64_t consumed_;
  int64_t produced_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

// The datasets a run trains and evaluates on, built from the config.
struct DataSources {
  std::unique_ptr<Tokenizer> tokenizer;  // null for mock data (only the vocabulary size matters there)
  int32_t eod_id = -1;                   // -1: no end-of-document token (mock data)
  std::shared_ptr<const TokenDataset> train;
  std::shared_ptr<const TokenDataset> valid;  // may be null (no validation data)
  std::string summary;
};
DataSources build_data_sources(const TrainConfig& cfg);
// The tokenizer the config names (tokenizer_type, tokenizer_model, vocab_file, merge_file, vocab_size).
TokenizerSpec tokenizer_spec(const TrainConfig& cfg);

}  // namespace primus
