// PEFT LoRA adapters (checkpoint/peft_adapter.h, docs/posttrain.md): our fused adapters written as per-module
// PEFT adapters and read back; the q/k/v and gate/up row split of lora_B; merge_lora_into_hf against
// W + (alpha / r) B A computed here in double from the HF tensors (names spelled by the test, never through
// the name map); malformed adapters and adapters of another base model refused, naming the file, module or
// tensor, with nothing written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "checkpoint/file_io.h"
#include "checkpoint/hf_config.h"
#include "checkpoint/hf_weights.h"
#include "checkpoint/peft_adapter.h"
#include "checkpoint/safetensors.h"
#include "checkpoint_test_util.h"
#include "core/dtype.h"
#include "hf_test_util.h"

namespace fs = std::filesystem;
using namespace primus;
using nlohmann::json;
using primus::hf_test::error_of;

namespace {

// A scratch directory removed with the test.
struct Scratch {
  std::string dir;
  explicit Scratch(const std::string& tag) : dir(ckpt_test::scratch_dir(tag)) {}
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

// A small Llama with grouped-query attention and odd sizes: q 27 rows, k and v 9 each, hidden 33, ffn 31.
constexpr int64_t kHidden = 33, kHeads = 3, kKv = 1, kHeadDim = 9, kFfn = 31, kLayers = 2, kVocab = 50;
constexpr int64_t kQ = kHeads * kHeadDim, kKvDim = kKv * kHeadDim;
constexpr int64_t kRank = 5;
constexpr double kAlpha = 7;

json llama_config(int64_t ffn = kFfn) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", kHidden},
          {"intermediate_size", ffn},
          {"num_hidden_layers", kLayers},
          {"num_attention_heads", kHeads},
          {"num_key_value_heads", kKv},
          {"head_dim", kHeadDim},
          {"hidden_act", "silu"},
          {"max_position_embeddings", 128},
          {"rms_norm_eps", 1e-5},
          {"vocab_size", kVocab},
          {"tie_word_embeddings", false},
          {"rope_theta", 10000.0},
          {"bos_token_id", 1},
          {"torch_dtype", "float32"}};
}

ModelConfig llama_model() {
  return ckpt::model_config_from_hf(llama_config(), "test config").model;
}

LoraConfig lora_config() {
  LoraConfig l;
  l.enabled = true;
  l.rank = kRank;
  l.alpha = kAlpha;
  l.dropout = 0.05;
  l.targets = {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};
  return l;
}

Tensor random_f32(const Shape& shape, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 0.3f);
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = nd(rng);
  return t;
}

// Our adapters (whole-model names and shapes) for every target of every layer.
std::vector<ckpt::LoraTensor> our_adapters(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<ckpt::LoraTensor> out;
  auto add = [&](const std::string& proj, int64_t out_dim, int64_t in_dim) {
    out.push_back({proj + ".lora_A.weight", random_f32({kRank, in_dim}, rng)});
    out.push_back({proj + ".lora_B.weight", random_f32({out_dim, kRank}, rng)});
  };
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    add(p + "self_attn.qkv_proj", kQ + 2 * kKvDim, kHidden);
    add(p + "self_attn.o_proj", kHidden, kQ);
    add(p + "mlp.gate_up_proj", 2 * kFfn, kHidden);
    add(p + "mlp.down_proj", kHidden, kFfn);
  }
  return out;
}

const Tensor& find(const std::vector<ckpt::LoraTensor>& v, const std::string& name) {
  for (const auto& t : v)
    if (t.name == name) return t.value;
  throw std::runtime_error("no adapter " + name);
}

Tensor rows(const Tensor& t, int64_t begin, int64_t end) {
  return t.narrow(0, begin, end - begin);
}

void expect_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const Tensor x = ckpt::to_f32(a), y = ckpt::to_f32(b);
  for (int64_t i = 0; i < x.numel(); ++i)
    ASSERT_EQ(x.data<float>()[i], y.data<float>()[i]) << what << " element " << i;
}

// A base HF Llama directory (f32 or bf16) with a tokenizer file beside the weights.
hf_test::HfTensors write_base(const std::string& dir, DType dt, int64_t ffn = kFfn, uint64_t shard = 0) {
  hf_test::HfTensors t(dt, 11);
  t.add("model.embed_tokens.weight", {kVocab, kHidden});
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.add(p + "input_layernorm.weight", {kHidden});
    t.add(p + "self_attn.q_proj.weight", {kQ, kHidden});
    t.add(p + "self_attn.k_proj.weight", {kKvDim, kHidden});
    t.add(p + "self_attn.v_proj.weight", {kKvDim, kHidden});
    t.add(p + "self_attn.o_proj.weight", {kHidden, kQ});
    t.add(p + "post_attention_layernorm.weight", {kHidden});
    t.add(p + "mlp.gate_proj.weight", {ffn, kHidden});
    t.add(p + "mlp.up_proj.weight", {ffn, kHidden});
    t.add(p + "mlp.down_proj.weight", {kHidden, ffn});
  }
  t.add("model.norm.weight", {kHidden});
  t.add("lm_head.weight", {kVocab, kHidden});
  json cfg = llama_config(ffn);
  cfg["torch_dtype"] = ckpt::dtype_to_torch(dt);
  t.write(dir, cfg, shard);
  std::ofstream(dir + "/tokenizer.json") << "{\"model\": {\"type\": \"BPE\"}}";
  return t;
}

// A PEFT directory written by hand (not through write_peft_adapter): `modules` -> (A, B).
void write_peft_by_hand(const std::string& dir,
                        const std::vector<std::pair<std::string, ckpt::PeftModule>>& modules,
                        json config = {}) {
  fs::create_directories(dir);
  if (config.is_null())
    config = {{"peft_type", "LORA"},
              {"task_type", "CAUSAL_LM"},
              {"r", kRank},
              {"lora_alpha", kAlpha},
              {"lora_dropout", 0.0},
              {"bias", "none"},
              {"target_modules", {"v_proj", "down_proj", "q_proj"}},
              {"use_dora", false},
              {"use_rslora", false}};
  std::ofstream(dir + "/adapter_config.json") << config.dump(2);
  ckpt::SafetensorsWriter w;
  for (const auto& [m, t] : modules) {
    w.add("base_model.model." + m + ".lora_A.weight", DType::kF32, t.a.shape(), t.a.data_ptr());
    w.add("base_model.model." + m + ".lora_B.weight", DType::kF32, t.b.shape(), t.b.data_ptr());
  }
  w.write(dir + "/adapter_model.safetensors");
}

// W + scale B A in double, from the tensors themselves.
std::vector<double> merged_reference(const Tensor& w, const Tensor& a, const Tensor& b, double scale) {
  const Tensor wf = ckpt::to_f32(w);
  const int64_t out = w.size(0), in = w.size(1), r = a.size(0);
  std::vector<double> ref(static_cast<size_t>(out * in));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      double d = 0;
      for (int64_t k = 0; k < r; ++k)
        d += static_cast<double>(b.data<float>()[o * r + k]) * a.data<float>()[k * in + i];
      ref[o * in + i] = wf.data<float>()[o * in + i] + scale * d;
    }
  return ref;
}

Tensor read_tensor(const std::string& dir, const std::string& name) {
  ckpt::HfCheckpoint hf(dir);
  return hf.read(name);
}

// Each HF module of a layer: our fused projection, the module, and its rows [begin, end) in the fused weight.
struct ModulePart {
  const char* ours;
  const char* module;
  int64_t begin, end;
};
constexpr ModulePart kModuleParts[] = {
    {"self_attn.qkv_proj", "self_attn.q_proj", 0, kQ},
    {"self_attn.qkv_proj", "self_attn.k_proj", kQ, kQ + kKvDim},
    {"self_attn.qkv_proj", "self_attn.v_proj", kQ + kKvDim, kQ + 2 * kKvDim},
    {"self_attn.o_proj", "self_attn.o_proj", 0, kHidden},
    {"mlp.gate_up_proj", "mlp.gate_proj", 0, kFfn},
    {"mlp.gate_up_proj", "mlp.up_proj", kFfn, 2 * kFfn},
    {"mlp.down_proj", "mlp.down_proj", 0, kHidden},
};

}  // namespace

TEST(CheckpointPeft, WriteThenReadGivesEveryModuleWithItsRowBlockOfB) {
  const Scratch scratch("peft-rt");
  const std::string dir = scratch.dir + "/adapter";
  const std::vector<ckpt::LoraTensor> ours = our_adapters(3);
  const ckpt::PeftWriteReport w = ckpt::write_peft_adapter(dir, ours, llama_model(), lora_config(),
                                                           llama_config().dump(), "org/tiny-llama");
  EXPECT_EQ(w.model_type, "llama");
  EXPECT_EQ(w.modules, 7 * kLayers);
  const std::vector<std::string> targets = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                            "gate_proj", "up_proj", "down_proj"};
  EXPECT_EQ(w.target_modules, targets);

  // adapter_config.json: what PeftModel.from_pretrained needs.
  const json c = hf_test::read_json(dir + "/adapter_config.json");
  EXPECT_EQ(c["peft_type"], "LORA");
  EXPECT_EQ(c["task_type"], "CAUSAL_LM");
  EXPECT_EQ(c["r"], kRank);
  EXPECT_EQ(c["lora_alpha"], 7);
  EXPECT_TRUE(c["lora_alpha"].is_number_integer());
  EXPECT_DOUBLE_EQ(c["lora_dropout"].get<double>(), 0.05);
  EXPECT_EQ(c["target_modules"], json(targets));
  EXPECT_EQ(c["bias"], "none");
  EXPECT_EQ(c["base_model_name_or_path"], "org/tiny-llama");
  for (const char* k : {"fan_in_fan_out", "use_rslora", "use_dora"}) EXPECT_EQ(c[k], false) << k;
  EXPECT_EQ(c["inference_mode"], true);
  EXPECT_EQ(c["init_lora_weights"], true);
  EXPECT_TRUE(c["modules_to_save"].is_null());

  // The safetensors keys and shapes PEFT expects, all f32.
  const auto file = hf_test::read_all(dir);
  EXPECT_EQ(file.size(), static_cast<size_t>(2 * 7 * kLayers));
  const std::string p0 = "base_model.model.model.layers.0.";
  const std::map<std::string, Shape> want = {{p0 + "self_attn.q_proj.lora_A.weight", {kRank, kHidden}},
                                             {p0 + "self_attn.q_proj.lora_B.weight", {kQ, kRank}},
                                             {p0 + "self_attn.k_proj.lora_B.weight", {kKvDim, kRank}},
                                             {p0 + "self_attn.v_proj.lora_B.weight", {kKvDim, kRank}},
                                             {p0 + "self_attn.o_proj.lora_A.weight", {kRank, kQ}},
                                             {p0 + "self_attn.o_proj.lora_B.weight", {kHidden, kRank}},
                                             {p0 + "mlp.gate_proj.lora_B.weight", {kFfn, kRank}},
                                             {p0 + "mlp.up_proj.lora_B.weight", {kFfn, kRank}},
                                             {p0 + "mlp.down_proj.lora_A.weight", {kRank, kFfn}},
                                             {p0 + "mlp.down_proj.lora_B.weight", {kHidden, kRank}}};
  for (const auto& [name, shape] : want) {
    auto it = file.find(name);
    ASSERT_NE(it, file.end()) << name;
    EXPECT_EQ(it->second.first.shape, shape) << name;
    EXPECT_EQ(it->second.first.dtype, "F32") << name;
  }

  // Read back: every part has the fused A and its rows of the fused B, bitwise.
  const ckpt::PeftAdapter a = ckpt::read_peft_adapter(dir);
  EXPECT_EQ(a.r, kRank);
  EXPECT_DOUBLE_EQ(a.alpha, kAlpha);
  EXPECT_DOUBLE_EQ(a.scale(), kAlpha / kRank);
  EXPECT_EQ(a.target_modules, targets);
  EXPECT_EQ(a.modules.size(), static_cast<size_t>(7 * kLayers));
  for (int l = 0; l < kLayers; ++l) {
    const std::string o = "layers." + std::to_string(l) + ".", h = "model.layers." + std::to_string(l) + ".";
    auto check = [&](const std::string& proj, const std::string& module, int64_t begin, int64_t end) {
      auto it = a.modules.find(h + module);
      ASSERT_NE(it, a.modules.end()) << h + module;
      expect_equal(it->second.a, find(ours, o + proj + ".lora_A.weight"), h + module + " A");
      expect_equal(it->second.b, rows(find(ours, o + proj + ".lora_B.weight"), begin, end),
                   h + module + " B");
    };
    for (const ModulePart& m : kModuleParts) check(m.ours, m.module, m.begin, m.end);
  }
}

TEST(CheckpointPeft, WithoutABaseConfigTheFamilyComesFromTheModel) {
  const Scratch scratch("peft-family");
  const std::string& root = scratch.dir;
  std::vector<ckpt::LoraTensor> only_o;
  for (const auto& t : our_adapters(4))
    if (t.name.find("o_proj") != std::string::npos) only_o.push_back(t);
  const ckpt::PeftWriteReport w =
      ckpt::write_peft_adapter(root + "/a", only_o, llama_model(), lora_config(), "", "");
  EXPECT_EQ(w.model_type, "llama");
  EXPECT_EQ(w.target_modules, std::vector<std::string>{"o_proj"});
  EXPECT_TRUE(hf_test::read_json(root + "/a/adapter_config.json")["base_model_name_or_path"].is_null());
  // Nothing but the directory itself is left in its parent (the staging directory was renamed).
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(root)) entries += e.path().filename() == "a" ? 1 : 100;
  EXPECT_EQ(entries, 1u);
}

TEST(CheckpointPeft, ExportRefusesUnpairedOrMisshapenAdapters) {
  const Scratch scratch("peft-export-bad");
  const std::string& root = scratch.dir;
  std::vector<ckpt::LoraTensor> v = our_adapters(5);
  std::vector<ckpt::LoraTensor> no_b;
  for (const auto& t : v)
    if (t.name != "layers.1.mlp.down_proj.lora_B.weight") no_b.push_back(t);
  std::string e =
      error_of([&] { ckpt::write_peft_adapter(root + "/x", no_b, llama_model(), lora_config(), "", ""); });
  EXPECT_NE(e.find("layers.1.mlp.down_proj.lora_A.weight has no lora_B"), std::string::npos) << e;
  LoraConfig wrong_rank = lora_config();
  wrong_rank.rank = 4;
  e = error_of([&] { ckpt::write_peft_adapter(root + "/x", v, llama_model(), wrong_rank, "", ""); });
  EXPECT_NE(e.find("lora rank 4"), std::string::npos) << e;
  std::vector<ckpt::LoraTensor> unknown = {
      {"layers.0.self_attn.nope.lora_A.weight", Tensor::zeros({kRank, 3}, DType::kF32)},
      {"layers.0.self_attn.nope.lora_B.weight", Tensor::zeros({3, kRank}, DType::kF32)}};
  e = error_of([&] { ckpt::write_peft_adapter(root + "/x", unknown, llama_model(), lora_config(), "", ""); });
  EXPECT_NE(e.find("layers.0.self_attn.nope.weight, which a llama model does not have"), std::string::npos)
      << e;
  EXPECT_FALSE(fs::exists(root + "/x"));
  // An existing, non-empty output is never overwritten.
  fs::create_directories(root + "/full");
  std::ofstream(root + "/full/keep") << "x";
  e = error_of([&] { ckpt::write_peft_adapter(root + "/full", v, llama_model(), lora_config(), "", ""); });
  EXPECT_NE(e.find("exists and is not empty"), std::string::npos) << e;
}

TEST(CheckpointPeft, MergeEqualsWPlusScaledBAOfEachPart) {
  const Scratch scratch("peft-merge");
  const std::string& root = scratch.dir;
  const hf_test::HfTensors base = write_base(root + "/base", DType::kF32);
  const std::vector<ckpt::LoraTensor> ours = our_adapters(8);
  ckpt::write_peft_adapter(root + "/adapter", ours, llama_model(), lora_config(), "", "base");
  const ckpt::MergeLoraReport r =
      ckpt::merge_lora_into_hf(root + "/base", root + "/adapter", root + "/merged", "float32", 4000);
  EXPECT_EQ(r.model_type, "llama");
  EXPECT_EQ(r.dtype, "float32");
  EXPECT_EQ(r.merged, 7 * kLayers);
  EXPECT_TRUE(fs::exists(root + "/merged/model.safetensors.index.json"));  // sharded as asked
  EXPECT_EQ(hf_test::read_all(root + "/merged").size(), base.list.size());

  const double scale = kAlpha / kRank;
  ckpt::HfCheckpoint merged(root + "/merged");
  for (int l = 0; l < kLayers; ++l) {
    const std::string o = "layers." + std::to_string(l) + ".", h = "model.layers." + std::to_string(l) + ".";
    auto check = [&](const std::string& proj, const std::string& module, int64_t begin, int64_t end) {
      const Tensor a = find(ours, o + proj + ".lora_A.weight");
      const Tensor b =
          ckpt::to_f32(rows(find(ours, o + proj + ".lora_B.weight"), begin, end).to(Stream::cpu()));
      const std::string name = h + module + ".weight";
      const std::vector<double> ref = merged_reference(base.get(name), a, b, scale);
      const Tensor got = merged.read_f32(name);
      ASSERT_EQ(got.numel(), static_cast<int64_t>(ref.size())) << name;
      for (size_t i = 0; i < ref.size(); ++i)
        ASSERT_NEAR(got.data<float>()[i], ref[i], 1e-5 * (1 + std::abs(ref[i]))) << name << " element " << i;
    };
    for (const ModulePart& m : kModuleParts) check(m.ours, m.module, m.begin, m.end);
    expect_equal(merged.read(h + "input_layernorm.weight"), base.get(h + "input_layernorm.weight"), "norm");
  }
  for (const char* n : {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"})
    expect_equal(merged.read(n), base.get(n), n);  // untouched, bitwise
  // config.json and the tokenizer come from the base.
  hf_test::expect_config_kept(hf_test::read_json(root + "/base/config.json"),
                              hf_test::read_json(root + "/merged/config.json"));
  EXPECT_EQ(ckpt::read_text_file(root + "/merged/tokenizer.json"),
            ckpt::read_text_file(root + "/base/tokenizer.json"));
}

TEST(CheckpointPeft, MergeOfAHandWrittenAdapterRoundsOnceToBf16) {
  // A bf16 base, an adapter on a few modules written directly in PEFT's layout, a bf16 output: each adapted
  // weight is W + scale B A rounded once (within one bf16 step of the double reference), the rest bitwise.
  const Scratch scratch("peft-merge-bf16");
  const std::string& root = scratch.dir;
  const hf_test::HfTensors base = write_base(root + "/base", DType::kBF16);
  std::mt19937 rng(21);
  std::vector<std::pair<std::string, ckpt::PeftModule>> mods = {
      {"model.layers.1.self_attn.v_proj",
       {random_f32({kRank, kHidden}, rng), random_f32({kKvDim, kRank}, rng)}},
      {"model.layers.0.mlp.down_proj", {random_f32({kRank, kFfn}, rng), random_f32({kHidden, kRank}, rng)}}};
  write_peft_by_hand(root + "/adapter", mods);
  const ckpt::MergeLoraReport r =
      ckpt::merge_lora_into_hf(root + "/base", root + "/adapter", root + "/merged", "");
  EXPECT_EQ(r.dtype, "bfloat16");  // the base's
  EXPECT_EQ(r.merged, 2);
  ckpt::HfCheckpoint merged(root + "/merged");
  for (const auto& [module, m] : mods) {
    const std::string name = module + ".weight";
    EXPECT_EQ(merged.st_dtype(name), "BF16");
    const std::vector<double> ref = merged_reference(base.get(name), m.a, m.b, kAlpha / kRank);
    const Tensor got = merged.read_f32(name);
    for (size_t i = 0; i < ref.size(); ++i)
      ASSERT_NEAR(got.data<float>()[i], ref[i], std::abs(ref[i]) / 128 + 1e-30) << name << " element " << i;
  }
  for (const auto& [name, t] : base.list)
    if (name != "model.layers.1.self_attn.v_proj.weight" && name != "model.layers.0.mlp.down_proj.weight")
      expect_equal(merged.read(name), t, name);
}

TEST(CheckpointPeft, AdapterOfAnotherBaseIsRefusedNamingModuleAndShapes) {
  const Scratch scratch("peft-wrong-base");
  const std::string& root = scratch.dir;
  write_base(root + "/base", DType::kF32, /*ffn=*/29);  // the adapter below is for ffn 31
  std::mt19937 rng(2);
  write_peft_by_hand(root + "/adapter",
                     {{"model.layers.0.mlp.down_proj",
                       {random_f32({kRank, kFfn}, rng), random_f32({kHidden, kRank}, rng)}}});
  std::string e =
      error_of([&] { ckpt::merge_lora_into_hf(root + "/base", root + "/adapter", root + "/out", ""); });
  EXPECT_NE(e.find("model.layers.0.mlp.down_proj"), std::string::npos) << e;
  EXPECT_NE(e.find("[33, 31]"), std::string::npos) << e;  // the adapter's B A
  EXPECT_NE(e.find("[33, 29]"), std::string::npos) << e;  // the base's weight
  EXPECT_FALSE(fs::exists(root + "/out"));

  write_peft_by_hand(root + "/adapter3",
                     {{"model.layers.2.self_attn.q_proj",
                       {random_f32({kRank, kHidden}, rng), random_f32({kQ, kRank}, rng)}}});
  e = error_of([&] { ckpt::merge_lora_into_hf(root + "/base", root + "/adapter3", root + "/out", ""); });
  EXPECT_NE(e.find("adapter module model.layers.2.self_attn.q_proj"), std::string::npos) << e;
  EXPECT_NE(e.find("no tensor model.layers.2.self_attn.q_proj.weight"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(root + "/out"));
  for (const auto& d : fs::directory_iterator(root))
    EXPECT_EQ(d.path().filename().string().rfind(".tmp-", 0), std::string::npos) << d.path();
}

TEST(CheckpointPeft, MalformedAdaptersAreRefusedNamingFileAndKey) {
  const Scratch scratch("peft-bad");
  const std::string& root = scratch.dir;
  std::mt19937 rng(9);
  const ckpt::PeftModule q{random_f32({kRank, kHidden}, rng), random_f32({kQ, kRank}, rng)};
  const json good = {{"peft_type", "LORA"}, {"r", kRank}, {"lora_alpha", 16}, {"target_modules", {"q_proj"}}};
  int n = 0;
  // Writes an adapter whose config is `c` (a JSON value, or raw text when a string), returns read's error.
  auto error_with = [&](const json& c, std::vector<std::pair<std::string, ckpt::PeftModule>> mods = {}) {
    const std::string dir = root + "/a" + std::to_string(n++);
    if (mods.empty()) mods = {{"model.layers.0.self_attn.q_proj", q}};
    write_peft_by_hand(dir, mods, good);
    std::ofstream(dir + "/adapter_config.json") << (c.is_string() ? c.get<std::string>() : c.dump());
    return error_of([&] { ckpt::read_peft_adapter(dir); });
  };
  auto expect_has = [](const std::string& e, std::initializer_list<const char*> parts) {
    for (const char* p : parts) EXPECT_NE(e.find(p), std::string::npos) << "'" << p << "' not in: " << e;
  };
  expect_has(error_with(std::string("{\"peft_type\": \"LORA\", ")),
             {"adapter_config.json", "not valid JSON"});
  json c = good;
  c.erase("r");
  expect_has(error_with(c), {"adapter_config.json", "'r' must be a positive integer"});
  c = good;
  c.erase("lora_alpha");
  expect_has(error_with(c), {"adapter_config.json", "'lora_alpha'"});
  c = good;
  c.erase("target_modules");
  expect_has(error_with(c), {"adapter_config.json", "'target_modules'"});
  c = good;
  c["peft_type"] = "PREFIX_TUNING";
  expect_has(error_with(c), {"adapter_config.json", "PREFIX_TUNING", "expected \"LORA\""});
  c = good;
  c["use_dora"] = true;
  expect_has(error_with(c), {"adapter_config.json", "'use_dora' true is not supported"});
  c = good;
  c["use_rslora"] = true;
  expect_has(error_with(c), {"adapter_config.json", "'use_rslora' true is not supported"});
  c = good;
  c["rank_pattern"] = {{"q_proj", 8}};
  expect_has(error_with(c), {"adapter_config.json", "'rank_pattern'"});
  // r says 4, the tensors have rank 5.
  c = good;
  c["r"] = 4;
  expect_has(error_with(c), {"adapter_model.safetensors", "model.layers.0.self_attn.q_proj.lora_A.weight",
                             "[5, 33]", "r = 4"});
  // A module outside target_modules.
  expect_has(error_with(good, {{"model.layers.0.self_attn.k_proj", q}}),
             {"adapter_model.safetensors", "model.layers.0.self_attn.k_proj", "target_modules"});

  // lora_A without lora_B.
  {
    const std::string dir = root + "/only-a";
    fs::create_directories(dir);
    std::ofstream(dir + "/adapter_config.json") << good.dump();
    ckpt::SafetensorsWriter w;
    w.add("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", DType::kF32, q.a.shape(),
          q.a.data_ptr());
    w.write(dir + "/adapter_model.safetensors");
    expect_has(error_of([&] { ckpt::read_peft_adapter(dir); }),
               {"adapter_model.safetensors", "q_proj.lora_A.weight has no",
                "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"});
  }
  // Missing files.
  fs::create_directories(root + "/empty");
  expect_has(error_of([&] { ckpt::read_peft_adapter(root + "/empty"); }), {"adapter_config.json", "missing"});
  std::ofstream(root + "/empty/adapter_config.json") << good.dump();
  expect_has(error_of([&] { ckpt::read_peft_adapter(root + "/empty"); }),
             {"adapter_model.safetensors", "missing"});
}
