#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "data/data_loader.h"
#include "model/param_store.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/optimizer.h"

using namespace primus;

TEST(LrSchedule, WarmupThenCosineToMinLr) {
  LrSchedule s(1e-3, 1e-4, 10, 110, "cosine");
  EXPECT_DOUBLE_EQ(s.at(1), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);
  EXPECT_NEAR(s.at(60), 0.5 * (1e-3 + 1e-4), 1e-12);  // half way through the decay
  EXPECT_NEAR(s.at(110), 1e-4, 1e-15);
  EXPECT_DOUBLE_EQ(s.at(500), 1e-4);
}

TEST(LrSchedule, LinearAndConstant) {
  LrSchedule lin(2.0, 0.0, 0, 100, "linear");
  EXPECT_DOUBLE_EQ(lin.at(25), 1.5);
  LrSchedule con(3.0, 0.0, 4, 100, "constant");
  EXPECT_DOUBLE_EQ(con.at(2), 1.5);
  EXPECT_DOUBLE_EQ(con.at(90), 3.0);
  EXPECT_THROW(LrSchedule(1, 0, 0, 1, "inverse-square-root"), ConfigError);
}

// WSD (Megatron's lr_wsd_*): warm-up, the peak lr until the anneal's start (lr_decay_iters - wsd), then each
// anneal shape from lr to min_lr; min_lr after lr_decay_iters.
TEST(LrSchedule, WarmupStableDecayShapes) {
  const double lr = 1.0, lo = 0.1, half = 0.5;
  const std::pair<const char*, double> shapes[] = {{"linear", half},
                                                   {"cosine", half},
                                                   {"exponential", 2.0 * std::pow(0.5, half) - 1.0},
                                                   {"minus_sqrt", 1.0 - std::sqrt(half)}};
  for (const auto& [shape, coeff] : shapes) {
    SCOPED_TRACE(shape);
    LrSchedule s(lr, lo, 10, 100, "WSD", 20, shape);
    EXPECT_DOUBLE_EQ(s.at(5), 0.5);
    EXPECT_DOUBLE_EQ(s.at(11), lr);
    EXPECT_DOUBLE_EQ(s.at(80), lr) << "the anneal starts after iteration 80";
    EXPECT_NEAR(s.at(90), lo + coeff * (lr - lo), 1e-12);
    EXPECT_NEAR(s.at(100), lo, 1e-12);
    EXPECT_DOUBLE_EQ(s.at(101), lo);
    EXPECT_GT(s.at(81), s.at(89));
  }
  EXPECT_THROW(LrSchedule(1, 0, 10, 100, "WSD", 0, "linear"), ConfigError);
  EXPECT_THROW(LrSchedule(1, 0, 10, 100, "WSD", 91, "linear"), ConfigError);
  EXPECT_THROW(LrSchedule(1, 0, 10, 100, "WSD", 20, "square"), ConfigError);
}

TEST(Clip, CoefficientOnlyShrinks) {
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0f);
  EXPECT_NEAR(clip_coefficient(4.0, 1.0), 0.25f, 1e-6);
  EXPECT_EQ(clip_coefficient(4.0, 0.0), 1.0f);
}

TEST(ParamStore, RegionsAreContiguousAndDecayFirst) {
  ModelConfig m;
  m.num_layers = 3;
  m.hidden_size = 32;
  m.ffn_hidden_size = 64;
  m.num_attention_heads = 4;
  m.num_query_groups = 2;
  m.kv_channels = 8;
  m.vocab_size = m.padded_vocab_size = 50;
  m.qk_layernorm = true;
  ParamStore ps(ModelSpec::from_config(m));
  ASSERT_EQ(ps.regions().size(), 5u);
  for (size_t r = 1; r < ps.regions().size(); ++r) EXPECT_EQ(ps.regions()[r].begin, ps.regions()[r - 1].end);
  for (const auto& e : ps.entries()) {
    const auto& r = ps.regions()[e.region];
    EXPECT_EQ(e.offset % 64, 0) << e.name;
    if (e.decay) {
      EXPECT_LE(e.offset + e.numel, r.decay_end) << e.name;
    } else {
      EXPECT_GE(e.offset, r.decay_end) << e.name;
    }
  }
  EXPECT_GE(ps.find("layers.2.self_attn.k_norm.weight"), 0);
  EXPECT_EQ(ps.find("layers.3.mlp.down_proj.weight"), -1);
}

TEST(ParamStore, InitialisationIsDeterministicAndScaled) {
  ModelConfig m;
  m.num_layers = 8;
  m.hidden_size = 64;
  m.ffn_hidden_size = 128;
  m.num_attention_heads = 4;
  m.num_query_groups = 4;
  m.kv_channels = 16;
  m.vocab_size = m.padded_vocab_size = 100;
  ParamStore a(ModelSpec::from_config(m)), b(ModelSpec::from_config(m));
  a.allocate(DType::kF32, Stream::cpu());
  b.allocate(DType::kF32, Stream::cpu());
  a.initialize(5, Stream::cpu());
  b.initialize(5, Stream::cpu());
  EXPECT_EQ(a.master_flat().to_vector<float>(), b.master_flat().to_vector<float>());
  auto stdev = [&](const std::string& name) {
    auto v = a.param(name).to_vector<float>();
    double s = 0;
    for (float x : v) s += double(x) * x;
    return std::sqrt(s / v.size());
  };
  EXPECT_NEAR(stdev("layers.0.mlp.gate_up_proj.weight"), 0.02, 0.002);
  EXPECT_NEAR(stdev("layers.0.mlp.down_proj.weight"), 0.02 / std::sqrt(16.0), 0.0005);  // std / sqrt(2L)
  auto ones = a.param("norm.weight").to_vector<float>();
  for (float x : ones) EXPECT_EQ(x, 1.0f);
  b.initialize(6, Stream::cpu());
  EXPECT_NE(a.master_flat().to_vector<float>(), b.master_flat().to_vector<float>());
}

TEST(Data, SplitFollowsMegatronBookends) {
  SplitRanges r = split_documents(1000, "969,30,1");
  EXPECT_EQ(r.train_end, 969u);
  EXPECT_EQ(r.valid_end, 999u);
  EXPECT_EQ(r.test_end, 1000u);
  EXPECT_THROW(split_documents(10, "a,b"), ConfigError);
}

TEST(Data, StreamDatasetOverlapsByOneTokenAndResumesExactly) {
  auto toks = std::make_shared<std::vector<int32_t>>();
  for (int i = 0; i < 1001; ++i) toks->push_back(i);
  auto ds = std::make_shared<StreamDataset>(toks, 10, 3, "test");
  EXPECT_EQ(ds->num_samples(), 100);
  std::vector<int32_t> s(11);
  std::set<int32_t> starts;
  for (int64_t i = 0; i < 100; ++i) {
    ds->sample(i, s.data());
    EXPECT_EQ(s[0] % 10, 0);
    EXPECT_EQ(s[10], s[0] + 10);  // seq_length + 1 consecutive tokens
    starts.insert(s[0]);
  }
  EXPECT_EQ(starts.size(), 100u);  // one epoch is a permutation of all samples

  // The stream seen after resuming at consumed sample k equals the uninterrupted stream.
  DataLoader straight(ds, 4, 0, 1000, false);
  std::vector<std::vector<int32_t>> seq;
  for (int i = 0; i < 60; ++i)
    seq.push_back(straight.next().tokens.to_vector<int32_t>());  // crosses an epoch
  DataLoader resumed(ds, 4, 4 * 37, 1000, false);
  for (int i = 37; i < 60; ++i) EXPECT_EQ(resumed.next().tokens.to_vector<int32_t>(), seq[i]) << i;
}

TEST(Data, EodMaskLossMasksTargetsAfterEod) {
  auto toks = std::make_shared<std::vector<int32_t>>(std::vector<int32_t>{1, 2, 9, 3, 4, 9, 5, 6, 7});
  StreamDataset ds(toks, 8, 1, "t");
  Batch b = make_batch(ds, 0, 1, 9, true);
  auto t = b.tokens.to_vector<int32_t>();
  auto y = b.targets.to_vector<int32_t>();
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == 9) {
      EXPECT_EQ(y[i], -1);
    } else {
      EXPECT_NE(y[i], -1);
    }
  }
  EXPECT_EQ(b.valid_tokens, 6);
}

TEST(Data, MockDataIsDeterministicAndInRange) {
  MockDataset a(37, 16, 11), b(37, 16, 11);
  std::vector<int32_t> x(17), y(17);
  for (int64_t i : {0, 5, 123456789}) {
    a.sample(i, x.data());
    b.sample(i, y.data());
    EXPECT_EQ(x, y);
    for (int32_t v : x) EXPECT_TRUE(v >= 0 && v < 37);
  }
}

TEST(Data, FortuneFilesSplitIntoDocuments) {
  auto dir = std::filesystem::temp_directory_path() / "primus_fortune_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "quotes") << "first\nline two\n%\nsecond\n%\n%\nthird\n";
  std::ofstream(dir / "quotes.dat") << std::string("\0\1\2", 3);
  auto docs = read_text_documents(dir.string());
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0], "first\nline two\n");
  EXPECT_EQ(docs[2], "third\n");
  EXPECT_THROW(read_text_documents((dir / "missing").string()), ConfigError);
  std::filesystem::remove_all(dir);
}

TEST(Metrics, LogLineHasEverySegment) {
  StepMetrics m;
  m.step = 120;
  m.total_steps = 1000;
  m.loss = 3.214;
  m.lr = 2.9e-4;
  m.grad_norm = 0.83;
  m.iter_ms = 412;
  m.tokens_per_s_gpu = 39800;
  m.tflops_per_gpu = 487;
  m.mfu = 0.492;
  m.mem_gb = 31.2;
  m.mem_total_gb = 80;
  m.eta_s = 372;
  std::string s = format_log_line(m, true);
  for (const char* part : {"iter 120/1000", "loss 3.2140", "grad-norm 0.830", "412 ms", "39.8k tok/s/GPU",
                           "487.0 TFLOP/s/GPU", "MFU 49.2%", "mem 31.2/80 GB", "ETA 6m12s"}) {
    EXPECT_NE(s.find(part), std::string::npos) << part << " in " << s;
  }
}
