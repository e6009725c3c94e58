// TensorBoard event files (train/tensorboard_events.h, train/tensorboard_sink.h): CRC32C known answers,
// the protobuf bytes of a scalar Event derived by hand from the wire format, TFRecord round trips, torn tails
// and corrupt records, and the sink honouring each Megatron / TorchTitan key.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"
#include "train/tensorboard_events.h"
#include "train/tensorboard_sink.h"

namespace fs = std::filesystem;
using namespace primus;

namespace {

class ScratchDir {
 public:
  ScratchDir() {
    std::string p = (fs::temp_directory_path() / "primus-tb-test-XXXXXX").string();
    if (mkdtemp(p.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& str() const { return path_; }

 private:
  std::string path_;
};

std::string only_event_file(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().string());
  EXPECT_EQ(files.size(), 1u) << dir;
  return files.empty() ? "" : files[0];
}

// tag -> (step -> value) over every event of a file.
std::map<std::string, std::map<int64_t, float>> scalars(const tb::EventFile& f) {
  std::map<std::string, std::map<int64_t, float>> out;
  for (const tb::Event& e : f.events)
    for (const auto& [tag, v] : e.values) out[tag][e.step] = v;
  return out;
}

StepMetrics step_metrics(int64_t step) {
  StepMetrics m;
  m.step = step;
  m.loss = 10.0 - 0.5 * static_cast<double>(step);
  m.lr = 1e-4 * static_cast<double>(step);
  m.grad_norm = 0.25 * static_cast<double>(step);
  m.iter_ms = 250;
  m.tokens_per_s = 8000;
  m.tokens_per_s_gpu = 4000;
  m.tflops_per_gpu = 123.5;
  m.mfu = 0.125;
  m.mem_gb = 2.5;
  m.mem_total_gb = 80;
  m.consumed_samples = 16 * step;
  m.skipped_total = step >= 3 ? 1 : 0;
  return m;
}

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(static_cast<char>(x));
  return s;
}

}  // namespace

TEST(TensorBoardEvents, Crc32cKnownAnswers) {
  EXPECT_EQ(tb::crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(tb::crc32c(""), 0u);
  // RFC 3720 (iSCSI) B.4 test vectors.
  EXPECT_EQ(tb::crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(tb::crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string inc;
  for (int i = 0; i < 32; ++i) inc.push_back(static_cast<char>(i));
  EXPECT_EQ(tb::crc32c(inc), 0x46DD794Eu);
  // Masking: rotate right 15, add 0xA282EAD8.
  EXPECT_EQ(tb::masked_crc32c(""), 0xA282EAD8u);
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(tb::masked_crc32c("123456789"), ((c >> 15) | (c << 17)) + 0xA282EAD8u);
}

TEST(TensorBoardEvents, ScalarEventBytesFollowTheWireFormat) {
  // Event{wall_time=1.5 (0x09 + f64), step=7 (0x10 + varint), summary (0x2A + len) {value (0x0A + len)
  // {tag "a" (0x0A 01 'a'), simple_value 2.0f (0x15 + f32)}}}.
  const std::string expect = bytes({0x09, 0,    0,    0,    0,    0,   0,    0xF8, 0x3F, 0x10, 0x07, 0x2A,
                                    0x0A, 0x0A, 0x08, 0x0A, 0x01, 'a', 0x15, 0,    0,    0,    0x40});
  EXPECT_EQ(tb::encode_scalar_event(1.5, 7, {{"a", 2.0f}}), expect);
  // The header: wall_time and file_version "brain.Event:2" (0x1A + len 13).
  const std::string head = tb::encode_file_version_event(0.0);
  EXPECT_EQ(head.substr(9), bytes({0x1A, 13}) + "brain.Event:2");
  // Multi-byte varint: step 300 = 0xAC 0x02.
  const std::string e300 = tb::encode_scalar_event(0.0, 300, {});
  EXPECT_EQ(e300.substr(9, 3), bytes({0x10, 0xAC, 0x02}));
}

TEST(TensorBoardEvents, RecordFramingRoundTrips) {
  const std::string data = tb::encode_scalar_event(1700000000.25, int64_t(1) << 40, {{"lm loss", 3.25f}});
  const std::string rec = tb::frame_record(data);
  ASSERT_EQ(rec.size(), data.size() + 16);
  uint64_t len = 0;
  memcpy(&len, rec.data(), 8);
  EXPECT_EQ(len, data.size());
  uint32_t crc = 0;
  memcpy(&crc, rec.data() + 8, 4);
  EXPECT_EQ(crc, tb::masked_crc32c(rec.substr(0, 8)));
  memcpy(&crc, rec.data() + 12 + data.size(), 4);
  EXPECT_EQ(crc, tb::masked_crc32c(data));

  const tb::Event e = tb::decode_event(data, "test");
  EXPECT_EQ(e.wall_time, 1700000000.25);
  EXPECT_EQ(e.step, int64_t(1) << 40);
  ASSERT_EQ(e.values.size(), 1u);
  EXPECT_EQ(e.values[0].first, "lm loss");
  EXPECT_EQ(e.values[0].second, 3.25f);
}

TEST(TensorBoardEvents, WriterFileStartsWithTheVersionRecordAndReadsBack) {
  ScratchDir d;
  std::string path;
  {
    tb::EventFileWriter w(d.str() + "/tb");
    path = w.path();
    for (int s = 1; s <= 5; ++s)
      w.add(tb::encode_scalar_event(1.0 * s, s, {{"x", 0.5f * s}, {"y", -1.0f * s}}));
    EXPECT_EQ(w.pending(), 5u);
  }  // the destructor writes what is queued
  EXPECT_NE(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), std::string::npos) << path;
  const tb::EventFile f = tb::read_event_file(path);
  EXPECT_FALSE(f.torn_tail);
  ASSERT_EQ(f.events.size(), 6u);
  EXPECT_EQ(f.events[0].file_version, "brain.Event:2");
  for (int s = 1; s <= 5; ++s) {
    EXPECT_EQ(f.events[s].step, s);
    ASSERT_EQ(f.events[s].values.size(), 2u);
    EXPECT_EQ(f.events[s].values[0], std::make_pair(std::string("x"), 0.5f * s));
    EXPECT_EQ(f.events[s].values[1], std::make_pair(std::string("y"), -1.0f * s));
  }
}

TEST(TensorBoardEvents, TornTailIsLeftOutAndCorruptionNamesFileAndOffset) {
  ScratchDir d;
  std::string path;
  {
    tb::EventFileWriter w(d.str());
    path = w.path();
    w.add(tb::encode_scalar_event(1.0, 1, {{"x", 1.0f}}));
    w.add(tb::encode_scalar_event(2.0, 2, {{"x", 2.0f}}));
  }
  const auto size = fs::file_size(path);
  std::string whole;
  {
    std::ifstream in(path, std::ios::binary);
    whole.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  for (uintmax_t cut :
       {uintmax_t(1), uintmax_t(5), uintmax_t(13)}) {  // in the data CRC, the data, the header
    fs::resize_file(path, size - cut);
    const tb::EventFile f = tb::read_event_file(path);
    EXPECT_TRUE(f.torn_tail) << cut;
    EXPECT_EQ(f.events.size(), 2u) << cut;  // the header and step 1
  }
  std::string bad = whole;
  bad[bad.size() - 6] ^= 0x40;  // inside the last record's data (the float value)
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
  try {
    tb::read_event_file(path);
    FAIL() << "a flipped bit went unnoticed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CRC"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tb::decode_event(bytes({0x2A, 0x05, 0x0A}), "x"), Error);  // length past the end
}

TEST(TensorBoardSink, MegatronTagsHonourEachKey) {
  ScratchDir d;
  TensorBoardConfig cfg;  // Megatron defaults: learning rate and loss scale on, the rest off
  cfg.enabled = true;
  std::string path;
  {
    TensorBoardSink sink(cfg, d.str(), /*global_batch=*/16, /*world_size=*/2);
    path = sink.path();
    for (int s = 1; s <= 4; ++s) sink.write_step(step_metrics(s));
    sink.write_scalar(4, "val_loss", 2.0);
  }
  auto sc = scalars(tb::read_event_file(path));
  EXPECT_EQ(sc["lm loss"][3], 8.5f);
  EXPECT_EQ(sc["lm loss vs samples"][48], 8.5f);  // x axis: consumed samples
  EXPECT_FLOAT_EQ(sc["learning-rate"][2], 2e-4f);
  EXPECT_EQ(sc["grad-norm"][4], 1.0f);
  EXPECT_EQ(sc["loss-scale"][1], 1.0f);
  EXPECT_EQ(sc["skipped-iterations"][2], 0.0f);
  EXPECT_EQ(sc["skipped-iterations"][3], 1.0f);
  EXPECT_EQ(sc["lm loss validation"][4], 2.0f);
  EXPECT_EQ(sc["lm loss validation vs samples"][64], 2.0f);
  for (const char* off : {"batch-size", "world-size", "mem-max-allocated-bytes", "iteration-time",
                          "throughput", "mfu", "lm loss validation ppl"})
    EXPECT_EQ(sc.count(off), 0u) << off;

  // Every switch flipped.
  ScratchDir d2;
  cfg.learning_rate = cfg.loss_scale = false;
  cfg.batch_size = cfg.world_size = cfg.memory = cfg.timers = cfg.throughput = cfg.validation_ppl = true;
  cfg.log_interval = 2;
  {
    TensorBoardSink sink(cfg, d2.str(), 16, 2);
    path = sink.path();
    for (int s = 1; s <= 4; ++s) sink.write_step(step_metrics(s));
    sink.write_scalar(4, "val_loss", 2.0);
  }
  sc = scalars(tb::read_event_file(path));
  EXPECT_EQ(sc.count("learning-rate"), 0u);
  EXPECT_EQ(sc.count("loss-scale"), 0u);
  EXPECT_EQ(sc["lm loss"].size(), 2u);  // tensorboard_log_interval 2: iterations 2 and 4
  EXPECT_EQ(sc["lm loss"].count(2), 1u);
  EXPECT_EQ(sc["lm loss"].count(4), 1u);
  EXPECT_EQ(sc["batch-size"][2], 16.0f);
  EXPECT_EQ(sc["world-size"][4], 2.0f);
  EXPECT_EQ(sc["mem-max-allocated-bytes"][2], 2.5e9f);
  EXPECT_EQ(sc["iteration-time"][4], 0.25f);
  EXPECT_EQ(sc["throughput"][4], 123.5f);
  EXPECT_EQ(sc["tokens-per-sec-per-gpu"][4], 4000.0f);
  EXPECT_EQ(sc["mfu"][4], 0.125f);
  EXPECT_EQ(sc["lm loss validation ppl"][4], static_cast<float>(std::exp(2.0)));
}

TEST(TensorBoardSink, QueueSizeHoldsRecordsUntilFull) {
  ScratchDir d;
  TensorBoardConfig cfg;
  cfg.enabled = true;
  cfg.queue_size = 3;  // each step writes two events (per iteration, per sample)
  TensorBoardSink sink(cfg, d.str(), 16, 1);
  sink.write_step(step_metrics(1));
  EXPECT_EQ(tb::read_event_file(sink.path()).events.size(), 1u);  // only the header is on disk
  sink.write_step(step_metrics(2));
  EXPECT_EQ(tb::read_event_file(sink.path()).events.size(), 4u);  // the queue filled: written
}

TEST(TensorBoardSink, TorchTitanTagsEveryLogFreq) {
  ScratchDir d;
  TensorBoardConfig cfg;
  cfg.enabled = true;
  cfg.tags = "torchtitan";
  cfg.log_interval = 3;
  std::string path;
  {
    TensorBoardSink sink(cfg, d.str(), 16, 1);
    path = sink.path();
    for (int s = 1; s <= 6; ++s) sink.write_step(step_metrics(s));
  }
  auto sc = scalars(tb::read_event_file(path));
  EXPECT_EQ(sc["loss_metrics/global_avg_loss"].size(), 3u);  // steps 1, 3, 6
  EXPECT_EQ(sc["loss_metrics/global_avg_loss"][6], 7.0f);
  EXPECT_FLOAT_EQ(sc["lr"][3], 3e-4f);
  EXPECT_EQ(sc["tflops"][1], 123.5f);
  EXPECT_EQ(sc["mfu(%)"][6], 12.5f);
  EXPECT_EQ(sc["throughput(tps)"][6], 4000.0f);
  EXPECT_EQ(sc.count("lm loss"), 0u);
}

TEST(TensorBoardSink, DirectoryFromTheKeys) {
  TensorBoardConfig cfg;
  EXPECT_EQ(tensorboard_dir(cfg, "/ws/amd/me/exp"), "/ws/amd/me/exp/tensorboard");
  cfg.subdir = "tb";
  EXPECT_EQ(tensorboard_dir(cfg, "/ws/amd/me/exp"), "/ws/amd/me/exp/tb");
  cfg.dir = "/elsewhere/tb";
  EXPECT_EQ(tensorboard_dir(cfg, "/ws/amd/me/exp"), "/elsewhere/tb");
}

namespace {

// Multi-token prediction: one scalar per depth under Megatron's names ("mtp_1 loss", ...), and the JSONL
// record's mean and per-depth values; nothing without MTP.
TEST(TensorBoardSink, MtpLossesUnderMegatronNames) {
  ScratchDir d;
  TensorBoardConfig cfg;
  cfg.enabled = true;
  std::string path;
  {
    TensorBoardSink sink(cfg, d.str(), 16, 1);
    path = sink.path();
    StepMetrics m = step_metrics(1);
    m.mtp_losses = {2.5, 3.5};
    sink.write_step(m);
    sink.write_step(step_metrics(2));
  }
  auto sc = scalars(tb::read_event_file(path));
  EXPECT_EQ(sc["mtp_1 loss"][1], 2.5f);
  EXPECT_EQ(sc["mtp_2 loss"][1], 3.5f);
  EXPECT_EQ(sc["mtp_1 loss"].count(2), 0u);
  EXPECT_EQ(sc.count("mtp_3 loss"), 0u);
  StepMetrics m = step_metrics(1);
  m.mtp_losses = {2.5, 3.5};
  EXPECT_NE(format_log_line(m, false).find("| mtp 3.0000"), std::string::npos) << format_log_line(m, false);
  EXPECT_EQ(format_log_line(step_metrics(1), false).find("mtp"), std::string::npos);
}

}  // namespace
