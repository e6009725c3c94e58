#include "data/megatron_data.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>

#include "core/error.h"
#include "core/log.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"

namespace primus {

namespace {
const char* kSplitNames[3] = {"train", "valid", "test"};

bool parse_number(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(*out);
}
}  // namespace

Blend parse_blend(const std::vector<std::string>& words, const std::string& key) {
  Blend b;
  if (words.empty()) return b;
  if (words.size() % 2 == 0) {
    std::vector<double> w;
    bool all_numbers = true;
    for (size_t i = 0; i < words.size(); i += 2) {
      double v = 0;
      if (!parse_number(words[i], &v)) {
        all_numbers = false;
        break;
      }
      w.push_back(v);
    }
    if (all_numbers) {
      for (size_t i = 0; i < words.size(); i += 2) {
        if (w[i / 2] < 0)
          throw ConfigError(fmt::format("{}: weight {} of '{}' is negative", key, words[i], words[i + 1]));
        b.prefixes.push_back(words[i + 1]);
      }
      if (numpy_sum(w) <= 0) throw ConfigError(fmt::format("{}: the blend weights sum to 0", key));
      b.weights = w;
      return b;
    }
  }
  // Plain prefixes. A number among them is a mistake (an odd count of "w p" words).
  for (const std::string& w : words) {
    double v = 0;
    if (parse_number(w, &v))
      throw ConfigError(
          fmt::format("{}: '{}' looks like a blend weight, but the words do not pair up as \"weight prefix\" "
                      "({} words)",
                      key, w, words.size()),
          "write \"0.3 /data/a_text_document 0.7 /data/b_text_document\" or a list of prefixes");
    b.prefixes.push_back(w);
  }
  return b;
}

std::array<std::optional<Bookend>, 3> split_matrix(const std::string& split) {
  // parse_and_normalize_split: every run of [.0-9] is a number.
  std::vector<double> w;
  static const std::regex kNum("[.0-9]+");
  for (auto it = std::sregex_iterator(split.begin(), split.end(), kNum); it != std::sregex_iterator(); ++it) {
    double v = 0;
    if (!parse_number(it->str(), &v))
      throw ConfigError(fmt::format("split: '{}' is not a list of numbers like \"99,1,0\"", split));
    w.push_back(v);
  }
  if (w.empty() || w.size() > 3 || numpy_sum(w) <= 0)
    throw ConfigError(
        fmt::format("split: '{}' needs one to three non-negative weights with a positive sum", split),
        "e.g. split: \"99,1,0\" (train, valid, test)");
  while (w.size() < 3) w.push_back(0.0);
  w = normalize_weights(w);
  // convert_split_vector_to_split_matrix: cumulative bookends; an empty range is no split.
  std::array<std::optional<Bookend>, 3> m;
  double acc = 0;
  for (int i = 0; i < 3; ++i) {
    const double beg = acc;
    acc = acc + w[static_cast<size_t>(i)];
    if (acc - beg != 0) m[static_cast<size_t>(i)] = Bookend{beg, acc};
  }
  return m;
}

std::pair<int64_t, int64_t> split_range(const Bookend& b, int64_t n) {
  // Python's round() is round-half-to-even, which is nearbyint's default rounding mode.
  const double dn = static_cast<double>(n);
  return {static_cast<int64_t>(std::nearbyint(b.begin * dn)),
          static_cast<int64_t>(std::nearbyint(b.end * dn))};
}

std::array<int64_t, 3> requested_samples(int64_t train_iters, int64_t global_batch, int64_t eval_interval,
                                         int64_t eval_iters) {
  std::array<int64_t, 3> s{train_iters * global_batch, 0, 0};
  if (eval_interval > 0 && eval_iters > 0)
    s[1] = (train_iters / eval_interval + 1) * eval_iters * global_batch;
  s[2] = eval_iters * global_batch;
  return s;
}

namespace {

class Builder {
 public:
  explicit Builder(const MegatronDataRequest& req) : req_(req) {}

  std::shared_ptr<const IndexedDataset> open(const std::string& prefix, const std::string& key) {
    auto it = open_.find(prefix);
    if (it != open_.end()) return it->second;
    for (const char* ext : {".idx", ".bin"}) {
      if (!std::filesystem::exists(prefix + ext)) {
        std::string hint = "a dataset is named by its prefix: <prefix>.bin + <prefix>.idx";
        if (prefix.ends_with(".bin") || prefix.ends_with(".idx"))
          hint = fmt::format("drop the extension: {}", prefix.substr(0, prefix.size() - 4));
        else
          hint += "; `primus data preprocess --output-prefix P` writes P_text_document.{bin,idx}";
        throw ConfigError(fmt::format("{}: {}{} does not exist", key, prefix, ext), hint);
      }
    }
    auto ds = std::make_shared<const IndexedDataset>(prefix);
    open_[prefix] = ds;
    return ds;
  }

  GptDatasetOptions options() const {
    GptDatasetOptions o;
    o.seq_length = req_.seq_length;
    o.seed = req_.seed;
    o.vocab_limit = req_.vocab_limit;
    o.cache_dir = req_.cache_dir;
    o.split_string = req_.split;
    return o;
  }

  // One GPTDataset: documents `range` (fractions) of `prefix`, `num_samples` samples (null: one epoch).
  std::shared_ptr<const GptDataset> gpt(const std::string& prefix, const Bookend& range,
                                        std::optional<int64_t> num_samples, int split,
                                        const std::string& key) {
    auto ds = open(prefix, key);
    // One sequence per document in text data; Megatron splits GPT data by sequence.
    auto [beg, end] = split_range(range, ds->num_sequences());
    if (end <= beg)
      throw ConfigError(fmt::format("{}: the {} split of {} is empty ({} documents, split '{}')", key,
                                    kSplitNames[split], prefix, ds->num_sequences(), req_.split),
                        "give the split more weight or use more documents");
    auto g = std::make_shared<const GptDataset>(ds, beg, end, num_samples, kSplitNames[split], options());
    log::debug("data: {}", g->describe());
    return g;
  }

  // The dataset of one split from a blend, as _build_blended_dataset_splits does.
  std::shared_ptr<const TokenDataset> split_dataset(const Blend& blend, const Bookend& range, int split,
                                                    const std::string& key) {
    const int64_t target = req_.num_samples[static_cast<size_t>(split)];
    if (blend.prefixes.size() == 1 && !blend.weights)
      return gpt(blend.prefixes[0], range, target, split, key);
    std::vector<std::shared_ptr<const TokenDataset>> parts;
    std::vector<double> weights;
    int64_t size = 0;
    std::string desc;
    if (blend.weights) {
      const std::vector<double> w = normalize_weights(*blend.weights);
      for (size_t d = 0; d < blend.prefixes.size(); ++d) {
        // Each dataset supplies ceil(target x w) samples and is built 0.5% larger
        // (mid_level_dataset_surplus).
        const int64_t want = static_cast<int64_t>(std::ceil(static_cast<double>(target) * w[d]));
        const int64_t buffer = static_cast<int64_t>(std::ceil(static_cast<double>(want) * 1.005));
        auto g = gpt(blend.prefixes[d], range, buffer, split, key);
        desc += g->description();
        parts.push_back(g);
        size += want;
      }
      weights = w;
    } else {
      for (const std::string& p : blend.prefixes) {
        auto g = gpt(p, range, std::nullopt, split, key);
        desc += g->description();
        weights.push_back(static_cast<double>(g->num_samples()));
        size += g->num_samples();
        parts.push_back(g);
      }
      size = std::min(size, target);
    }
    return std::make_shared<const BlendedDataset>(parts, weights, size, desc, req_.cache_dir);
  }

 private:
  const MegatronDataRequest& req_;
  std::map<std::string, std::shared_ptr<const IndexedDataset>> open_;
};

std::string split_summary(const std::shared_ptr<const TokenDataset>& ds) {
  return ds ? fmt::format("{} samples", ds->num_samples()) : std::string("none");
}

}  // namespace

MegatronDataSplits build_megatron_datasets(const MegatronDataRequest& req) {
  PRIMUS_CHECK(req.seq_length > 0, "seq_length must be positive");
  Builder b(req);
  MegatronDataSplits out;
  std::string source;
  if (!req.data_path.empty()) {
    const Blend blend = parse_blend(req.data_path, "data_path");
    const auto matrix = split_matrix(req.split);
    for (int i = 0; i < 3; ++i) {
      if (!matrix[static_cast<size_t>(i)] || req.num_samples[static_cast<size_t>(i)] <= 0) continue;
      out.split[static_cast<size_t>(i)] =
          b.split_dataset(blend, *matrix[static_cast<size_t>(i)], i, "data_path");
    }
    source = blend.prefixes.size() == 1 ? blend.prefixes[0]
                                        : fmt::format("a blend of {} datasets", blend.prefixes.size());
    source += fmt::format(", split {}", req.split);
  } else {
    const char* keys[3] = {"train_data_path", "valid_data_path", "test_data_path"};
    for (int i = 0; i < 3; ++i) {
      const auto& words = req.split_path[static_cast<size_t>(i)];
      if (words.empty() || req.num_samples[static_cast<size_t>(i)] <= 0) continue;
      const Blend blend = parse_blend(words, keys[i]);
      out.split[static_cast<size_t>(i)] = b.split_dataset(blend, Bookend{0.0, 1.0}, i, keys[i]);
    }
    if (!out.split[0])
      throw ConfigError("train_data_path is empty: set data_path (with split) or train_data_path");
    source = "per-split paths";
  }
  out.summary = fmt::format("Megatron indexed data ({}): train {}, valid {}", source,
                            split_summary(out.split[0]), split_summary(out.split[1]));
  return out;
}

}  // namespace primus
