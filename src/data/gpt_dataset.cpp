#include "data/gpt_dataset.h"

#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "data/npy.h"
#include "data/numpy_random.h"

namespace primus {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------------------------
// Index construction (megatron/core/datasets/gpt_dataset.py and helpers.cpp)

namespace {

// _build_document_index: the documents repeated num_epochs times, shuffled (the last epoch separately when
// separate_final_epoch).
std::vector<int32_t> document_index(int64_t begin, int64_t end, int64_t epochs, NumpyRandomState& rng,
                                    bool separate_final_epoch) {
  if (!separate_final_epoch || epochs == 1) {
    std::vector<int32_t> idx;
    idx.reserve(static_cast<size_t>(epochs * (end - begin)));
    for (int64_t e = 0; e < epochs; ++e)
      for (int64_t d = begin; d < end; ++d) idx.push_back(static_cast<int32_t>(d));
    rng.shuffle(idx.data(), static_cast<int64_t>(idx.size()));
    return idx;
  }
  std::vector<int32_t> first = document_index(begin, end, epochs - 1, rng, false);
  std::vector<int32_t> last = document_index(begin, end, 1, rng, false);
  first.insert(first.end(), last.begin(), last.end());
  return first;
}

// helpers.cpp build_sample_idx with drop_last_partial_sequence = true and add_extra_token_to_sequence = 1.
std::vector<int64_t> sample_index(const std::vector<int32_t>& sizes, const std::vector<int32_t>& doc_idx,
                                  int64_t seq_length, int64_t epochs, int64_t tokens_per_epoch) {
  const int64_t num_samples = (epochs * tokens_per_epoch - 1) / seq_length;
  std::vector<int64_t> out(static_cast<size_t>(2 * (num_samples + 1)));
  int64_t row = 0, doc_pos = 0, doc_offset = 0;
  out[0] = 0;
  out[1] = 0;
  ++row;
  const int64_t last_pos = static_cast<int64_t>(doc_idx.size()) - 1;
  while (row <= num_samples) {
    int64_t remaining = seq_length + 1;
    while (remaining != 0) {
      const int64_t doc_len = sizes[static_cast<size_t>(doc_idx[static_cast<size_t>(doc_pos)])] - doc_offset;
      remaining -= doc_len;
      if (remaining <= 0) {
        doc_offset += remaining + doc_len - 1;  // the next sample starts on this sample's last token
        remaining = 0;
      } else {
        if (doc_pos == last_pos) {
          doc_offset = sizes[static_cast<size_t>(doc_idx[static_cast<size_t>(doc_pos)])] - 1;
          break;
        }
        ++doc_pos;
        doc_offset = 0;
      }
    }
    out[static_cast<size_t>(2 * row)] = doc_pos;
    out[static_cast<size_t>(2 * row + 1)] = doc_offset;
    ++row;
  }
  return out;
}

std::vector<int64_t> shuffle_index(int64_t num_samples, int64_t total, NumpyRandomState& rng) {
  std::vector<int64_t> out(static_cast<size_t>(total));
  // numpy shuffles uint32 arrays (int64 past 2^32 - 2); the element type does not change the permutation.
  for (int64_t i = 0; i < total; ++i) out[static_cast<size_t>(i)] = i;
  rng.shuffle(out.data(), num_samples);
  if (num_samples < total) rng.shuffle(out.data() + num_samples, total - num_samples);
  return out;
}

}  // namespace

GptIndices build_gpt_indices(const std::vector<int32_t>& lengths, int64_t doc_begin, int64_t doc_end,
                             std::optional<int64_t> num_samples, int64_t seq_length, uint32_t seed,
                             const std::string& what) {
  PRIMUS_CHECK(seq_length > 0, "seq_length must be positive");
  PRIMUS_CHECK(doc_begin >= 0 && doc_begin <= doc_end && doc_end <= static_cast<int64_t>(lengths.size()),
               "document range [{}, {}) outside [0, {})", doc_begin, doc_end, lengths.size());
  int64_t tokens_per_epoch = 0;
  for (int64_t d = doc_begin; d < doc_end; ++d) tokens_per_epoch += lengths[static_cast<size_t>(d)];
  if (tokens_per_epoch - 1 < seq_length) {
    throw ConfigError(fmt::format("{}: {} documents with {} tokens in all cannot fill one sample of "
                                  "seq_length {} + 1 tokens",
                                  what, doc_end - doc_begin, tokens_per_epoch, seq_length),
                      "lower seq_length, give this split more weight in `split`, or use more data");
  }
  GptIndices g;
  int64_t epochs = 1;
  if (num_samples) {
    const int64_t requested = *num_samples * seq_length + 1;
    for (int64_t tokens = tokens_per_epoch; tokens < requested; tokens += tokens_per_epoch) ++epochs;
  }
  int64_t sans_final = 0;
  if (epochs > 1) {
    sans_final = ((epochs - 1) * tokens_per_epoch - 1) / seq_length;
    const int64_t from_final = *num_samples - sans_final;
    const int64_t per_epoch = (tokens_per_epoch - 1) / seq_length;
    // The last epoch is shuffled on its own when it supplies fewer than 80% of an epoch's samples.
    g.separate_final_epoch = from_final < static_cast<int64_t>(0.80 * static_cast<double>(per_epoch));
  }
  g.num_epochs = epochs;
  NumpyRandomState rng(seed);
  g.document_index = document_index(doc_begin, doc_end, epochs, rng, g.separate_final_epoch);
  g.sample_index = sample_index(lengths, g.document_index, seq_length, epochs, tokens_per_epoch);
  const int64_t total = static_cast<int64_t>(g.sample_index.size() / 2) - 1;
  g.shuffle_index = shuffle_index(g.separate_final_epoch ? sans_final : total, total, rng);
  return g;
}

// ---------------------------------------------------------------------------------------------------------------
// GptDataset with its index cache

namespace {
std::string hash_hex(const std::string& s) {
  const XXH128_hash_t h = XXH3_128bits(s.data(), s.size());
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out) throw Error(ErrorKind::kRuntime, fmt::format("cannot write {}", tmp));
  }
  fs::rename(tmp, path);
}
}  // namespace

GptDataset::GptDataset(std::shared_ptr<const IndexedDataset> data, int64_t doc_begin, int64_t doc_end,
                       std::optional<int64_t> num_samples, const std::string& split_name,
                       const GptDatasetOptions& opt)
    : data_(std::move(data)),
      doc_begin_(doc_begin),
      doc_end_(doc_end),
      requested_(num_samples),
      split_name_(split_name),
      opt_(opt) {
  // What determines the indices: the data (path, size and a hash of its sequence lengths), the document
  // range, the sample count, the sequence length and the seed.
  const auto& lengths = data_->sequence_lengths();
  const XXH64_hash_t len_hash =
      XXH3_64bits(lengths.data() + doc_begin_, static_cast<size_t>(doc_end_ - doc_begin_) * sizeof(int32_t));
  nlohmann::ordered_json d;
  d["class"] = "GPTDataset";
  std::error_code ec;
  d["dataset_path"] = fs::absolute(data_->prefix(), ec).lexically_normal().string();
  d["idx_bytes"] = data_->idx_bytes();
  d["bin_bytes"] = data_->bin_bytes();
  d["sequence_lengths_xxh3"] = fmt::format("{:016x}", len_hash);
  d["index_split"] = split_name_;
  d["split"] = opt_.split_string;
  d["indices"] = {doc_begin_, doc_end_};
  d["num_samples"] = requested_ ? nlohmann::ordered_json(*requested_) : nlohmann::ordered_json(nullptr);
  d["sequence_length"] = opt_.seq_length;
  d["random_seed"] = opt_.seed;
  d["add_extra_token_to_sequence"] = true;
  d["format"] = "primus-c++ 1";
  description_ = d.dump(4);

  const std::string what = fmt::format("{} split of {}", split_name_, data_->prefix());
  std::string dir = opt_.cache_dir;
  if (dir.empty()) {
    fs::path parent = fs::path(data_->prefix()).parent_path();
    dir = ((parent.empty() ? fs::path(".") : parent) / "cache" / "GPTDataset_indices").string();
  }
  std::string base;
  if (opt_.use_cache) {
    base = (fs::path(dir) / fmt::format("{}-GPTDataset-{}", hash_hex(description_), split_name_)).string();
    if (try_load_cache(base)) {
      from_cache_ = true;
      cache_prefix_ = base;
      return;
    }
  }
  indices_ = build_gpt_indices(lengths, doc_begin_, doc_end_, requested_, opt_.seq_length, opt_.seed, what);
  if (opt_.use_cache) {
    try {
      fs::create_directories(dir);
      save_cache(base);
      cache_prefix_ = base;
    } catch (const std::exception& e) {
      // A read-only data directory must not stop training: the indices are rebuilt next time.
      log::warn(
          "data: cannot cache the {} indices under {} ({}); set data_cache_path to a writable directory",
          split_name_, dir, e.what());
    }
  }
}

bool GptDataset::try_load_cache(const std::string& base) {
  const std::string desc = base + "-description.txt";
  if (!fs::exists(desc)) return false;
  try {
    if (read_text(desc) != description_) throw std::runtime_error("description differs");
    const std::string p_doc = base + "-document_index.npy", p_sample = base + "-sample_index.npy",
                      p_shuffle = base + "-shuffle_index.npy";
    NpyArray doc = read_npy(p_doc), smp = read_npy(p_sample), shf = read_npy(p_shuffle);
    // Shapes and ranges, so that a damaged cache is rebuilt instead of producing wrong samples.
    if (doc.descr != "<i4" || doc.shape.size() != 1 || doc.count() == 0)
      throw std::runtime_error("document_index");
    if (smp.shape.size() != 2 || smp.shape[1] != 2 || smp.shape[0] < 2)
      throw std::runtime_error("sample_index");
    if (shf.shape.size() != 1 || shf.count() != smp.shape[0] - 1) throw std::runtime_error("shuffle_index");
    GptIndices g;
    g.document_index.resize(static_cast<size_t>(doc.count()));
    std::memcpy(g.document_index.data(), doc.data.data(), doc.data.size());
    g.sample_index = npy_as_int64(smp, p_sample);
    g.shuffle_index = npy_as_int64(shf, p_shuffle);
    const int64_t n = g.num_samples(), ndoc = static_cast<int64_t>(g.document_index.size());
    const auto& lengths = data_->sequence_lengths();
    for (int32_t v : g.document_index)
      if (v < doc_begin_ || v >= doc_end_) throw std::runtime_error("document id out of range");
    for (int64_t r = 0; r <= n; ++r) {
      const int64_t pos = g.sample_index[static_cast<size_t>(2 * r)],
                    off = g.sample_index[static_cast<size_t>(2 * r + 1)];
      if (pos < 0 || pos >= ndoc || off < 0 ||
          off > lengths[static_cast<size_t>(g.document_index[static_cast<size_t>(pos)])])
        throw std::runtime_error("sample_index entry out of range");
    }
    for (int64_t v : g.shuffle_index)
      if (v < 0 || v >= n) throw std::runtime_error("shuffle_index entry out of range");
    int64_t tokens = 0;
    for (int64_t d = doc_begin_; d < doc_end_; ++d) tokens += lengths[static_cast<size_t>(d)];
    g.num_epochs = tokens > 0 ? ndoc / std::max<int64_t>(1, doc_end_ - doc_begin_) : 0;
    indices_ = std::move(g);
    return true;
  } catch (const std::exception& e) {
    log::warn("data: index cache {}-* is invalid ({}); rebuilding it", base, e.what());
    return false;
  }
}

void GptDataset::save_cache(const std::string& base) const {
  const GptIndices& g = indices_;
  write_npy(base + "-document_index.npy", "<i4", {static_cast<int64_t>(g.document_index.size())},
            g.document_index.data(), g.document_index.size() * 4);
  // Megatron stores the sample index as int32 when its values fit, the shuffle index as uint32 below 2^32
  // - 2.
  const int64_t rows = static_cast<int64_t>(g.sample_index.size() / 2);
  const int64_t smax =
      g.sample_index.empty() ? 0 : *std::max_element(g.sample_index.begin(), g.sample_index.end());
  if (smax <= INT32_MAX) {
    std::vector<int32_t> v(g.sample_index.begin(), g.sample_index.end());
    write_npy(base + "-sample_index.npy", "<i4", {rows, 2}, v.data(), v.size() * 4);
  } else {
    write_npy(base + "-sample_index.npy", "<i8", {rows, 2}, g.sample_index.data(), g.sample_index.size() * 8);
  }
  if (static_cast<uint64_t>(rows - 1) < 0xffffffffull - 1) {
    std::vector<uint32_t> v(g.shuffle_index.begin(), g.shuffle_index.end());
    write_npy(base + "-shuffle_index.npy", "<u4", {g.num_samples()}, v.data(), v.size() * 4);
  } else {
    write_npy(base + "-shuffle_index.npy", "<i8", {g.num_samples()}, g.shuffle_index.data(),
              g.shuffle_index.size() * 8);
  }
  // The description goes last: its presence marks a complete cache entry.
  write_text_atomic(base + "-description.txt", description_);
}

void GptDataset::sample(int64_t index, int32_t* out) const {
  const int64_t n = num_samples();
  const int64_t idx = indices_.shuffle_index[static_cast<size_t>(index % n)];
  const int64_t beg = indices_.sample_index[static_cast<size_t>(2 * idx)];
  const int64_t beg_off = indices_.sample_index[static_cast<size_t>(2 * idx + 1)];
  const int64_t end = indices_.sample_index[static_cast<size_t>(2 * idx + 2)];
  const int64_t end_off = indices_.sample_index[static_cast<size_t>(2 * idx + 3)];
  const auto& lengths = data_->sequence_lengths();
  int64_t filled = 0;
  const int64_t want = opt_.seq_length + 1;
  for (int64_t i = beg; i <= end; ++i) {
    const int32_t doc = indices_.document_index[static_cast<size_t>(i)];
    const int64_t off = i == beg ? beg_off : 0;
    const int64_t stop = i == end ? end_off + 1 : lengths[static_cast<size_t>(doc)];
    const int64_t len = std::min(stop - off, want - filled);
    if (len <= 0) continue;
    data_->read(doc, off, len, out + filled, opt_.vocab_limit);
    filled += len;
  }
  // Megatron pads a short sample (only possible with drop_last_partial_validation_sequence = false) with -1,
  // which make_batch masks out of the loss.
  for (; filled < want; ++filled) out[filled] = -1;
}

std::string GptDataset::describe() const {
  return fmt::format("{} split of {}: documents [{}, {}), {} samples of {}+1, {} epoch(s){}", split_name_,
                     data_->prefix(), doc_begin_, doc_end_, num_samples(), opt_.seq_length,
                     indices_.num_epochs, from_cache_ ? ", indices from cache" : "");
}

// ---------------------------------------------------------------------------------------------------------------
// Blending

double numpy_sum(const std::vector<double>& v) {
  // numpy's pairwise_sum (loops_utils.h.src), which numpy.sum uses for float64.
  struct Rec {
    static double sum(const double* a, size_t n) {
      if (n < 8) {
        double r = 0.;
        for (size_t i = 0; i < n; ++i) r += a[i];
        return r;
      }
      if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; ++j) r[j] = a[j];
        size_t i = 8;
        for (; i < n - (n % 8); i += 8)
          for (int j = 0; j < 8; ++j) r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; ++i) res += a[i];
        return res;
      }
      size_t n2 = n / 2;
      n2 -= n2 % 8;
      return sum(a, n2) + sum(a + n2, n - n2);
    }
  };
  return Rec::sum(v.data(), v.size());
}

std::vector<double> normalize_weights(const std::vector<double>& w) {
  const double s = numpy_sum(w);
  std::vector<double> out(w.size());
  for (size_t i = 0; i < w.size(); ++i) out[i] = w[i] / s;
  return out;
}

void build_blending_indices(const std::vector<double>& weights, int64_t size,
                            std::vector<int16_t>* dataset_index, std::vector<int64_t>* dataset_sample_index) {
  const size_t nd = weights.size();
  std::vector<int64_t> taken(nd, 0);
  dataset_index->resize(static_cast<size_t>(size));
  dataset_sample_index->resize(static_cast<size_t>(size));
  for (int64_t s = 0; s < size; ++s) {
    const double sd = std::max(static_cast<double>(s), 1.0);
    size_t best = 0;
    double best_err = weights[0] * sd - static_cast<double>(taken[0]);
    for (size_t d = 1; d < nd; ++d) {
      const double err = weights[d] * sd - static_cast<double>(taken[d]);
      if (err > best_err) {
        best_err = err;
        best = d;
      }
    }
    (*dataset_index)[static_cast<size_t>(s)] = static_cast<int16_t>(best);
    (*dataset_sample_index)[static_cast<size_t>(s)] = taken[best];
    ++taken[best];
  }
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const TokenDataset>> datasets,
                               std::vector<double> weights, int64_t size, const std::string& description,
                               const std::string& cache_dir)
    : datasets_(std::move(datasets)), weights_(normalize_weights(weights)), size_(size) {
  PRIMUS_CHECK(!datasets_.empty() && datasets_.size() == weights_.size() && datasets_.size() < 32767,
               "a blend needs 1..32766 datasets with one weight each");
  PRIMUS_CHECK(size_ > 0, "a blend needs a positive size");
  std::string base;
  if (!cache_dir.empty()) {
    nlohmann::ordered_json d;
    d["class"] = "BlendedDataset";
    d["datasets"] = description;
    d["weights"] = weights_;
    d["size"] = size_;
    const std::string desc = d.dump(4);
    base = (fs::path(cache_dir) / fmt::format("{}-BlendedDataset", hash_hex(desc))).string();
    try {
      if (fs::exists(base + "-description.txt") && read_text(base + "-description.txt") == desc) {
        const std::string p1 = base + "-dataset_index.npy", p2 = base + "-dataset_sample_index.npy";
        NpyArray a = read_npy(p1), b = read_npy(p2);
        if (a.descr == "<i2" && a.count() == size_ && b.count() == size_) {
          dataset_index_.resize(static_cast<size_t>(size_));
          std::memcpy(dataset_index_.data(), a.data.data(), a.data.size());
          dataset_sample_index_ = npy_as_int64(b, p2);
          bool ok = true;
          for (int64_t i = 0; i < size_ && ok; ++i)
            ok = dataset_index_[i] >= 0 && static_cast<size_t>(dataset_index_[i]) < datasets_.size() &&
                 dataset_sample_index_[i] >= 0;
          if (ok) return;
        }
        log::warn("data: blend index cache {}-* is invalid; rebuilding it", base);
      }
    } catch (const std::exception& e) {
      log::warn("data: blend index cache {}-* is invalid ({}); rebuilding it", base, e.what());
    }
    build_blending_indices(weights_, size_, &dataset_index_, &dataset_sample_index_);
    try {
      fs::create_directories(cache_dir);
      write_npy(base + "-dataset_index.npy", "<i2", {size_}, dataset_index_.data(),
                dataset_index_.size() * 2);
      write_npy(base + "-dataset_sample_index.npy", "<i8", {size_}, dataset_sample_index_.data(),
                dataset_sample_index_.size() * 8);
      write_text_atomic(base + "-description.txt", desc);
    } catch (const std::exception& e) {
      log::warn("data: cannot cache the blend indices under {} ({})", cache_dir, e.what());
    }
    return;
  }
  build_blending_indices(weights_, size_, &dataset_index_, &dataset_sample_index_);
}

void BlendedDataset::sample(int64_t index, int32_t* out) const {
  const size_t i = static_cast<size_t>(index % size_);
  datasets_[static_cast<size_t>(dataset_index_[i])]->sample(dataset_sample_index_[i], out);
}

std::string BlendedDataset::describe() const {
  std::string parts;
  for (size_t i = 0; i < datasets_.size(); ++i)
    parts += fmt::format("{}  {:.4f} x {}", i == 0 ? "" : "\n", weights_[i], datasets_[i]->describe());
  return fmt::format("blend of {} datasets, {} samples:\n{}", datasets_.size(), size_, parts);
}

}  // namespace primus
