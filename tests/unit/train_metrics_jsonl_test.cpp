// metrics.jsonl without torn records (train/metrics.h): one write() per line, readers that leave out an
// unterminated last line, and the repair of a torn tail before a resumed run appends.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "train/metrics.h"

namespace fs = std::filesystem;
using namespace primus;

namespace {

class ScratchFile {
 public:
  ScratchFile() {
    std::string p = (fs::temp_directory_path() / "primus-jsonl-test-XXXXXX").string();
    if (mkdtemp(p.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = p;
  }
  ~ScratchFile() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path() const { return dir_ + "/metrics.jsonl"; }
  std::string text() const {
    std::ifstream in(path(), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  void write(const std::string& text) const {
    std::ofstream(path(), std::ios::binary | std::ios::trunc) << text;
  }

 private:
  std::string dir_;
};

StepMetrics step(int64_t s) {
  StepMetrics m;
  m.step = s;
  m.loss = 5.0 / static_cast<double>(s);
  m.lr = 1e-3;
  return m;
}

}  // namespace

TEST(MetricsJsonl, SinkWritesWholeLinesAndReadersSkipAnUnterminatedLast) {
  ScratchFile f;
  {
    JsonlSink sink(f.path(), /*append=*/false);
    for (int s = 1; s <= 3; ++s) sink.write_step(step(s));
    sink.write_scalar(3, "val_loss", 1.5);
  }
  std::string text = f.text();
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  auto recs = read_jsonl_records(f.path());
  ASSERT_EQ(recs.size(), 4u);
  EXPECT_EQ(recs[2]["loss"].get<double>(), 5.0 / 3.0);
  EXPECT_EQ(recs[3]["val_loss"].get<double>(), 1.5);

  // A killed writer's half line at the end: not a record yet, no error.
  f.write(text + R"({"step":4,"lo)");
  EXPECT_EQ(read_jsonl_records(f.path()).size(), 4u);
  // Even a complete object counts only once its '\n' is there.
  f.write(text + R"({"step":4,"loss":1})");
  EXPECT_EQ(read_jsonl_records(f.path()).size(), 4u);
  // A malformed complete line is an error naming the file and line, or a skip with a description.
  f.write(R"({"step":1})"
          "\n"
          R"({"step":2,"lo{"step":2})"
          "\n"
          R"({"step":3})"
          "\n");
  try {
    read_jsonl_records(f.path());
    FAIL() << "malformed line accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(f.path() + " line 2"), std::string::npos) << e.what();
  }
  std::vector<std::string> skipped;
  EXPECT_EQ(read_jsonl_records(f.path(), &skipped).size(), 2u);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_TRUE(read_jsonl_records(f.path() + ".missing").empty());
}

TEST(MetricsJsonl, ResumeRepairsTheTornTailThenAppendsOnALineOfItsOwn) {
  ScratchFile f;
  {
    JsonlSink sink(f.path(), false);
    for (int s = 1; s <= 4; ++s) sink.write_step(step(s));
  }
  const std::string clean = f.text();
  f.write(clean + R"({"step":5,"loss":0.)");
  EXPECT_EQ(repair_torn_tail(f.path()), static_cast<int64_t>(std::string(R"({"step":5,"loss":0.)").size()));
  EXPECT_EQ(f.text(), clean);
  EXPECT_EQ(repair_torn_tail(f.path()), 0);  // nothing more to cut

  // A resume from the checkpoint of iteration 2: records 3 and 4 and the torn tail go; kept lines are
  // byte-identical.
  f.write(clean + R"({"step":5,"lo)");
  EXPECT_EQ(truncate_metrics_after(f.path(), 2), 3);
  const std::string two = clean.substr(0, clean.find('\n', clean.find('\n') + 1) + 1);
  EXPECT_EQ(f.text(), two);
  {
    JsonlSink sink(f.path(), /*append=*/true);
    sink.write_step(step(3));
  }
  auto recs = read_jsonl_records(f.path());
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[2]["step"], 3);

  // Nothing after the checkpoint but a torn tail: still repaired (else the next line would continue it).
  f.write(two + R"({"st)");
  EXPECT_EQ(truncate_metrics_after(f.path(), 2), 1);
  EXPECT_EQ(f.text(), two);
}

TEST(MetricsJsonl, PollingReaderNeverSeesAPartialRecord) {
  // A reader polling the file while another process appends (the e2e waiters' situation): every read sees
  // only whole records, in order.
  ScratchFile f;
  { JsonlSink(f.path(), false); }
  constexpr int kLines = 3000;
  const pid_t pid = fork();
  if (pid == 0) {
    JsonlSink sink(f.path(), true);
    StepMetrics m = step(1);
    for (int s = 1; s <= kLines; ++s) {
      m.step = s;
      m.loss = 1.0 / 3.0 * s;  // long numbers: lines of different lengths
      sink.write_step(m);
    }
    _exit(0);
  }
  size_t last = 0;
  for (;;) {
    int status = 0;
    const bool done = waitpid(pid, &status, WNOHANG) == pid;
    const auto recs = read_jsonl_records(f.path());  // throws on a partial record
    ASSERT_GE(recs.size(), last);
    for (size_t i = 0; i < recs.size(); ++i) ASSERT_EQ(recs[i]["step"], static_cast<int64_t>(i) + 1);
    last = recs.size();
    if (done) break;
  }
  EXPECT_EQ(last, static_cast<size_t>(kLines));
}
