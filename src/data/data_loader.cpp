#include "data/data_loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "data/megatron_data.h"
#include "data/sft_dataset.h"

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
  // SFT rows carry their own targets (-1 off the responses and across samples), positions and sample starts.
  Tensor pos = Tensor::empty({batch_size, t}, DType::kI32), seg = Tensor::empty({batch_size, t}, DType::kI32);
  if (batch_size > 0 && ds.fill_row(first_sample, tok, tgt, pos.data<int32_t>(), seg.data<int32_t>())) {
    for (int64_t i = 0; i < batch_size; ++i) {
      if (i > 0)
        PRIMUS_CHECK(ds.fill_row(first_sample + i, tok + i * t, tgt + i * t, pos.data<int32_t>() + i * t,
                                 seg.data<int32_t>() + i * t),
                     "dataset {} gave rows, then a plain sample", ds.describe());
      for (int64_t j = 0; j < t; ++j) b.valid_tokens += tgt[i * t + j] >= 0 ? 1 : 0;
    }
    b.positions = std::move(pos);
    b.seg_starts = std::move(seg);
    return b;
  }
  for (int64_t i = 0; i < batch_size; ++i) {
    ds.sample(first_sample + i, buf.data());
    for (int64_t j = 0; j < t; ++j) {
      // Padding (-1, Megatron's pad id for short validation samples) is input 0 and never a target.
      tok[i * t + j] = buf[j] < 0 ? 0 : buf[j];
      const bool masked = (eod_mask_loss && buf[j] == eod_id) || buf[j + 1] < 0;
      tgt[i * t + j] = masked ? -1 : buf[j + 1];
      b.valid_tokens += masked ? 0 : 1;
    }
  }
  return b;
}

DataLoader::DataLoader(std::shared_ptr<const TokenDataset> ds, int64_t batch_size, int64_t start,
                       int32_t eod_id, bool eod_mask_loss, int depth, LoaderStride stride)
    : ds_(std::move(ds)),
      batch_size_(batch_size),
      eod_(eod_id),
      eod_mask_(eod_mask_loss),
      depth_(depth),
      stride_(stride),
      consumed_(start),
      produced_(start) {
  PRIMUS_CHECK(stride.ranks >= 1 && stride.rank >= 0 && stride.rank < stride.ranks,
               "data loader: rank {} of {} data-parallel ranks", stride.rank, stride.ranks);
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
        first = produced_ + stride_.rank * batch_size_;
        produced_ += stride_.ranks * batch_size_;
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
  consumed_ += stride_.ranks * batch_size_;
  lock.unlock();
  cv_.notify_all();
  return b;
}

TokenizerSpec tokenizer_spec(const TrainConfig& cfg) {
  TokenizerSpec t;
  t.type = cfg.data.tokenizer_type;
  t.model = cfg.data.tokenizer_model;
  t.vocab_file = cfg.data.vocab_file;
  t.merge_file = cfg.data.merge_file;
  t.vocab_size = cfg.data.null_vocab_size;
  return t;
}

namespace {

struct SftFiles {
  std::vector<std::string> train, valid;
};

// sft_dataset_name's entries as files: a file as it is; a directory's <split>.jsonl (else every *.jsonl in
// it) and its validation.jsonl / valid.jsonl for the validation loss.
SftFiles resolve_sft_files(const SftConfig& sft) {
  namespace fs = std::filesystem;
  SftFiles out;
  for (const std::string& item : sft.data) {
    std::error_code ec;
    if (fs::is_directory(item, ec)) {
      const fs::path split_file = fs::path(item) / (sft.split + ".jsonl");
      std::string valid;
      for (const char* v : {"validation.jsonl", "valid.jsonl"})
        if (valid.empty() && fs::exists(fs::path(item) / v, ec) && fs::path(item) / v != split_file)
          valid = (fs::path(item) / v).string();
      if (!valid.empty()) out.valid.push_back(valid);
      if (fs::exists(split_file, ec)) {
        out.train.push_back(split_file.string());
        continue;
      }
      std::vector<std::string> files;
      for (const auto& e : fs::directory_iterator(item, ec))
        if (e.path().extension() == ".jsonl" && e.path().string() != valid)
          files.push_back(e.path().string());
      std::sort(files.begin(), files.end());
      if (files.empty())
        throw ConfigError(fmt::format("sft_dataset_name: the directory {} has no *.jsonl files", item));
      out.train.insert(out.train.end(), files.begin(), files.end());
    } else if (fs::exists(item, ec)) {
      out.train.push_back(item);
    } else {
      const bool hub = item.find('/') != std::string::npos && item.find('.') == std::string::npos &&
                       item.front() != '/' && item.front() != '.';
      throw ConfigError(
          fmt::format("sft_dataset_name '{}' is not a local file or directory", item),
          hub ? "it looks like a Hugging Face hub name: download the dataset as JSONL (e.g. with "
                "`datasets`' to_json) and give its path; `primus data sft-wordnet` writes a local "
                "corpus"
              : "give the path of a JSONL file or a directory of *.jsonl files");
    }
  }
  return out;
}

// Supervised fine-tuning: chat-formatted JSONL rendered with the tokenizer's chat template into rows
// (data/sft_dataset.h); validation from the dataset directory's validation file when there is one.
DataSources build_sft_sources(const TrainConfig& cfg, std::unique_ptr<Tokenizer> tokenizer) {
  DataSources src;
  src.tokenizer = std::move(tokenizer);
  src.eod_id = src.tokenizer->eod_id();
  data::SftDatasetOptions o;
  o.seq_length = cfg.data.seq_length;
  o.pack = cfg.sft.pack;
  o.seed = static_cast<uint64_t>(cfg.seed);
  o.format = data::parse_sft_format(cfg.sft.format.empty() ? "auto" : cfg.sft.format);
  o.tokenizer = src.tokenizer.get();
  o.tokenizer_model = cfg.data.tokenizer_model;
  const SftFiles files = resolve_sft_files(cfg.sft);
  o.paths = files.train;
  auto train = std::make_shared<data::SftDataset>(o);
  src.train = train;
  src.summary = fmt::format("{} ({}; {})", train->describe(), src.tokenizer->name(),
                            !cfg.sft.pack              ? "one sample per row"
                            : cfg.sft.packed_attention ? "samples isolated in their rows"
                                                       : "samples of a row see each other");
  if (files.valid.empty()) src.summary += "; no validation file";
  if (!files.valid.empty()) {
    o.paths = files.valid;
    o.name = "validation";
    src.valid = std::make_shared<data::SftDataset>(o);
  }
  return src;
}

}  // namespace

DataSources build_data_sources(const TrainConfig& cfg) {
  DataSources src;
  const int64_t seq = cfg.data.seq_length;
  if (cfg.sft.enabled) {
    auto tok = make_tokenizer(tokenizer_spec(cfg));
    const int64_t model_vocab = cfg.model.vocab_rows();
    if (model_vocab > 0 && tok->vocab_size() > model_vocab)
      throw ConfigError(
          fmt::format("vocab_size: the model has {} embedding rows but the tokenizer ({}) has {} ids",
                      model_vocab, tok->name(), tok->vocab_size()));
    return build_sft_sources(cfg, std::move(tok));
  }
  if (cfg.data.mock_data) {
    // Mock data needs no tokenizer (Megatron's needs one only for its vocabulary size, which the config has).
    const int64_t vocab = cfg.model.vocab_size;
    PRIMUS_CHECK(vocab > 0, "mock_data needs a vocabulary size (vocab_size or a known tokenizer)");
    src.train = std::make_shared<MockDataset>(vocab, seq, static_cast<uint64_t>(cfg.seed));
    src.valid = std::make_shared<MockDataset>(vocab, seq, static_cast<uint64_t>(cfg.seed) + 1);
    src.summary = fmt::format("mock data, vocab {}", vocab);
    return src;
  }
  src.tokenizer = make_tokenizer(tokenizer_spec(cfg));
  src.eod_id = src.tokenizer->eod_id();
  // The model's embedding must hold every id the tokenizer (and so the data) can produce.
  const int64_t model_vocab = cfg.model.vocab_rows();
  if (model_vocab > 0 && src.tokenizer->vocab_size() > model_vocab)
    throw ConfigError(
        fmt::format("vocab_size: the model has {} embedding rows but the tokenizer ({}) has {} ids",
                    model_vocab, src.tokenizer->name(), src.tokenizer->vocab_size()),
        "leave vocab_size null to take it from the tokenizer, or set it to at least the tokenizer's size");
  if (cfg.data.eod_mask_loss && src.eod_id < 0)
    throw ConfigError(
        fmt::format("eod_mask_loss: the tokenizer {} has no end-of-document token", src.tokenizer->name()));
  if (!cfg.data.text_data_path.empty()) {
    std::vector<std::string> docs = read_text_documents(cfg.data.text_data_path);
    SplitRanges r = split_documents(docs.size(), cfg.data.split);
    if (src.eod_id < 0)
      throw ConfigError(
          fmt::format("text_data_path: the tokenizer {} has no end-of-document token to separate "
                      "documents",
                      src.tokenizer->name()));
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
  const bool per_split = !cfg.data.train_data_path.empty() || !cfg.data.valid_data_path.empty() ||
                         !cfg.data.test_data_path.empty();
  if (!cfg.data.data_path.empty() || per_split) {
    if (!cfg.data.data_path.empty() && per_split)
      throw ConfigError(
          "data_path and train_data_path/valid_data_path/test_data_path are both set (rule: set one)");
    if (cfg.seed < 0 || cfg.seed > 0xffffffffll)
      throw ConfigError(
          fmt::format("seed: {} is outside [0, 2^32 - 1], numpy's RandomState range (the data "
                      "shuffles use it)",
                      cfg.seed));
    MegatronDataRequest req;
    req.data_path = cfg.data.data_path;
    req.split_path = {cfg.data.train_data_path, cfg.data.valid_data_path, cfg.data.test_data_path};
    req.split = cfg.data.split;
    req.num_samples = requested_samples(cfg.train_iters, cfg.global_batch_size, cfg.logging.eval_interval,
                                        cfg.logging.eval_iters);
    req.num_samples[2] = 0;  // the trainer has no test pass
    req.seq_length = seq;
    req.seed = static_cast<uint32_t>(cfg.seed);
    req.cache_dir = cfg.data.data_cache_path;
    req.vocab_limit = model_vocab;
    MegatronDataSplits s = build_megatron_datasets(req);
    src.train = s.split[0];
    src.valid = s.split[1];
    src.summary = fmt::format("{} | {}", s.summary, src.tokenizer->name());
    return src;
  }
  throw ConfigError(
      "no training data: set mock_data: true, data_path (Megatron .bin/.idx prefixes) or "
      "text_data_path (a text corpus)",
      "`primus data preprocess` turns jsonl/text into a data_path (docs/data.md)");
}

}  // namespace primus
