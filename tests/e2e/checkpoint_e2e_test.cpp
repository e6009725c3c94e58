// Checkpoints through the real CLI on the CPU (docs/checkpoints.md): bit-exact resume (exit_interval,
// SIGTERM, kill -9 with async saves), crash during a save, fallback over a corrupt checkpoint, guards (NaN
// skip leaves parameters and moments bitwise unchanged, NaN halt exits 4 naming tensor and layer, loss
// spikes), exit_duration_in_mins, keep_latest_k, and finetuning from a Hugging Face directory.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "checkpoint/hf_weights.h"
#include "checkpoint/load.h"
#include "checkpoint/publish.h"
#include "checkpoint/safetensors.h"
#include "cli_process.h"
#include "train/metrics.h"

namespace fs = std::filesystem;
using namespace primus::cli_test;
using namespace primus;

namespace {

const char* kExperiment = "tests/e2e/configs/fortunes_micro_llama.yaml";

std::string new_scratch(const std::string& tag) {
  std::string dir = (fs::temp_directory_path() / ("primus-ckpt-e2e-" + tag + "-XXXXXX")).string();
  if (mkdtemp(dir.data()) == nullptr) return {};
  return dir;
}

// One training "job": a workspace, an experiment name and a save directory shared by its runs (a resumed
// run continues the metrics.jsonl of the first).
struct Job {
  std::string workspace, exp, save;
  std::string run_dir() const { return workspace + "/e2e/ci/" + exp; }
  std::map<std::string, std::optional<std::string>> env(
      std::map<std::string, std::optional<std::string>> extra = {}) const {
    extra["PRIMUS_WORKSPACE"] = workspace;
    extra["PRIMUS_EXP_NAME"] = exp;
    extra["PRIMUS_USER"] = "ci";
    extra["OMP_NUM_THREADS"] = "1";  // two CI cores are shared by the whole suite
    return extra;
  }
  std::vector<std::string> args(const std::vector<std::string>& overrides) const {
    std::vector<std::string> a = {
        "train",           "pretrain", "--config",          project_dir() + "/" + kExperiment,
        "--eval_interval", "0",        "--log_interval",    "10",
        "--save",          save,       "--lr_warmup_iters", "1"};  // short runs: warmup < train_iters
    a.insert(a.end(), overrides.begin(), overrides.end());
    return a;
  }
  CliResult run(const std::vector<std::string>& overrides,
                std::map<std::string, std::optional<std::string>> extra_env = {}) const {
    return run_primus(args(overrides), env(extra_env));
  }
  std::vector<nlohmann::json> steps() const {
    // A line counts once its '\n' is written: polling a running job never sees a half-written record.
    std::vector<nlohmann::json> out;
    for (nlohmann::json& j : read_jsonl_records(run_dir() + "/metrics.jsonl"))
      if (j.contains("loss")) out.push_back(std::move(j));
    return out;
  }
  std::string ckpt(int64_t iter) const { return save + "/" + ckpt::iter_dir_name(iter); }
};

std::vector<std::string>& scratch_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

Job make_job(const std::string& tag) {
  Job j;
  j.workspace = new_scratch(tag);
  scratch_dirs().push_back(j.workspace);
  j.exp = tag;
  j.save = j.workspace + "/ckpt";
  return j;
}

// Starts primus without waiting (for signals); returns the pid. stdout/stderr go to files under `dir`.
pid_t spawn_primus(const std::vector<std::string>& args,
                   const std::map<std::string, std::optional<std::string>>& env, const std::string& dir) {
  const pid_t pid = fork();
  if (pid == 0) {
    for (const char* k : {"PRIMUS_CONFIG_PATH", "WORLD_SIZE", "PRIMUS_HOME"}) unsetenv(k);
    for (const auto& [k, v] : env) {
      if (v) {
        setenv(k.c_str(), v->c_str(), 1);
      } else {
        unsetenv(k.c_str());
      }
    }
    const int out = open((dir + "/spawn.out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open((dir + "/spawn.err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(err, 2);
    std::vector<std::string> copy = args;
    std::string binary = PRIMUS_BINARY;
    std::vector<char*> argv = {binary.data()};
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

// Waits until metrics.jsonl holds `lines` records (or the process ended); true when it got there. The limit
// is wall-clock time sized for a loaded 2-core machine (ctest -j2 beside other builds): 100 micro steps take
// ~10 s alone; 10 minutes only catches a run that stopped making progress.
bool wait_for_steps(const Job& job, pid_t pid, size_t lines) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (job.steps().size() >= lines) return true;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return false;  // it ended before getting there
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Tensor bytes of one group of a (verified) checkpoint, by name.
std::map<std::string, std::vector<char>> group_bytes(const std::string& dir, const std::string& group) {
  ckpt::Verification v = ckpt::verify_checkpoint(dir);
  EXPECT_TRUE(v.ok) << dir << ": " << (v.problems.empty() ? "" : v.problems[0].str());
  std::map<std::string, std::vector<char>> out;
  if (!v.ok) return out;
  ckpt::CheckpointReader r(v);
  for (const std::string& n : r.names(group)) {
    Tensor t = r.read(group, n);
    const char* p = static_cast<const char*>(t.data_ptr());
    out[n] = std::vector<char>(p, p + t.nbytes());
  }
  return out;
}

void expect_same_losses(const std::vector<nlohmann::json>& a, const std::vector<nlohmann::json>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["step"], b[i]["step"]);
    // JSON doubles print round-trip exact: equal text is bitwise equality.
    EXPECT_EQ(a[i]["loss"].dump(), b[i]["loss"].dump()) << "step " << i + 1;
    EXPECT_EQ(a[i]["grad_norm"].dump(), b[i]["grad_norm"].dump()) << "step " << i + 1;
    EXPECT_EQ(a[i]["lr"].dump(), b[i]["lr"].dump()) << "step " << i + 1;
  }
}

void expect_same_state(const std::string& a, const std::string& b) {
  for (const char* g : {"model", "optim"}) {
    const auto x = group_bytes(a, g), y = group_bytes(b, g);
    ASSERT_EQ(x.size(), y.size()) << g;
    ASSERT_FALSE(x.empty()) << g;
    for (const auto& [n, bytes] : x) EXPECT_TRUE(y.at(n) == bytes) << g << "/" << n << " differs";
  }
}

// The 100-step reference run. ctest runs every test in its own process, so the run is kept on disk (keyed by
// the binary's size and time) and shared under a lock instead of being trained again by each test.
const Job& straight_run() {
  static Job job = [] {
    struct stat st {};
    stat(PRIMUS_BINARY, &st);
    const std::string key = fmt::format("{}-{}-{}", getuid(), static_cast<long long>(st.st_size),
                                        static_cast<long long>(st.st_mtime));
    Job j;
    j.workspace = (fs::temp_directory_path() / ("primus-ckpt-e2e-straight-" + key)).string();
    j.exp = "straight";
    j.save = j.workspace + "/ckpt";
    const std::string lock_path = j.workspace + ".lock";
    const int lock = open(lock_path.c_str(), O_RDWR | O_CREAT, 0644);
    flock(lock, LOCK_EX);
    if (!fs::exists(j.workspace + "/done")) {
      fs::remove_all(j.workspace);
      fs::create_directories(j.workspace);
      CliResult r = j.run({"--train_iters", "100"});
      EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
      if (r.exit_code == 0) std::ofstream(j.workspace + "/done") << "ok\n";
    }
    flock(lock, LOCK_UN);
    close(lock);
    return j;
  }();
  return job;
}

class CheckpointE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kFortunes)) GTEST_SKIP() << "Debian fortunes not installed";
  }
  void TearDown() override {
    // Failed tests keep their directories for inspection.
    for (const std::string& d : scratch_dirs())
      if (!HasFailure()) fs::remove_all(d);
    scratch_dirs().clear();
  }
};

}  // namespace

TEST_F(CheckpointE2E, ExitIntervalThenResumeIsBitwiseEqualToStraightRun) {
  const Job& ref = straight_run();
  ASSERT_EQ(ref.steps().size(), 100u);
  Job j = make_job("halves");
  CliResult a = j.run({"--train_iters", "100", "--exit_interval", "50"});
  ASSERT_EQ(a.exit_code, 0) << a.err << a.out;
  EXPECT_NE(a.out.find("exit_interval 50 reached"), std::string::npos) << a.out;
  EXPECT_EQ(j.steps().size(), 50u);
  EXPECT_EQ(*ckpt::read_latest_pointer(j.save), j.ckpt(50));
  CliResult b = j.run({"--train_iters", "100", "--resume", "auto"});
  ASSERT_EQ(b.exit_code, 0) << b.err << b.out;
  EXPECT_NE(b.out.find("resuming from " + j.ckpt(50)), std::string::npos) << b.out;
  expect_same_losses(ref.steps(), j.steps());
  expect_same_state(ref.ckpt(100), j.ckpt(100));
}

TEST_F(CheckpointE2E, SigtermSavesAndExitsZeroThenResumesBitwise) {
  const Job& ref = straight_run();
  Job j = make_job("sigterm");
  const pid_t pid = spawn_primus(j.args({"--train_iters", "100"}), j.env(), j.workspace);
  ASSERT_TRUE(wait_for_steps(j, pid, 30));
  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid), 0) << slurp(j.workspace + "/spawn.err");
  const nlohmann::json summary = nlohmann::json::parse(slurp(j.run_dir() + "/summary.json"));
  EXPECT_EQ(summary["stop_reason"], "received SIGTERM");
  const int64_t stopped = summary["last_iteration"].get<int64_t>();
  EXPECT_LT(stopped, 100);
  EXPECT_EQ(*ckpt::read_latest_pointer(j.save), j.ckpt(stopped));  // the step it finished was saved
  CliResult b = j.run({"--train_iters", "100", "--resume", "auto"});
  ASSERT_EQ(b.exit_code, 0) << b.err << b.out;
  expect_same_losses(ref.steps(), j.steps());
  expect_same_state(ref.ckpt(100), j.ckpt(100));
}

TEST_F(CheckpointE2E, KillNineDuringAsyncSavesThenAutoResumeIsBitwise) {
  const Job& ref = straight_run();
  Job j = make_job("kill9");
  // Async saves every 10 steps, each write slowed down so that the kill is likely to land inside one.
  const std::vector<std::string> ov = {"--train_iters", "100", "--save_interval", "10",
                                       "--async_save",  "true"};
  const pid_t pid = spawn_primus(j.args(ov), j.env({{"PRIMUS_CKPT_SLOW_WRITE_MS", "20"}}), j.workspace);
  ASSERT_TRUE(wait_for_steps(j, pid, 55));
  kill(pid, SIGKILL);
  EXPECT_EQ(wait_exit(pid), 128 + SIGKILL);
  const std::string err = slurp(j.workspace + "/spawn.out");
  EXPECT_NE(err.find("training blocked"), std::string::npos) << err;  // the async save reports its cost
  std::vector<std::string> resume = ov;
  resume.insert(resume.end(), {"--resume", "auto"});
  CliResult b = j.run(resume);
  ASSERT_EQ(b.exit_code, 0) << b.err << b.out;
  EXPECT_NE(b.out.find("resuming from"), std::string::npos) << b.out;
  expect_same_losses(ref.steps(), j.steps());
  expect_same_state(ref.ckpt(100), j.ckpt(100));
}

TEST_F(CheckpointE2E, CrashInsideTheSecondSaveKeepsTheFirstAndResumes) {
  Job j = make_job("crash");
  const std::vector<std::string> ov = {"--train_iters", "6", "--save_interval", "2"};
  CliResult a = j.run(ov, {{"PRIMUS_CKPT_CRASH_AT", "shard@2"}});
  EXPECT_EQ(a.exit_code, 128 + SIGKILL) << a.err;
  EXPECT_EQ(*ckpt::read_latest_pointer(j.save), j.ckpt(2));
  EXPECT_EQ(ckpt::list_checkpoint_dirs(j.save), (std::vector<std::string>{j.ckpt(2)}));
  std::vector<std::string> resume = ov;
  resume.insert(resume.end(), {"--resume", "auto"});
  CliResult b = j.run(resume);
  ASSERT_EQ(b.exit_code, 0) << b.err << b.out;
  EXPECT_NE(b.out.find("resuming from " + j.ckpt(2)), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("interrupted save"), std::string::npos) << b.out;  // the partial directory was removed
  for (const auto& e : fs::directory_iterator(j.save)) EXPECT_NE(e.path().filename().string()[0], '.');
  EXPECT_EQ(j.steps().size(), 6u);
}

TEST_F(CheckpointE2E, CorruptNewestFallsBackUnderAutoResumeAndFailsWhenExplicit) {
  Job j = make_job("corrupt");
  CliResult a = j.run({"--train_iters", "4", "--save_interval", "2"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const std::string bad = j.ckpt(4) + "/model_rank0.safetensors";
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(300);
    char c = 0;
    f.read(&c, 1);
    f.seekp(300);
    c = static_cast<char>(c ^ 0x04);
    f.write(&c, 1);
  }
  // An explicit path never falls back: exit 1, naming the file.
  CliResult x = j.run({"--train_iters", "6", "--resume", j.ckpt(4)});
  EXPECT_EQ(x.exit_code, 1);
  EXPECT_NE(x.err.find(bad), std::string::npos) << x.err;
  EXPECT_NE(x.err.find("checksum mismatch"), std::string::npos) << x.err;
  // auto-resume falls back to iteration 2 and says which file was bad.
  CliResult b = j.run({"--train_iters", "6", "--save_interval", "2", "--resume", "auto"});
  ASSERT_EQ(b.exit_code, 0) << b.err << b.out;
  EXPECT_NE((b.out + b.err).find(bad), std::string::npos) << b.out << b.err;
  EXPECT_NE(b.out.find("resuming from " + j.ckpt(2)), std::string::npos) << b.out;
  EXPECT_EQ(j.steps().size(), 6u);
  EXPECT_TRUE(ckpt::verify_checkpoint(j.ckpt(6)).ok);
}

TEST_F(CheckpointE2E, NanSkipLeavesParametersAndMomentsBitwiseUnchanged) {
  Job j = make_job("nanskip");
  CliResult r =
      j.run({"--train_iters", "4", "--save_interval", "1", "--keep_latest_k", "10", "--nan_policy", "skip"},
            {{"PRIMUS_INJECT_NAN", "3:layers.1.mlp.down_proj.weight:7"}});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.err.find("iteration 3: skipped the update"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("layers.1.mlp.down_proj.weight (layer 1, element 7)"), std::string::npos) << r.err;
  const auto steps = j.steps();
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_TRUE(steps[2].value("skipped", false));
  EXPECT_FALSE(steps[3].value("skipped", false));
  EXPECT_TRUE(std::isfinite(steps[3]["loss"].get<double>()));
  expect_same_state(j.ckpt(2), j.ckpt(3));
  // Training goes on normally after the skipped step.
  EXPECT_FALSE(group_bytes(j.ckpt(3), "model") == group_bytes(j.ckpt(4), "model"));
  const nlohmann::json st3 = nlohmann::json::parse(slurp(j.ckpt(3) + "/state.json"));
  EXPECT_EQ(st3["optimizer_steps"], 2);
  EXPECT_EQ(st3["skipped_iterations"], 1);
}

TEST_F(CheckpointE2E, NanHaltExitsFourNamingTensorAndLayer) {
  Job j = make_job("nanhalt");
  CliResult r = j.run({"--train_iters", "4", "--save_interval", "1"},
                      {{"PRIMUS_INJECT_NAN", "2:layers.0.self_attn.qkv_proj.weight:3"}});
  EXPECT_EQ(r.exit_code, 4) << r.err << r.out;
  EXPECT_NE(r.err.find("layers.0.self_attn.qkv_proj.weight (layer 0, element 3)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("nan_policy: halt"), std::string::npos) << r.err;
  // Halted before the update of iteration 2: the last checkpoint is iteration 1, nothing later.
  EXPECT_EQ(ckpt::list_checkpoint_dirs(j.save), (std::vector<std::string>{j.ckpt(1)}));
}

TEST_F(CheckpointE2E, LossSpikeWarnsOrSkips) {
  Job w = make_job("spikewarn");
  CliResult a =
      w.run({"--train_iters", "6", "--check_for_spiky_loss", "true"}, {{"PRIMUS_INJECT_LOSS_SPIKE", "5:20"}});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.err.find("iteration 5: loss spike"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("spiky_loss_policy: warn"), std::string::npos) << a.err;
  EXPECT_FALSE(w.steps()[4].value("skipped", false));

  Job s = make_job("spikeskip");
  CliResult b = s.run({"--train_iters", "6", "--save_interval", "1", "--keep_latest_k", "10",
                       "--check_for_spiky_loss", "true", "--spiky_loss_policy", "skip"},
                      {{"PRIMUS_INJECT_LOSS_SPIKE", "5:20"}});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(b.err.find("spiky_loss_policy: skip"), std::string::npos) << b.err;
  EXPECT_TRUE(s.steps()[4].value("skipped", false));
  expect_same_state(s.ckpt(4), s.ckpt(5));
}

TEST_F(CheckpointE2E, ExitDurationAndKeepLatestK) {
  Job j = make_job("duration");
  CliResult r = j.run({"--train_iters", "500", "--save_interval", "1", "--keep_latest_k", "2",
                       "--exit_duration_in_mins", "0.02"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("exit_duration_in_mins 0.02 reached"), std::string::npos) << r.out;
  const int64_t last = nlohmann::json::parse(slurp(j.run_dir() + "/summary.json"))["last_iteration"];
  EXPECT_LT(last, 500);
  // Saved every step, the newest two kept (one when the machine was slow enough to stop after step 1).
  const std::vector<std::string> kept = last >= 2 ? std::vector<std::string>{j.ckpt(last), j.ckpt(last - 1)}
                                                  : std::vector<std::string>{j.ckpt(last)};
  EXPECT_EQ(ckpt::list_checkpoint_dirs(j.save), kept);
  EXPECT_EQ(*ckpt::read_latest_pointer(j.save), j.ckpt(last));
  // keep_latest_k: 1 is refused (the newest may still be in flight).
  CliResult bad = j.run({"--train_iters", "5", "--keep_latest_k", "1"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("keep_latest_k"), std::string::npos) << bad.err;
}

TEST_F(CheckpointE2E, FinetuneFromHuggingFaceDirectory) {
  // An HF Llama with micro_llama's dimensions (vocabulary = its padded byte vocabulary, 264 rows).
  Job j = make_job("finetune");
  const std::string hf = j.workspace + "/hf";
  {
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 0.05f);
    std::vector<std::pair<std::string, Shape>> shapes = {{"model.embed_tokens.weight", {264, 64}}};
    for (int l = 0; l < 2; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      shapes.insert(shapes.end(), {{p + "input_layernorm.weight", {64}},
                                   {p + "self_attn.q_proj.weight", {64, 64}},
                                   {p + "self_attn.k_proj.weight", {32, 64}},
                                   {p + "self_attn.v_proj.weight", {32, 64}},
                                   {p + "self_attn.o_proj.weight", {64, 64}},
                                   {p + "post_attention_layernorm.weight", {64}},
                                   {p + "mlp.gate_proj.weight", {192, 64}},
                                   {p + "mlp.up_proj.weight", {192, 64}},
                                   {p + "mlp.down_proj.weight", {64, 192}}});
    }
    shapes.insert(shapes.end(), {{"model.norm.weight", {64}}, {"lm_head.weight", {264, 64}}});
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& [name, shape] : shapes) {
      Tensor t = Tensor::empty(shape, DType::kF32);
      const float base = name.find("norm") != std::string::npos ? 1.0f : 0.0f;
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = base + nd(rng);
      tensors.emplace_back(name, ckpt::from_f32(t, DType::kBF16));
    }
    nlohmann::ordered_json cfg = {{"architectures", {"LlamaForCausalLM"}},
                                  {"model_type", "llama"},
                                  {"hidden_size", 64},
                                  {"intermediate_size", 192},
                                  {"num_hidden_layers", 2},
                                  {"num_attention_heads", 4},
                                  {"num_key_value_heads", 2},
                                  {"max_position_embeddings", 512},
                                  {"rms_norm_eps", 1e-5},
                                  {"vocab_size", 264},
                                  {"tie_word_embeddings", false},
                                  {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
                                  {"dtype", "bfloat16"}};
    ckpt::write_hf_dir(hf, tensors, cfg, 50'000);  // sharded, with an index
  }
  // The convert CLI makes a Primus checkpoint of it, which verifies.
  CliResult c =
      run_primus({"convert", "hf-to-primus", "--input", hf, "--output", j.workspace + "/converted"});
  ASSERT_EQ(c.exit_code, 0) << c.err << c.out;
  EXPECT_EQ(run_primus({"checkpoint", "verify", j.workspace + "/converted"}).exit_code, 0);

  // Fine-tuning from the HF directory and from its conversion trains identically (bitwise), and differently
  // from a fresh initialisation.
  const std::vector<std::string> ov = {"--train_iters", "3", "--finetune", "true"};
  std::vector<std::string> from_hf = ov, from_ckpt = ov;
  from_hf.insert(from_hf.end(), {"--load", hf});
  from_ckpt.insert(from_ckpt.end(), {"--load", j.workspace + "/converted"});
  CliResult a = j.run(from_hf);
  ASSERT_EQ(a.exit_code, 0) << a.err << a.out;
  EXPECT_NE(a.out.find("loaded Hugging Face weights from " + hf), std::string::npos) << a.out;
  const auto hf_steps = j.steps();
  Job k = make_job("finetune_ckpt");
  CliResult b = k.run(from_ckpt);
  ASSERT_EQ(b.exit_code, 0) << b.err << b.out;
  expect_same_losses(hf_steps, k.steps());
  EXPECT_NE(hf_steps[0]["loss"].dump(), straight_run().steps()[0]["loss"].dump());
  // A model that does not match the HF config is refused, naming the field.
  CliResult bad =
      j.run({"--train_iters", "3", "--finetune", "true", "--load", hf, "--ffn_hidden_size", "128"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("ffn_hidden_size"), std::string::npos) << bad.err;
}

TEST_F(CheckpointE2E, AsyncSnapshotEqualsSyncSaveWhileTrainingMutatesParameters) {
  // Slowed background writes: training runs (and updates the parameters) while each snapshot is written.
  const std::vector<std::string> ov = {"--train_iters", "6", "--save_interval", "2", "--keep_latest_k", "10"};
  Job sync_job = make_job("sync"), async_job = make_job("async");
  std::vector<std::string> async_ov = ov;
  async_ov.insert(async_ov.end(), {"--async_save", "true"});
  CliResult a = async_job.run(async_ov, {{"PRIMUS_CKPT_SLOW_WRITE_MS", "15"}});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.out.find("writing in the background"), std::string::npos) << a.out;
  CliResult s = sync_job.run(ov);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_NE(s.out.find("(synchronous"), std::string::npos) << s.out;
  for (int64_t it : {2, 4, 6}) expect_same_state(sync_job.ckpt(it), async_job.ckpt(it));
}

TEST_F(CheckpointE2E, TorchTitanCheckpointKeysSaveAndAutoResume) {
  Job j = make_job("tt");
  auto run = [&](const std::string& steps) {
    return run_primus(
        {"train", "pretrain", "--config", project_dir() + "/configs/examples/torchtitan/micro_llama-cpu.yaml",
         "--training.steps", steps, "--checkpoint.enable", "true", "--checkpoint.interval", "3",
         "--checkpoint.keep_latest_k", "2"},
        j.env({{"PRIMUS_TEAM", "e2e"}}));
  };
  CliResult a = run("6");
  ASSERT_EQ(a.exit_code, 0) << a.err << a.out;
  EXPECT_NE(a.out.find("iter_0000006"), std::string::npos) << a.out;
  CliResult b = run("9");  // checkpoint.enable resumes from the newest valid checkpoint of the run
  ASSERT_EQ(b.exit_code, 0) << b.err << b.out;
  EXPECT_NE(b.out.find("resuming from"), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("iter_0000006"), std::string::npos) << b.out;
  EXPECT_EQ(j.steps().size(), 9u);
}
