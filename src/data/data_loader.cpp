#include "data/data_loader.h"

#include <fmt/format.h>

#include "core/error.h"

namespace primus {

Batch make_batch(const TokenDataset& ds, int64_t first_sample, int64_t batch_size, int32_t eod_id,
                 bool eod_mask_loss) {
  const int64_t t = ds.seq_length();
  Batch b;
  b.first_sample = first_sample;
  b.tokens = Tensor::empty({batch_size, t}, DType::kI32);
  b.targets = Tensor::empty({batch_size, t}, DType::kI32);
  std::vector<int32_t> buf(static_cast<size_t>(t + 1));
  int32_t* tok = b.tokens.data<int32_t>();
  int32_t* tgt = b.targets.data<int32_t>();
  for (int64_t i = 0; i < batch_size; ++i) {
    ds.sample(first_sample + i, buf.data());
    for (int64_t j = 0; j < t; ++j) {
      tok[i * t + j] = buf[j];
      const bool masked = eod_mask_loss && buf[j] == eod_id;
      tgt[i * t + j] = masked ? -1 : buf[j + 1];
      b.valid_tokens += masked ? 0 : 1;
    }
  }
  return b;
}

DataLoader::DataLoader(std::shared_ptr<const TokenDataset> ds, int64_t batch_size, int64_t start,
                       int32_t eod_id, bool eod_mask_loss, int depth)
    : ds_(std::move(ds)),
      batch_size_(batch_size),
      eod_(eod_id),
      eod_mask_(eod_mask_loss),
      depth_(depth),
      consumed_(start),
      produced_(start) {
  thread_ = std::thread([this] { run(); });
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DataLoader::run() {
  try {
    while (true) {
      int64_t first;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || static_cast<int>(queue_.size()) < depth_; });
        if (stop_) return;
        first = produced_;
        produced_ += batch_size_;
      }
      Batch b = make_batch(*ds_, first, batch_size_, eod_, eod_mask_);
      {
        std::lock_guard<std::mutex> lock(mu_);
        queue_.push_back(std::move(b));
      }
      cv_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
    cv_.notify_all();
  }
}

Batch DataLoader::next() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !queue_.empty() || error_; });
  if (error_ && queue_.empty()) std::rethrow_exception(error_);
  Batch b = std::move(queue_.front());
  queue_.pop_front();
  consumed_ += batch_size_;
  lock.unlock();
  cv_.notify_all();
  return b;
}

DataSources build_data_sources(const TrainConfig& cfg) {
  DataSources src;
  const int64_t seq = cfg.data.seq_length;
  if (cfg.data.mock_data) {
    // Mock data needs no tokenizer (Megatron's needs one only for its vocabulary size, which the config has).
    const int64_t vocab = cfg.model.vocab_size;
    PRIMUS_CHECK(vocab > 0, "mock_data needs a vocabulary size (vocab_size or a known tokenizer)");
    src.train = std::make_shared<MockDataset>(vocab, seq, static_cast<uint64_t>(cfg.seed));
    src.valid = std::make_shared<MockDataset>(vocab, seq, static_cast<uint64_t>(cfg.seed) + 1);
    src.summary = fmt::format("mock data, vocab {}", vocab);
    return src;
  }
  src.tokenizer = make_tokenizer(cfg.data.tokenizer_type, cfg.data.tokenizer_model);
  src.eod_id = src.tokenizer->eod_id();
  if (!cfg.data.text_data_path.empty()) {
    std::vector<std::string> docs = read_text_documents(cfg.data.text_data_path);
    SplitRanges r = split_documents(docs.size(), cfg.data.split);
    auto tokenize = [&](size_t b, size_t e) {
      auto toks = std::make_shared<std::vector<int32_t>>();
      for (size_t i = b; i < e; ++i) {
        std::vector<int32_t> ids = src.tokenizer->encode(docs[i]);
        toks->insert(toks->end(), ids.begin(), ids.end());
        toks->push_back(src.tokenizer->eod_id());
      }
      return toks;
    };
    auto train_toks = tokenize(r.train_begin, r.train_end);
    src.train =
        std::make_shared<StreamDataset>(train_toks, seq, static_cast<uint64_t>(cfg.seed), "train split");
    auto valid_toks = tokenize(r.valid_begin, r.valid_end);
    if (static_cast<int64_t>(valid_toks->size()) > seq + 1) {
      src.valid =
          std::make_shared<StreamDataset>(valid_toks, seq, static_cast<uint64_t>(cfg.seed), "valid split");
    }
    src.summary =
        fmt::format("{} documents from {} ({} train / {} valid tokens, {})", docs.size(),
                    cfg.data.text_data_path, train_toks->size(), valid_toks->size(), src.tokenizer->name());
    return src;
  }
  if (!cfg.data.data_path.empty()) {
    throw ConfigError("data_path: Megatron indexed datasets are not supported yet in this build",
                      "use mock_data: true or text_data_path");
  }
  throw ConfigError("no training data: set mock_data: true, text_data_path (a text corpus) or data_path");
}

}  // namespace primus
