// GPTDataset / BlendedDataset as Megatron samples them (reference.md §1.2): numpy's RandomState shuffle bit
// for bit, samples of seq_length + 1 tokens that are windows of the shuffled document stream, epochs and the
// separate final epoch, split bookends, blend ratios, index caches keyed by what determines them, and a
// sample stream that depends only on the consumed-sample count (resume at another batch layout).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "data/data_loader.h"
#include "data/gpt_dataset.h"
#include "data/megatron_data.h"
#include "data/numpy_random.h"
#include "data_test_util.h"

namespace primus {
namespace {

using data_test::error_of;
using data_test::numbered_docs;
using data_test::ScratchDir;
using data_test::write_dataset;

std::vector<int32_t> sample_of(const TokenDataset& ds, int64_t i) {
  std::vector<int32_t> s(static_cast<size_t>(ds.seq_length() + 1));
  ds.sample(i, s.data());
  return s;
}

TEST(NumpyRandomState, ShuffleEqualsNumpy) {
  // numpy 1.24: r = numpy.random.RandomState(seed); a = numpy.arange(n); r.shuffle(a)
  NumpyRandomState r(1234);
  std::vector<uint32_t> a(20);
  for (uint32_t i = 0; i < 20; ++i) a[i] = i;
  r.shuffle(a.data(), 20);
  EXPECT_EQ(a, (std::vector<uint32_t>{3, 13, 2, 16, 14, 5, 4, 0, 8, 18, 17, 11, 10, 9, 7, 1, 19, 12, 6, 15}));
  NumpyRandomState r0(0);
  std::vector<int32_t> b{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, c{0, 1, 2, 3, 4, 5, 6};
  r0.shuffle(b.data(), 10);
  r0.shuffle(c.data(), 7);  // the second shuffle continues the same stream
  EXPECT_EQ(b, (std::vector<int32_t>{2, 8, 4, 9, 1, 6, 7, 3, 0, 5}));
  EXPECT_EQ(c, (std::vector<int32_t>{3, 1, 2, 6, 5, 0, 4}));
}

TEST(GptIndices, SamplesAreWindowsOfTheShuffledDocumentStream) {
  const auto docs = numbered_docs(40, 1, 30);
  std::vector<int32_t> lengths;
  for (const auto& d : docs) lengths.push_back(static_cast<int32_t>(d.size()));
  const int64_t seq = 16;
  const GptIndices g = build_gpt_indices(lengths, 5, 35, std::nullopt, seq, 77, "test");
  EXPECT_EQ(g.num_epochs, 1);
  std::vector<int32_t> stream;
  for (int32_t d : g.document_index) {
    EXPECT_TRUE(d >= 5 && d < 35);
    stream.insert(stream.end(), docs[static_cast<size_t>(d)].begin(), docs[static_cast<size_t>(d)].end());
  }
  // (tokens - 1) / seq samples; each starts on the last token of the previous one.
  EXPECT_EQ(g.num_samples(), (static_cast<int64_t>(stream.size()) - 1) / seq);
  for (int64_t r = 0; r <= g.num_samples(); ++r) {
    int64_t pos = 0;
    for (int64_t i = 0; i < g.sample_index[static_cast<size_t>(2 * r)]; ++i)
      pos += lengths[static_cast<size_t>(g.document_index[static_cast<size_t>(i)])];
    EXPECT_EQ(pos + g.sample_index[static_cast<size_t>(2 * r + 1)], r * seq) << "sample_index row " << r;
  }
  std::vector<int64_t> sorted = g.shuffle_index;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < g.num_samples(); ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)], i);
}

TEST(GptDataset, SampleTokensComeFromTheStream) {
  ScratchDir dir;
  const auto docs = numbered_docs(30, 1, 50);
  auto data = std::make_shared<const IndexedDataset>(write_dataset(dir.path("d"), docs));
  GptDatasetOptions opt;
  opt.seq_length = 8;
  opt.seed = 3;
  opt.use_cache = false;
  GptDataset ds(data, 0, 30, std::nullopt, "train", opt);
  std::vector<int32_t> stream;
  for (int32_t d : ds.indices().document_index)
    stream.insert(stream.end(), docs[static_cast<size_t>(d)].begin(), docs[static_cast<size_t>(d)].end());
  for (int64_t i = 0; i < ds.num_samples(); ++i) {
    const int64_t r = ds.indices().shuffle_index[static_cast<size_t>(i)];
    const std::vector<int32_t> want(stream.begin() + r * 8, stream.begin() + r * 8 + 9);
    EXPECT_EQ(sample_of(ds, i), want) << "sample " << i;
  }
  // Past the end the samples wrap around.
  EXPECT_EQ(sample_of(ds, ds.num_samples() + 2), sample_of(ds, 2));
}

TEST(GptIndices, EpochsAndSeparateFinalEpoch) {
  std::vector<int32_t> lengths(10, 10);  // 100 tokens per epoch: 12 samples of 8 + 1 per epoch
  const int64_t seq = 8;
  // 2 epochs and 13 samples: the second epoch supplies 1 sample (< 80% of 12): shuffled separately.
  GptIndices g = build_gpt_indices(lengths, 0, 10, 13, seq, 1, "t");
  EXPECT_EQ(g.num_epochs, 2);
  EXPECT_TRUE(g.separate_final_epoch);
  EXPECT_EQ(g.num_samples(), (200 - 1) / 8);
  const int64_t sans_final = (100 - 1) / 8;
  for (int64_t i = 0; i < g.num_samples(); ++i)
    EXPECT_EQ(g.shuffle_index[static_cast<size_t>(i)] < sans_final, i < sans_final) << i;
  for (int e = 0; e < 2; ++e) {  // each epoch's documents are a permutation of the documents
    std::vector<int32_t> ep(g.document_index.begin() + 10 * e, g.document_index.begin() + 10 * (e + 1));
    std::sort(ep.begin(), ep.end());
    for (int i = 0; i < 10; ++i) EXPECT_EQ(ep[static_cast<size_t>(i)], i);
  }
  // 23 samples: the second epoch supplies 11 (>= 80%): one shuffle over both epochs.
  g = build_gpt_indices(lengths, 0, 10, 23, seq, 1, "t");
  EXPECT_EQ(g.num_epochs, 2);
  EXPECT_FALSE(g.separate_final_epoch);
  // Too few tokens for one sample is a config error naming the split.
  const std::string msg = error_of([&] { build_gpt_indices({3, 2}, 0, 2, std::nullopt, 8, 1, "valid x"); });
  EXPECT_NE(msg.find("valid x: 2 documents with 5 tokens"), std::string::npos) << msg;
}

TEST(MegatronSplits, BookendsAndRounding) {
  auto m = split_matrix("99,1,0");
  ASSERT_TRUE(m[0] && m[1]);
  EXPECT_FALSE(m[2]);
  EXPECT_DOUBLE_EQ(m[0]->end, 0.99);
  EXPECT_EQ(split_range(*m[0], 1000), (std::pair<int64_t, int64_t>{0, 990}));
  EXPECT_EQ(split_range(*m[1], 1000), (std::pair<int64_t, int64_t>{990, 1000}));
  m = split_matrix("969, 30, 1");
  EXPECT_EQ(split_range(*m[2], 1000), (std::pair<int64_t, int64_t>{999, 1000}));
  m = split_matrix("1,1");  // two weights: test gets nothing; round half to even as Python
  EXPECT_EQ(split_range(*m[0], 5), (std::pair<int64_t, int64_t>{0, 2}));
  EXPECT_EQ(split_range(*m[1], 5), (std::pair<int64_t, int64_t>{2, 5}));
  EXPECT_FALSE(m[2]);
  EXPECT_NE(error_of([] { split_matrix("0,0,0"); }), "");
  EXPECT_NE(error_of([] { split_matrix("1,2,3,4"); }), "");
}

TEST(MegatronSplits, BlendParsing) {
  Blend b = parse_blend({"0.3", "/a", "0.7", "/b"}, "data_path");
  EXPECT_EQ(b.prefixes, (std::vector<std::string>{"/a", "/b"}));
  ASSERT_TRUE(b.weights);
  EXPECT_EQ(*b.weights, (std::vector<double>{0.3, 0.7}));
  b = parse_blend({"/a", "/b"}, "data_path");
  EXPECT_FALSE(b.weights);
  const std::string msg = error_of([] { parse_blend({"0.3", "/a", "/b"}, "data_path"); });
  EXPECT_NE(msg.find("data_path: '0.3' looks like a blend weight"), std::string::npos) << msg;
  EXPECT_NE(error_of([] { parse_blend({"-1", "/a", "2", "/b"}, "data_path"); }), "");
}

TEST(BlendedDataset, RatiosWithinOnePercentOver10kSamples) {
  ScratchDir dir;
  // Three datasets whose tokens tell them apart: dataset k holds ids in [10000 k, 10000 k + 1000).
  std::vector<std::string> words;
  const std::vector<double> w{0.2, 0.3, 0.5};
  for (int k = 0; k < 3; ++k) {
    auto docs = numbered_docs(60, 5, 80, 1000);
    for (auto& d : docs)
      for (auto& t : d) t += 10000 * k;
    words.push_back(fmt::format("{}", w[static_cast<size_t>(k)]));
    words.push_back(write_dataset(dir.path(fmt::format("set{}", k)), docs));
  }
  MegatronDataRequest req;
  req.data_path = words;
  req.split = "99,1,0";
  req.num_samples = {10000, 0, 0};
  req.seq_length = 32;
  req.cache_dir = dir.path("cache");
  const MegatronDataSplits s = build_megatron_datasets(req);
  ASSERT_TRUE(s.split[0]);
  EXPECT_FALSE(s.split[1]);  // no valid samples requested
  ASSERT_EQ(s.split[0]->num_samples(), 10000);
  std::map<int, int64_t> counts;
  for (int64_t i = 0; i < 10000; ++i) {
    const std::vector<int32_t> smp = sample_of(*s.split[0], i);
    const int k = smp[0] / 10000;
    for (int32_t t : smp) ASSERT_EQ(t / 10000, k) << "sample " << i << " mixes datasets";
    ++counts[k];
  }
  for (int k = 0; k < 3; ++k)
    EXPECT_NEAR(static_cast<double>(counts[k]) / 10000.0, w[static_cast<size_t>(k)], 0.01) << "dataset " << k;
  // The same request again reads the blend (and each dataset's) indices from the cache: same stream.
  const MegatronDataSplits again = build_megatron_datasets(req);
  for (int64_t i = 0; i < 10000; i += 97) EXPECT_EQ(sample_of(*again.split[0], i), sample_of(*s.split[0], i));
}

TEST(BlendedDataset, GreedyOrderIsMegatrons) {
  std::vector<int16_t> di;
  std::vector<int64_t> dsi;
  build_blending_indices({0.25, 0.75}, 8, &di, &dsi);
  // s' = max(s, 1); pick argmax w_d s' - taken_d, the lower index on ties.
  EXPECT_EQ(di, (std::vector<int16_t>{1, 0, 1, 1, 0, 1, 1, 1}));
  EXPECT_EQ(dsi, (std::vector<int64_t>{0, 0, 1, 2, 1, 3, 4, 5}));
}

// ---- index cache ------------------------------------------------------------------------------------------

std::shared_ptr<const GptDataset> make_gpt(const std::shared_ptr<const IndexedDataset>& data, int64_t seq,
                                           uint32_t seed, const std::string& split, const std::string& cache,
                                           std::optional<int64_t> n = std::nullopt, int64_t end = 50) {
  GptDatasetOptions o;
  o.seq_length = seq;
  o.seed = seed;
  o.split_string = split;
  o.cache_dir = cache;
  return std::make_shared<const GptDataset>(data, 0, end, n, "train", o);
}

TEST(GptDatasetCache, KeyedByWhatDeterminesTheIndices) {
  ScratchDir dir;
  auto data = std::make_shared<const IndexedDataset>(write_dataset(dir.path("d"), numbered_docs(50, 1, 40)));
  const std::string cache = dir.path("cache");
  auto a = make_gpt(data, 16, 1234, "99,1,0", cache);
  EXPECT_FALSE(a->loaded_from_cache());
  ASSERT_NE(a->cache_prefix(), "");
  for (const char* f : {"-description.txt", "-document_index.npy", "-sample_index.npy", "-shuffle_index.npy"})
    EXPECT_TRUE(std::filesystem::exists(a->cache_prefix() + f)) << f;
  auto same = make_gpt(data, 16, 1234, "99,1,0", cache);
  EXPECT_TRUE(same->loaded_from_cache());
  EXPECT_EQ(same->cache_prefix(), a->cache_prefix());
  EXPECT_EQ(same->indices().document_index, a->indices().document_index);
  EXPECT_EQ(same->indices().sample_index, a->indices().sample_index);
  EXPECT_EQ(same->indices().shuffle_index, a->indices().shuffle_index);
  // Each input that changes the indices changes the key.
  std::set<std::string> keys{a->cache_prefix()};
  for (auto other :
       {make_gpt(data, 16, 1235, "99,1,0", cache), make_gpt(data, 32, 1234, "99,1,0", cache),
        make_gpt(data, 16, 1234, "98,2,0", cache), make_gpt(data, 16, 1234, "99,1,0", cache, 500),
        make_gpt(data, 16, 1234, "99,1,0", cache, std::nullopt, 49)}) {
    EXPECT_FALSE(other->loaded_from_cache());
    EXPECT_TRUE(keys.insert(other->cache_prefix()).second) << other->cache_prefix();
  }
  EXPECT_NE(make_gpt(data, 16, 1235, "99,1,0", cache)->indices().shuffle_index, a->indices().shuffle_index);
}

TEST(GptDatasetCache, DamagedCacheIsRebuilt) {
  ScratchDir dir;
  auto data = std::make_shared<const IndexedDataset>(write_dataset(dir.path("d"), numbered_docs(50, 1, 40)));
  auto a = make_gpt(data, 16, 7, "1", dir.path("cache"));
  const std::string shuffle = a->cache_prefix() + "-shuffle_index.npy";
  std::string bytes = data_test::read_bytes(shuffle);
  bytes.resize(bytes.size() - 4);
  data_test::write_bytes(shuffle, bytes);
  auto b = make_gpt(data, 16, 7, "1", dir.path("cache"));
  EXPECT_FALSE(b->loaded_from_cache());
  EXPECT_EQ(b->indices().shuffle_index, a->indices().shuffle_index);
  EXPECT_TRUE(make_gpt(data, 16, 7, "1", dir.path("cache"))->loaded_from_cache());
}

// ---- the stream depends only on consumed samples ----------------------------------------------------------

std::vector<std::vector<int32_t>> stream_from(std::shared_ptr<const TokenDataset> ds, int64_t batch,
                                              int64_t start, int64_t batches) {
  DataLoader loader(ds, batch, start, /*eod_id=*/0, /*eod_mask_loss=*/false);
  std::vector<std::vector<int32_t>> rows;
  const int64_t t = ds->seq_length();
  for (int64_t b = 0; b < batches; ++b) {
    Batch x = loader.next();
    EXPECT_EQ(x.first_sample, start + b * batch);
    for (int64_t i = 0; i < batch; ++i) {
      std::vector<int32_t> row(x.tokens.data<int32_t>() + i * t, x.tokens.data<int32_t>() + (i + 1) * t);
      row.push_back(x.targets.data<int32_t>()[(i + 1) * t - 1]);
      rows.push_back(row);
    }
  }
  EXPECT_EQ(loader.consumed_samples(), start + batches * batch);
  return rows;
}

TEST(DataLoader, ResumeAtConsumedSamplesContinuesTheSameStream) {
  ScratchDir dir;
  const std::string a = write_dataset(dir.path("a"), numbered_docs(80, 3, 60));
  const std::string b = write_dataset(dir.path("b"), numbered_docs(50, 3, 60));
  MegatronDataRequest req;
  req.data_path = {"0.4", a, "0.6", b};
  req.split = "90,10,0";
  req.num_samples = {400, 40, 0};
  req.seq_length = 16;
  req.cache_dir = dir.path("cache");
  auto train = build_megatron_datasets(req).split[0];
  // Uninterrupted: 30 batches of 8. Resumed at consumed-sample k = 96 with batches of 8, and at k = 100 with
  // micro-batches of 4 (another layout): each continues the uninterrupted stream exactly.
  const auto full = stream_from(train, 8, 0, 30);
  for (auto [batch, k] : {std::pair<int64_t, int64_t>{8, 96}, {4, 100}, {2, 238}, {16, 0}}) {
    const int64_t n = (240 - k) / batch;
    const auto resumed = stream_from(build_megatron_datasets(req).split[0], batch, k, n);
    ASSERT_EQ(resumed.size(), static_cast<size_t>(n * batch));
    for (size_t i = 0; i < resumed.size(); ++i)
      ASSERT_EQ(resumed[i], full[static_cast<size_t>(k) + i]) << "batch " << batch << " from " << k;
  }
}

TEST(DataLoader, DataParallelRanksInterleaveTheGlobalStream) {
  // Rank d of D reads the global micro-batches d, d + D, d + 2D, ...: together, in global order, the one-rank
  // stream; each rank's consumed_samples() counts every rank's samples.
  ScratchDir dir;
  auto data = std::make_shared<const IndexedDataset>(write_dataset(dir.path("d"), numbered_docs(40, 3, 30)));
  GptDatasetOptions o;
  o.seq_length = 8;
  o.use_cache = false;
  auto ds = std::make_shared<const GptDataset>(data, 0, 40, std::nullopt, "train", o);
  const int64_t mbs = 2, start = 6, per_rank = 5;
  for (int D : {1, 2, 3}) {
    DataLoader whole(ds, mbs, start, 0, false);
    std::vector<DataLoader*> ranks;
    std::vector<std::unique_ptr<DataLoader>> own;
    for (int d = 0; d < D; ++d) {
      own.push_back(std::make_unique<DataLoader>(ds, mbs, start, 0, false, 3, LoaderStride{D, d}));
      ranks.push_back(own.back().get());
    }
    for (int64_t k = 0; k < per_rank; ++k)
      for (int d = 0; d < D; ++d) {
        Batch mine = ranks[d]->next(), ref = whole.next();
        ASSERT_EQ(mine.first_sample, ref.first_sample) << D << " ranks, rank " << d << ", batch " << k;
        ASSERT_EQ(mine.tokens.to_vector<int32_t>(), ref.tokens.to_vector<int32_t>());
        ASSERT_EQ(mine.targets.to_vector<int32_t>(), ref.targets.to_vector<int32_t>());
      }
    for (int d = 0; d < D; ++d) EXPECT_EQ(ranks[d]->consumed_samples(), start + per_rank * D * mbs);
  }
  EXPECT_THROW(DataLoader(ds, mbs, 0, 0, false, 2, LoaderStride{2, 2}), Error);
}

TEST(DataLoader, LoaderThreadErrorsReachTheTrainer) {
  ScratchDir dir;
  auto data = std::make_shared<const IndexedDataset>(write_dataset(dir.path("d"), numbered_docs(10, 20, 30)));
  GptDatasetOptions o;
  o.seq_length = 8;
  o.use_cache = false;
  o.vocab_limit = 5;  // the tokens are larger: the background thread must report it, not crash
  auto ds = std::make_shared<const GptDataset>(data, 0, 10, std::nullopt, "train", o);
  DataLoader loader(ds, 2, 0, 0, false);
  const std::string msg = error_of([&] { loader.next(); });
  EXPECT_NE(msg.find("is not an id of the vocabulary [0, 5)"), std::string::npos) << msg;
}

}  // namespace
}  // namespace primus
