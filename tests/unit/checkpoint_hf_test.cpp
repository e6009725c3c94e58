// Hugging Face interop (docs/checkpoints.md): hf-to-primus -> primus-to-hf gives back every tensor bitwise
// and every config.json field, for Llama, Qwen 2 and Qwen 3, tied and untied, rope_theta and rope_parameters,
// single-file and sharded; an HF directory loads directly and gives the same logits as its conversion;
// config.json mistakes (no theta, two thetas, sliding windows) are errors naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "checkpoint/convert.h"
#include "checkpoint/hf_config.h"
#include "checkpoint/hf_weights.h"
#include "checkpoint/safetensors.h"
#include "checkpoint_test_util.h"
#include "core/error.h"
#include "core/log.h"
#include "hf_test_util.h"
#include "train/logits.h"

namespace fs = std::filesystem;
using namespace primus;
using nlohmann::json;
using primus::ckpt_test::scratch_dir;
using primus::hf_test::read_all;
using primus::hf_test::read_json;

namespace {

struct HfCase {
  std::string model_type;  // llama | qwen2 | qwen3
  bool tied = false;
  bool nested_rope = false;  // rope_parameters (newer transformers) instead of rope_theta
  bool sharded_input = false;
  std::string dtype = "bfloat16";
  bool llama3_scaling = false;
};

void PrintTo(const HfCase& c, std::ostream* os) {
  *os << c.model_type << (c.tied ? " tied" : " untied")
      << (c.nested_rope ? " rope_parameters" : " rope_theta") << (c.sharded_input ? " sharded " : " single ")
      << c.dtype;
}

int64_t kHfHidden = 64, kHfHeads = 4, kHfKv = 2, kHfFfn = 96, kHfLayers = 2, kHfVocab = 200;

json make_config(const HfCase& c) {
  json j;
  j["architectures"] = {c.model_type == "llama"   ? "LlamaForCausalLM"
                        : c.model_type == "qwen2" ? "Qwen2ForCausalLM"
                                                  : "Qwen3ForCausalLM"};
  j["model_type"] = c.model_type;
  j["hidden_size"] = kHfHidden;
  j["intermediate_size"] = kHfFfn;
  j["num_hidden_layers"] = kHfLayers;
  j["num_attention_heads"] = kHfHeads;
  j["num_key_value_heads"] = kHfKv;
  if (c.model_type == "qwen3") j["head_dim"] = 24;  // not hidden / heads
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = 512;
  j["rms_norm_eps"] = c.model_type == "llama" ? 1e-5 : 1e-6;
  j["vocab_size"] = kHfVocab;
  j["tie_word_embeddings"] = c.tied;
  j["bos_token_id"] = 1;
  j["eos_token_id"] = json::array({2, 3});
  j["transformers_version"] = "4.99.0";
  const double theta = c.model_type == "llama" ? 500000.0 : 1000000.0;
  json scaling = nullptr;
  if (c.llama3_scaling)
    scaling = {{"rope_type", "llama3"},
               {"factor", 8.0},
               {"low_freq_factor", 1.0},
               {"high_freq_factor", 4.0},
               {"original_max_position_embeddings", 256}};
  if (c.nested_rope) {
    json p = scaling.is_null() ? json{{"rope_type", "default"}} : scaling;
    p["rope_theta"] = theta;
    j["rope_parameters"] = p;
    j["dtype"] = c.dtype;
  } else {
    j["rope_theta"] = theta;
    j["rope_scaling"] = scaling;
    j["torch_dtype"] = c.dtype;
  }
  return j;
}

// HF tensors (names, shapes) of a case, with random values in the case's dtype.
std::vector<std::pair<std::string, Tensor>> make_tensors(const HfCase& c, uint32_t seed) {
  const int64_t hd = c.model_type == "qwen3" ? 24 : kHfHidden / kHfHeads;
  std::vector<std::pair<std::string, Shape>> shapes = {{"model.embed_tokens.weight", {kHfVocab, kHfHidden}}};
  for (int l = 0; l < kHfLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    shapes.push_back({p + "input_layernorm.weight", {kHfHidden}});
    shapes.push_back({p + "self_attn.q_proj.weight", {kHfHeads * hd, kHfHidden}});
    shapes.push_back({p + "self_attn.k_proj.weight", {kHfKv * hd, kHfHidden}});
    shapes.push_back({p + "self_attn.v_proj.weight", {kHfKv * hd, kHfHidden}});
    if (c.model_type == "qwen2") {
      shapes.push_back({p + "self_attn.q_proj.bias", {kHfHeads * hd}});
      shapes.push_back({p + "self_attn.k_proj.bias", {kHfKv * hd}});
      shapes.push_back({p + "self_attn.v_proj.bias", {kHfKv * hd}});
    }
    shapes.push_back({p + "self_attn.o_proj.weight", {kHfHidden, kHfHeads * hd}});
    if (c.model_type == "qwen3") {
      shapes.push_back({p + "self_attn.q_norm.weight", {hd}});
      shapes.push_back({p + "self_attn.k_norm.weight", {hd}});
    }
    shapes.push_back({p + "post_attention_layernorm.weight", {kHfHidden}});
    shapes.push_back({p + "mlp.gate_proj.weight", {kHfFfn, kHfHidden}});
    shapes.push_back({p + "mlp.up_proj.weight", {kHfFfn, kHfHidden}});
    shapes.push_back({p + "mlp.down_proj.weight", {kHfHidden, kHfFfn}});
  }
  shapes.push_back({"model.norm.weight", {kHfHidden}});
  if (!c.tied) shapes.push_back({"lm_head.weight", {kHfVocab, kHfHidden}});
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.2f);
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, shape] : shapes) {
    Tensor t = Tensor::empty(shape, DType::kF32);
    const bool norm = name.find("norm") != std::string::npos;
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = (norm ? 1.0f : 0.0f) + nd(rng);
    out.emplace_back(name, ckpt::from_f32(t, ckpt::torch_dtype_to_dtype(c.dtype)));
  }
  return out;
}

std::string write_hf(const HfCase& c, const std::string& dir, uint32_t seed = 5) {
  const auto tensors = make_tensors(c, seed);
  const nlohmann::ordered_json cfg = nlohmann::ordered_json::parse(make_config(c).dump());
  // The writer shards greedily: a small limit gives several files and an index.
  ckpt::write_hf_dir(dir, tensors, cfg, c.sharded_input ? 40'000 : 0);
  return dir;
}

class CheckpointHf : public ::testing::TestWithParam<HfCase> {
 protected:
  void SetUp() override {
    saved_ = log::level();
    log::set_level(log::Level::kWarn);
  }
  void TearDown() override { log::set_level(saved_); }
  log::Level saved_ = log::Level::kInfo;
};

}  // namespace

TEST_P(CheckpointHf, RoundTripIsBitwiseAndKeepsConfigFields) {
  const HfCase c = GetParam();
  const std::string work = scratch_dir("hf-rt");
  const std::string hf = write_hf(c, work + "/hf");
  EXPECT_EQ(fs::exists(hf + "/model.safetensors.index.json"), c.sharded_input);

  ckpt::ConvertReport a = ckpt::convert_hf_to_primus(hf, work + "/primus");
  EXPECT_EQ(a.model_type, c.model_type);
  EXPECT_TRUE(fs::exists(work + "/primus/primus_model.yaml"));
  EXPECT_TRUE(ckpt::verify_checkpoint(a.output).ok);

  ckpt::PrimusToHfOptions o;
  o.max_shard_bytes = c.sharded_input ? 0 : 30'000;  // the other layout on the way back
  ckpt::ConvertReport b = ckpt::convert_primus_to_hf(work + "/primus", work + "/back", o);
  EXPECT_EQ(fs::exists(work + "/back/model.safetensors.index.json"), !c.sharded_input);

  const auto before = read_all(hf), after = read_all(work + "/back");
  ASSERT_EQ(before.size(), after.size());
  for (const auto& [name, v] : before) {
    auto it = after.find(name);
    ASSERT_NE(it, after.end()) << name << " missing after the round trip";
    EXPECT_EQ(it->second.first.dtype, v.first.dtype) << name;
    EXPECT_EQ(it->second.first.shape, v.first.shape) << name;
    EXPECT_TRUE(it->second.second == v.second) << name << " differs";
  }
  const json src = read_json(hf + "/config.json"), dst = read_json(work + "/back/config.json");
  for (auto it = src.begin(); it != src.end(); ++it) {
    ASSERT_TRUE(dst.contains(it.key())) << it.key();
    EXPECT_EQ(dst[it.key()], it.value()) << it.key();
  }
  if (c.sharded_input || o.max_shard_bytes > 0) {
    const std::string idx = (c.sharded_input ? hf : work + "/back") + "/model.safetensors.index.json";
    const json j = read_json(idx);
    uint64_t total = 0;
    for (const auto& [name, v] : (c.sharded_input ? before : after)) total += v.second.size();
    EXPECT_EQ(j["metadata"]["total_size"].get<uint64_t>(), total);
    EXPECT_EQ(j["weight_map"].size(), before.size());
  }
  fs::remove_all(work);
}

TEST_P(CheckpointHf, DirectLoadGivesTheLogitsOfTheConversion) {
  const HfCase c = GetParam();
  const std::string work = scratch_dir("hf-logits");
  const std::string hf = write_hf(c, work + "/hf", 11);
  ckpt::convert_hf_to_primus(hf, work + "/primus");
  const Tensor tokens = Tensor::from_vector<int32_t>({1, 5, 199, 42, 7, 0, 3, 3, 150, 2}, {2, 5});
  InferenceModel from_hf = load_inference_model(hf, "cpu");
  InferenceModel from_ckpt = load_inference_model(work + "/primus", "cpu");
  Tensor a = compute_logits(from_hf, tokens), b = compute_logits(from_ckpt, tokens);
  ASSERT_EQ(a.shape(), (Shape{2, 5, kHfVocab}));
  EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0);
  bool finite = true, varied = false;
  for (int64_t i = 0; i < a.numel(); ++i) {
    finite = finite && std::isfinite(a.data<float>()[i]);
    varied = varied || a.data<float>()[i] != a.data<float>()[0];
  }
  EXPECT_TRUE(finite);
  EXPECT_TRUE(varied);
  fs::remove_all(work);
}

INSTANTIATE_TEST_SUITE_P(Models, CheckpointHf,
                         ::testing::Values(HfCase{"llama", false, false, false, "bfloat16", true},
                                           HfCase{"llama", true, true, true, "bfloat16"},
                                           HfCase{"qwen2", false, false, false, "float32"},
                                           HfCase{"qwen2", true, true, false, "float16"},
                                           HfCase{"qwen3", true, true, true, "bfloat16"},
                                           HfCase{"qwen3", false, false, false, "float32"}),
                         [](const ::testing::TestParamInfo<HfCase>& i) {
                           const HfCase& c = i.param;
                           return c.model_type + (c.tied ? "_tied" : "_untied") +
                                  (c.nested_rope ? "_ropeparams" : "_ropetheta") +
                                  (c.sharded_input ? "_sharded" : "_single") + "_" + c.dtype;
                         });

TEST(CheckpointHfConfig, ThetaMustBePresentAndUnambiguous) {
  json c = make_config(HfCase{"llama"});
  EXPECT_EQ(ckpt::model_config_from_hf(c, "config.json").model.rotary_base, 500000.0);
  json nested = make_config(HfCase{"llama", false, true});
  EXPECT_EQ(ckpt::model_config_from_hf(nested, "config.json").model.rotary_base, 500000.0);
  json none = c;
  none.erase("rope_theta");
  try {
    ckpt::model_config_from_hf(none, "/x/config.json");
    FAIL() << "a missing theta must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/x/config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("theta"), std::string::npos) << e.what();
  }
  json both = nested;
  both["rope_theta"] = 10000.0;
  EXPECT_THROW(ckpt::model_config_from_hf(both, "config.json"), Error);
  both["rope_theta"] = 500000.0;  // the same value twice is fine
  EXPECT_NO_THROW(ckpt::model_config_from_hf(both, "config.json"));
  json q2 = make_config(HfCase{"qwen2"});
  q2["use_sliding_window"] = true;
  EXPECT_THROW(ckpt::model_config_from_hf(q2, "config.json"), Error);
  json q3 = make_config(HfCase{"qwen3"});
  q3["use_sliding_window"] = true;
  EXPECT_THROW(ckpt::model_config_from_hf(q3, "config.json"), Error);
  json moe = c;
  moe["model_type"] = "mixtral";
  EXPECT_THROW(ckpt::model_config_from_hf(moe, "config.json"), Error);
  json yarn = nested;
  yarn["rope_parameters"]["rope_type"] = "yarn";
  EXPECT_THROW(ckpt::model_config_from_hf(yarn, "config.json"), Error);
  // Partial rotary: transformers' Llama / Qwen attention rotates the whole head, so a factor below 1 (top
  // level or in rope_parameters) cannot be these families' weights; 1 is the whole head.
  for (json partial : {c, nested}) {
    json& where = partial.contains("rope_parameters") ? partial["rope_parameters"] : partial;
    where["partial_rotary_factor"] = 0.5;
    try {
      ckpt::model_config_from_hf(partial, "config.json");
      FAIL() << "partial_rotary_factor 0.5 must be refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("partial_rotary_factor 0.5 is not supported"), std::string::npos)
          << e.what();
    }
    where["partial_rotary_factor"] = 1.0;
    EXPECT_NO_THROW(ckpt::model_config_from_hf(partial, "config.json"));
  }
  // ... and a model that rotates part of each head is not exported as one of them.
  ModelConfig m = ckpt::model_config_from_hf(c, "config.json").model;
  m.rotary_percent = 0.5;
  try {
    ckpt::hf_config_from_model(m, "llama", "bfloat16", json());
    FAIL() << "rotary_percent 0.5 must not export as llama";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("rotary_percent"), std::string::npos) << e.what();
  }
}

TEST(CheckpointHfConfig, WeightsThatDoNotMatchTheConfigAreRefused) {
  const std::string work = scratch_dir("hf-bad");
  HfCase c{"llama"};
  auto tensors = make_tensors(c, 3);
  nlohmann::ordered_json cfg = nlohmann::ordered_json::parse(make_config(c).dump());
  cfg["intermediate_size"] = kHfFfn + 8;
  ckpt::write_hf_dir(work + "/hf", tensors, cfg, 0);
  try {
    ckpt::convert_hf_to_primus(work + "/hf", work + "/out");
    FAIL() << "a shape mismatch must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gate_proj"), std::string::npos) << e.what();
  }
  fs::remove_all(work);
}
