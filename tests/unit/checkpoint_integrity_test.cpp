// Checkpoint integrity (docs/checkpoints.md): 1000 random corruptions of a published checkpoint are all
// detected and never selected; a crash at every save phase leaves `latest` naming a complete checkpoint;
// retention keeps the newest keep_latest_k only after the new one is published.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "checkpoint/file_io.h"
#include "checkpoint/load.h"
#include "checkpoint/manifest.h"
#include "checkpoint/publish.h"
#include "checkpoint/safetensors.h"
#include "checkpoint_test_util.h"
#include "core/error.h"
#include "core/log.h"

namespace fs = std::filesystem;
using namespace primus;
using primus::ckpt_test::scratch_dir;
using primus::ckpt_test::SyntheticState;

namespace {

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::vector<char>& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(b.data(), static_cast<std::streamsize>(b.size()));
}

std::vector<std::string> files_of(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Every iter_* directory under root verifies, and `latest` names one of them.
void expect_root_consistent(const std::string& root, const std::string& ctx) {
  for (const std::string& d : ckpt::list_checkpoint_dirs(root)) {
    ckpt::Verification v = ckpt::verify_checkpoint(d);
    EXPECT_TRUE(v.ok) << ctx << ": " << d << " is published but does not verify: "
                      << (v.problems.empty() ? "" : v.problems[0].str());
  }
  auto latest = ckpt::read_latest_pointer(root);
  ASSERT_TRUE(latest.has_value()) << ctx << ": no readable latest pointer";
  EXPECT_TRUE(ckpt::verify_checkpoint(*latest).ok) << ctx << ": latest names " << *latest;
}

class QuietLogs : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = log::level();
    log::set_level(log::Level::kError);
  }
  void TearDown() override { log::set_level(saved_); }
  log::Level saved_ = log::Level::kInfo;
};

using CheckpointIntegrity = QuietLogs;

}  // namespace

TEST_F(CheckpointIntegrity, PublishWritesVerifiableCheckpointAndLatest) {
  const std::string root = scratch_dir("ckpt-pub");
  SyntheticState s(7);
  ckpt::PublishStats st = ckpt::publish_checkpoint(s.snap, root, 2);
  EXPECT_EQ(st.dir, root + "/iter_0000007");
  EXPECT_EQ(files_of(st.dir),
            (std::vector<std::string>{"config.yaml", "manifest.json", "master_rank0.safetensors",
                                      "model_rank0.safetensors", "optim_rank0.safetensors", "state.json"}));
  EXPECT_EQ(*ckpt::read_latest_pointer(root), st.dir);
  ckpt::Verification v = ckpt::verify_checkpoint(st.dir);
  ASSERT_TRUE(v.ok) << v.problems[0].str();
  EXPECT_EQ(v.state.iteration, 7);
  EXPECT_EQ(v.state.consumed_samples, 112);
  // The manifest lists every other file with its size and hash.
  EXPECT_EQ(v.manifest.files.size(), 5u);
  for (const ckpt::FileRecord& f : v.manifest.files) {
    EXPECT_EQ(f.bytes, fs::file_size(st.dir + "/" + f.name)) << f.name;
    EXPECT_EQ(f.xxh3, ckpt::digest_file(st.dir + "/" + f.name).xxh3) << f.name;
  }
  // Tensors read back bitwise.
  ckpt::CheckpointReader r(v);
  for (const auto* group : {&s.snap.model, &s.snap.master, &s.snap.optim}) {
    const std::string g = group == &s.snap.model ? "model" : group == &s.snap.master ? "master" : "optim";
    for (const ckpt::SnapshotTensor& t : *group) {
      Tensor back = r.read(g, t.name);
      ASSERT_EQ(back.shape(), t.shape);
      EXPECT_EQ(std::memcmp(back.data_ptr(), t.data, back.nbytes()), 0) << g << "/" << t.name;
    }
  }
  fs::remove_all(root);
}

TEST_F(CheckpointIntegrity, ThousandRandomCorruptionsAreAllDetectedAndNeverLoaded) {
  const std::string root = scratch_dir("ckpt-corrupt");
  const std::string pristine = scratch_dir("ckpt-pristine");
  SyntheticState older(1), newer(2);
  ckpt::publish_checkpoint(older.snap, root, 0);
  ckpt::publish_checkpoint(newer.snap, pristine, 0);
  const std::string src = pristine + "/iter_0000002";
  const std::string victim = root + "/iter_0000002";
  const std::vector<std::string> names = files_of(src);
  std::map<std::string, std::vector<char>> original;
  for (const std::string& n : names) original[n] = read_bytes(src + "/" + n);

  std::mt19937_64 rng(20261122);
  int detected = 0, loaded = 0, explicit_refused = 0;
  std::map<std::string, int> kinds;
  const int kTrials = 1000;
  for (int trial = 0; trial < kTrials; ++trial) {
    fs::remove_all(victim);
    fs::create_directory(victim);
    for (const std::string& n : names) write_bytes(victim + "/" + n, original[n]);
    const std::string file = names[rng() % names.size()];
    const std::string path = victim + "/" + file;
    std::vector<char> bytes = original[file];
    std::string kind;
    switch (rng() % 4) {
      case 0: {  // one bit flip
        const size_t at = rng() % bytes.size();
        bytes[at] = static_cast<char>(bytes[at] ^ (1 << (rng() % 8)));
        write_bytes(path, bytes);
        kind = "bit flip";
        break;
      }
      case 1: {  // truncation (possibly to zero bytes)
        bytes.resize(rng() % bytes.size());
        write_bytes(path, bytes);
        kind = "truncation";
        break;
      }
      case 2:  // deletion
        fs::remove(path);
        kind = "deletion";
        break;
      default: {  // two files swapped
        std::string other = file;
        while (other == file) other = names[rng() % names.size()];
        write_bytes(path, original[other]);
        write_bytes(victim + "/" + other, original[file]);
        kind = "swap";
        break;
      }
    }
    ++kinds[kind];
    const ckpt::Verification v = ckpt::verify_checkpoint(victim);
    if (!v.ok) {
      ++detected;
    } else {
      ADD_FAILURE() << "trial " << trial << ": " << kind << " of " << file << " went undetected";
    }
    // Auto-resume falls back to the older, intact checkpoint; it never selects the damaged one.
    std::optional<ckpt::Selection> sel = ckpt::select_newest_valid(root);
    ASSERT_TRUE(sel.has_value()) << "trial " << trial;
    if (sel->verification.dir == victim) ++loaded;
    EXPECT_EQ(sel->verification.dir, root + "/iter_0000001");
    EXPECT_FALSE(sel->rejected.empty());
    // An explicit path refuses, naming a file of the damaged checkpoint.
    try {
      ckpt::select_explicit(victim);
      ++loaded;
    } catch (const Error& e) {
      ++explicit_refused;
      EXPECT_NE(std::string(e.what()).find(victim + "/"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(detected, kTrials);
  EXPECT_EQ(explicit_refused, kTrials);
  EXPECT_EQ(loaded, 0);
  for (const auto& [k, n] : kinds) EXPECT_GT(n, 150) << k;  // every kind was exercised
  fs::remove_all(root);
  fs::remove_all(pristine);
}

TEST_F(CheckpointIntegrity, MismatchNamesFileByteRangeAndHashes) {
  const std::string root = scratch_dir("ckpt-msg");
  SyntheticState s(3);
  const std::string dir = ckpt::publish_checkpoint(s.snap, root, 0).dir;
  const std::string path = dir + "/optim_rank0.safetensors";
  std::vector<char> b = read_bytes(path);
  b[b.size() / 2] ^= 0x10;
  write_bytes(path, b);
  ckpt::Verification v = ckpt::verify_checkpoint(dir);
  ASSERT_FALSE(v.ok);
  ASSERT_EQ(v.problems.size(), 1u);
  EXPECT_EQ(v.problems[0].file, path);
  EXPECT_NE(v.problems[0].detail.find("checksum mismatch in bytes [0, " + std::to_string(b.size()) + ")"),
            std::string::npos)
      << v.problems[0].detail;
  EXPECT_NE(v.problems[0].detail.find("expected xxh3"), std::string::npos);
  // A truncated file says how many bytes are missing.
  b.resize(100);
  write_bytes(path, b);
  v = ckpt::verify_checkpoint(dir);
  ASSERT_FALSE(v.ok);
  EXPECT_NE(v.problems[0].detail.find("truncated: 100 bytes"), std::string::npos) << v.problems[0].detail;
  fs::remove_all(root);
}

TEST_F(CheckpointIntegrity, CrashAtEverySavePhaseLeavesLatestComplete) {
  // Phases in save order; "retention" needs an older checkpoint to delete (keep_latest_k 2, third save).
  for (const char* phase : {"stage", "shard", "manifest", "publish", "latest", "retention"}) {
    const std::string root = scratch_dir("ckpt-crash");
    SyntheticState a(10), b(20), c(30);
    ckpt::publish_checkpoint(a.snap, root, 2);
    ckpt::publish_checkpoint(b.snap, root, 2);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      setenv("PRIMUS_CKPT_CRASH_AT", phase, 1);
      try {
        ckpt::publish_checkpoint(c.snap, root, 2);
      } catch (...) {
        _exit(3);
      }
      _exit(0);  // the hook did not fire
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << phase << ": status " << status;
    expect_root_consistent(root, phase);
    const std::string latest = *ckpt::read_latest_pointer(root);
    // `latest` names the new checkpoint only once its rename happened (the "latest" phase is just before it).
    const bool new_published = std::string(phase) == "retention";
    EXPECT_EQ(latest, root + (new_published ? "/iter_0000030" : "/iter_0000020")) << phase;
    // Auto-resume picks the newest complete checkpoint (iteration 30 once its directory is renamed in).
    std::optional<ckpt::Selection> sel = ckpt::select_newest_valid(root);
    ASSERT_TRUE(sel.has_value()) << phase;
    const bool renamed = new_published || std::string(phase) == "publish" || std::string(phase) == "latest";
    EXPECT_EQ(sel->verification.state.iteration, renamed ? 30 : 20) << phase;
    // The next save cleans up what the crashed one left behind and publishes normally.
    ckpt::clean_stale_entries(root);
    for (const std::string& n : files_of(root)) EXPECT_NE(n[0], '.') << phase << ": leftover " << n;
    SyntheticState d(40);
    ckpt::publish_checkpoint(d.snap, root, 2);
    expect_root_consistent(root, std::string(phase) + " then save");
    EXPECT_EQ(ckpt::list_checkpoint_dirs(root).size(), 2u) << phase;
    fs::remove_all(root);
  }
}

TEST_F(CheckpointIntegrity, RetentionKeepsNewestKAfterPublishing) {
  const std::string root = scratch_dir("ckpt-keep");
  for (int64_t it = 1; it <= 5; ++it) {
    SyntheticState s(it);
    ckpt::PublishStats st = ckpt::publish_checkpoint(s.snap, root, 3);
    EXPECT_EQ(st.deleted.size(), it > 3 ? 1u : 0u) << it;
  }
  EXPECT_EQ(files_of(root),
            (std::vector<std::string>{"iter_0000003", "iter_0000004", "iter_0000005", "latest"}));
  // keep_latest_k 0 keeps everything.
  SyntheticState s6(6);
  ckpt::publish_checkpoint(s6.snap, root, 0);
  EXPECT_EQ(ckpt::list_checkpoint_dirs(root).size(), 4u);
  // A re-save of an existing iteration replaces it whole.
  SyntheticState again(6, 99);
  ckpt::publish_checkpoint(again.snap, root, 0);
  ckpt::Verification v = ckpt::verify_checkpoint(root + "/iter_0000006");
  ASSERT_TRUE(v.ok);
  ckpt::CheckpointReader r(v);
  Tensor t = r.read("model", "norm.weight");
  EXPECT_EQ(std::memcmp(t.data_ptr(), again.snap.model[2].data, t.nbytes()), 0);
  fs::remove_all(root);
}

TEST_F(CheckpointIntegrity, ManifestSelfHashAndStructure) {
  ckpt::Manifest m;
  m.iteration = 5;
  m.files.push_back({"state.json", 10, 0x1234, {0x1234}});
  const std::string text = ckpt::manifest_to_text(m);
  EXPECT_EQ(ckpt::parse_manifest(text, "m").iteration, 5);
  std::string edited = text;
  edited.replace(edited.find("\"iteration\": 5"), 14, "\"iteration\": 6");
  EXPECT_THROW(ckpt::parse_manifest(edited, "m"), Error);
  EXPECT_THROW(ckpt::parse_manifest(text.substr(0, text.size() / 2), "m"), Error);
  // A file name that escapes the directory is refused even with a correct self-hash.
  ckpt::Manifest evil = m;
  evil.files[0].name = "../state.json";
  EXPECT_THROW(ckpt::parse_manifest(ckpt::manifest_to_text(evil), "m"), Error);
}

TEST_F(CheckpointIntegrity, ManifestShapesTooLargeForInt64ArithmeticAreRefused) {
  // With a correct self-hash, dimensions whose sums or products overflow int64 (the loader adds offset +
  // extent and multiplies extents) are refused by the parser, naming the field.
  ckpt::Manifest m;
  m.files.push_back({"model.safetensors", 10, 0x1234, {0x1234}});
  ckpt::TensorIndexEntry e;
  e.dtype = "F32";
  e.global_shape = {4, 4};
  e.shards.push_back({"model.safetensors", "w", {0, 0}, {4, 4}});
  m.tensors["model"]["w"] = e;
  EXPECT_NO_THROW(ckpt::parse_manifest(ckpt::manifest_to_text(m), "m"));
  const int64_t huge = (int64_t(1) << 62) + 1;
  for (int which = 0; which < 3; ++which) {
    ckpt::Manifest bad = m;
    ckpt::TensorIndexEntry& b = bad.tensors["model"]["w"];
    if (which == 0) b.global_shape = {huge, 1};
    if (which == 1) b.shards[0].offset = {0, huge};
    if (which == 2) b.global_shape = {int64_t(1) << 31, int64_t(1) << 31};  // 2^62 elements
    std::string msg;
    try {
      ckpt::parse_manifest(ckpt::manifest_to_text(bad), "ckpt/manifest.json");
    } catch (const Error& err) {
      msg = err.what();
    }
    EXPECT_NE(msg.find("ckpt/manifest.json: w."), std::string::npos) << which << ": " << msg;
    EXPECT_NE(msg.find("more elements than any tensor can have"), std::string::npos) << which << ": " << msg;
  }
}

TEST_F(CheckpointIntegrity, ManifestIntegerFieldsMustBeJsonIntegersInRange) {
  // Fuzzing (docs/fuzzing.md) found `"bytes": 1.3e63` behind a valid self-hash: nlohmann's get<uint64_t>()
  // casts the float, undefined behaviour. Every integer field is now checked as a JSON integer in range.
  ckpt::Manifest m;
  m.iteration = 7;
  m.files.push_back({"model.safetensors", 10, 0x1234, {0x1234}});
  const std::string good = ckpt::manifest_to_text(m);
  ASSERT_NO_THROW(ckpt::parse_manifest(good, "m"));
  auto sealed = [](std::string text) {  // recompute the self-hash, as manifest.cpp checks it
    const std::string key = "\"manifest_xxh3\": \"";
    const size_t start = text.rfind(key) + key.size();
    text.replace(start, 16, "0000000000000000");
    text.replace(start, 16, ckpt::hex64(ckpt::xxh3_bytes(text.data(), text.size())));
    return text;
  };
  const std::vector<std::pair<std::string, std::string>> edits = {
      {"\"bytes\": 10", "\"bytes\": 1.3e63"},        {"\"bytes\": 10", "\"bytes\": -10"},
      {"\"iteration\": 7", "\"iteration\": 7.5"},    {"\"iteration\": 7", "\"iteration\": -1"},
      {"\"world_size\": 1", "\"world_size\": 4e12"}, {"\"version\": ", "\"version\": 1e300, \"x\": "}};
  for (const auto& [from, to] : edits) {
    std::string text = good;
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from << " in " << text;
    text.replace(at, from.size(), to);
    std::string msg;
    try {
      ckpt::parse_manifest(sealed(text), "ckpt/manifest.json");
    } catch (const Error& err) {
      msg = err.what();
    }
    EXPECT_NE(msg.find("ckpt/manifest.json"), std::string::npos) << to << ": " << msg;
    EXPECT_NE(msg.find("integer"), std::string::npos) << to << ": " << msg;
  }
}

TEST_F(CheckpointIntegrity, SafetensorsHeaderRules) {
  auto header = [](const std::string& json, uint64_t data) {
    return ckpt::parse_safetensors_header(json, 8 + json.size() + data, "t.safetensors");
  };
  EXPECT_NO_THROW(header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8));
  EXPECT_NO_THROW(
      header(R"({"__metadata__":{"format":"pt"},"s":{"dtype":"BF16","shape":[],"data_offsets":[0,2]}})", 2));
  // Size does not match the shape, a gap, an overlap, trailing bytes, an unknown dtype, a non-object.
  EXPECT_THROW(header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4), Error);
  EXPECT_THROW(header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), Error);
  EXPECT_THROW(
      header(
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
          8),
      Error);
  EXPECT_THROW(header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12), Error);
  EXPECT_THROW(header(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8), Error);
  EXPECT_THROW(header(R"([1,2])", 0), Error);
  EXPECT_THROW(header(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", 8),
               Error);
}
