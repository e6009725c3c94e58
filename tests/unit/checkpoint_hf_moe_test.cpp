// Hugging Face interop of the MoE families (docs/checkpoints.md): synthetic Mixtral, Qwen2-MoE and Qwen3-MoE
// directories written by the test under their HF names (per-expert tensors, or transformers 5's fused
// experts), converted to a Primus checkpoint and checked parameter by parameter (stacked experts, router,
// shared expert and its gate, dense layers), converted back byte-identically with every config.json field,
// loaded directly with the same logits as their conversion; config.json mistakes and inexpressible exports
// are refused naming the key.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "checkpoint/convert.h"
#include "checkpoint/hf_config.h"
#include "checkpoint/load.h"
#include "checkpoint/state.h"
#include "checkpoint_test_util.h"
#include "config/load_config.h"
#include "config_test_util.h"
#include "core/error.h"
#include "core/log.h"
#include "train/logits.h"
#include "unit/hf_test_util.h"

namespace fs = std::filesystem;
using namespace primus;
using namespace primus::hf_test;
using nlohmann::json;
using primus::ckpt_test::scratch_dir;

namespace {

constexpr int64_t kMoeD = 48, kMoeHeads = 4, kMoeKv = 2, kMoeV = 97, kMoeE = 4, kMoeF = 40;

struct MoeCase {
  std::string type;  // mixtral | qwen2_moe | qwen3_moe
  std::string dtype = "bfloat16";
  bool fused = false;        // transformers 5's fused experts
  bool sharded = false;      // input split into shards with an index
  bool nested_rope = false;  // rope_parameters / dtype spelling
};

void PrintTo(const MoeCase& c, std::ostream* os) {
  *os << c.type << " " << c.dtype << (c.fused ? " fused" : "") << (c.sharded ? " sharded" : "");
}

int64_t head_dim(const MoeCase& c) {
  return c.type == "qwen3_moe" ? 16 : kMoeD / kMoeHeads;  // qwen3: explicit head_dim != d / heads
}
int64_t layers(const MoeCase& c) {
  return c.type == "mixtral" ? 2 : 3;
}
// Which layers are MoE: qwen2_moe lists layer 1 in mlp_only_layers; qwen3_moe uses decoder_sparse_step 2
// (layers 1 only of 0..2); Mixtral is MoE everywhere.
bool is_moe(const MoeCase& c, int l) {
  if (c.type == "qwen2_moe") return l != 1;
  if (c.type == "qwen3_moe") return (l + 1) % 2 == 0;
  return true;
}

json make_config(const MoeCase& c) {
  json j;
  const std::map<std::string, std::string> arch = {{"mixtral", "MixtralForCausalLM"},
                                                   {"qwen2_moe", "Qwen2MoeForCausalLM"},
                                                   {"qwen3_moe", "Qwen3MoeForCausalLM"}};
  j["architectures"] = {arch.at(c.type)};
  j["model_type"] = c.type;
  j["hidden_size"] = kMoeD;
  j["num_hidden_layers"] = layers(c);
  j["num_attention_heads"] = kMoeHeads;
  j["num_key_value_heads"] = kMoeKv;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = 256;
  j["rms_norm_eps"] = 1e-6;
  j["vocab_size"] = kMoeV;
  j["tie_word_embeddings"] = c.type == "qwen3_moe";
  j["num_experts_per_tok"] = 2;
  j["router_aux_loss_coef"] = 0.02;
  j["output_router_logits"] = false;
  j["bos_token_id"] = 1;
  j["eos_token_id"] = json::array({2, 3});
  j["transformers_version"] = "4.99.0";
  if (c.type == "mixtral") {
    j["intermediate_size"] = kMoeF;
    j["num_local_experts"] = kMoeE;
    j["sliding_window"] = nullptr;
    j["router_jitter_noise"] = 0.0;
  } else {
    j["intermediate_size"] = 56;  // dense layers
    j["num_experts"] = kMoeE;
    j["moe_intermediate_size"] = kMoeF;
    j["use_sliding_window"] = false;
  }
  if (c.type == "qwen2_moe") {
    j["shared_expert_intermediate_size"] = 24;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = {1};
    j["norm_topk_prob"] = false;
  }
  if (c.type == "qwen3_moe") {
    j["head_dim"] = head_dim(c);
    j["decoder_sparse_step"] = 2;
    j["mlp_only_layers"] = json::array();
    j["norm_topk_prob"] = true;
    j["attention_bias"] = false;
  }
  if (c.nested_rope) {
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
    j["dtype"] = c.dtype;
  } else {
    j["rope_theta"] = 1000000.0;
    j["rope_scaling"] = nullptr;
    j["torch_dtype"] = c.dtype;
  }
  return j;
}

HfTensors make_tensors(const MoeCase& c, uint32_t seed) {
  HfTensors t(ckpt::torch_dtype_to_dtype(c.dtype), seed);
  const int64_t hd = head_dim(c);
  t.add("model.embed_tokens.weight", {kMoeV, kMoeD});
  for (int l = 0; l < layers(c); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.add(p + "input_layernorm.weight", {kMoeD});
    t.add(p + "self_attn.q_proj.weight", {kMoeHeads * hd, kMoeD});
    t.add(p + "self_attn.k_proj.weight", {kMoeKv * hd, kMoeD});
    t.add(p + "self_attn.v_proj.weight", {kMoeKv * hd, kMoeD});
    if (c.type == "qwen2_moe") {
      t.add(p + "self_attn.q_proj.bias", {kMoeHeads * hd});
      t.add(p + "self_attn.k_proj.bias", {kMoeKv * hd});
      t.add(p + "self_attn.v_proj.bias", {kMoeKv * hd});
    }
    t.add(p + "self_attn.o_proj.weight", {kMoeD, kMoeHeads * hd});
    if (c.type == "qwen3_moe") {
      t.add(p + "self_attn.q_norm.weight", {hd});
      t.add(p + "self_attn.k_norm.weight", {hd});
    }
    t.add(p + "post_attention_layernorm.weight", {kMoeD});
    if (!is_moe(c, l)) {
      t.add(p + "mlp.gate_proj.weight", {56, kMoeD});
      t.add(p + "mlp.up_proj.weight", {56, kMoeD});
      t.add(p + "mlp.down_proj.weight", {kMoeD, 56});
      continue;
    }
    const bool legacy_mixtral = c.type == "mixtral" && !c.fused;
    const std::string m = p + (legacy_mixtral ? "block_sparse_moe." : "mlp.");
    t.add(m + "gate.weight", {kMoeE, kMoeD});
    if (c.fused) {
      t.add(m + "experts.gate_up_proj", {kMoeE, 2 * kMoeF, kMoeD});
      t.add(m + "experts.down_proj", {kMoeE, kMoeD, kMoeF});
    } else {
      for (int e = 0; e < kMoeE; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        const bool w = c.type == "mixtral";
        t.add(x + (w ? "w1.weight" : "gate_proj.weight"), {kMoeF, kMoeD});
        t.add(x + (w ? "w3.weight" : "up_proj.weight"), {kMoeF, kMoeD});
        t.add(x + (w ? "w2.weight" : "down_proj.weight"), {kMoeD, kMoeF});
      }
    }
    if (c.type == "qwen2_moe") {
      t.add(m + "shared_expert.gate_proj.weight", {24, kMoeD});
      t.add(m + "shared_expert.up_proj.weight", {24, kMoeD});
      t.add(m + "shared_expert.down_proj.weight", {kMoeD, 24});
      t.add(m + "shared_expert_gate.weight", {1, kMoeD});
    }
  }
  t.add("model.norm.weight", {kMoeD});
  if (c.type != "qwen3_moe") t.add("lm_head.weight", {kMoeV, kMoeD});
  return t;
}

std::string write_case(const MoeCase& c, const std::string& dir, uint32_t seed = 5) {
  make_tensors(c, seed).write(dir, make_config(c), c.sharded ? 60'000 : 0);
  return dir;
}

// Checkpoint tensors by name (in their stored dtype).
std::map<std::string, Tensor> checkpoint_tensors(const std::string& root) {
  ckpt::Selection sel = ckpt::select_explicit(root);
  ckpt::CheckpointReader r(sel.verification);
  std::map<std::string, Tensor> out;
  for (const std::string& n : r.names("model")) out[n] = r.read("model", n);
  return out;
}

std::vector<char> cat_bytes(const std::vector<const Tensor*>& parts) {
  std::vector<char> out;
  for (const Tensor* t : parts) {
    auto b = bytes_of(*t);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

class CheckpointHfMoe : public ::testing::TestWithParam<MoeCase> {
 protected:
  void SetUp() override {
    saved_ = log::level();
    log::set_level(log::Level::kWarn);
  }
  void TearDown() override { log::set_level(saved_); }
  log::Level saved_ = log::Level::kInfo;
};

}  // namespace

TEST_P(CheckpointHfMoe, ConvertsNameByNameAndBackByteIdentical) {
  const MoeCase c = GetParam();
  const std::string work = scratch_dir("hf-moe");
  const std::string hf = write_case(c, work + "/hf");
  const HfTensors src = make_tensors(c, 5);

  ckpt::ConvertReport a = ckpt::convert_hf_to_primus(hf, work + "/primus");
  EXPECT_EQ(a.model_type, c.type);
  EXPECT_TRUE(ckpt::verify_checkpoint(a.output).ok);
  const auto ck = checkpoint_tensors(work + "/primus");
  // Name by name: each of our parameters is exactly its HF tensors, concatenated.
  const bool legacy_mixtral = c.type == "mixtral" && !c.fused;
  size_t checked = 0;
  for (int l = 0; l < layers(c); ++l) {
    const std::string ours = "layers." + std::to_string(l) + ".", p = "model." + ours;
    SCOPED_TRACE(ours);
    ASSERT_TRUE(ck.count(ours + "self_attn.qkv_proj.weight"));
    EXPECT_EQ(bytes_of(ck.at(ours + "self_attn.qkv_proj.weight")),
              cat_bytes({&src.get(p + "self_attn.q_proj.weight"), &src.get(p + "self_attn.k_proj.weight"),
                         &src.get(p + "self_attn.v_proj.weight")}));
    EXPECT_EQ(ck.count(ours + "self_attn.qkv_proj.bias"), c.type == "qwen2_moe" ? 1u : 0u);
    if (!is_moe(c, l)) {
      EXPECT_EQ(bytes_of(ck.at(ours + "mlp.gate_up_proj.weight")),
                cat_bytes({&src.get(p + "mlp.gate_proj.weight"), &src.get(p + "mlp.up_proj.weight")}));
      EXPECT_FALSE(ck.count(ours + "mlp.router.weight"));
      ++checked;
      continue;
    }
    const std::string m = p + (legacy_mixtral ? "block_sparse_moe." : "mlp.");
    EXPECT_EQ(bytes_of(ck.at(ours + "mlp.router.weight")), bytes_of(src.get(m + "gate.weight")));
    const Tensor& gu = ck.at(ours + "mlp.experts.gate_up_proj.weight");
    const Tensor& dn = ck.at(ours + "mlp.experts.down_proj.weight");
    EXPECT_EQ(gu.shape(), (Shape{kMoeE, 2 * kMoeF, kMoeD}));
    EXPECT_EQ(dn.shape(), (Shape{kMoeE, kMoeD, kMoeF}));
    if (c.fused) {
      EXPECT_EQ(bytes_of(gu), bytes_of(src.get(m + "experts.gate_up_proj")));
      EXPECT_EQ(bytes_of(dn), bytes_of(src.get(m + "experts.down_proj")));
    } else {
      // Expert e's block of the stacked tensors: gate rows, then up rows; then its down projection.
      const size_t gbytes = static_cast<size_t>(kMoeF * kMoeD) * dtype_size(gu.dtype());
      for (int e = 0; e < kMoeE; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        const bool w = c.type == "mixtral";
        const auto g = bytes_of(src.get(x + (w ? "w1.weight" : "gate_proj.weight")));
        const auto u = bytes_of(src.get(x + (w ? "w3.weight" : "up_proj.weight")));
        const auto d = bytes_of(src.get(x + (w ? "w2.weight" : "down_proj.weight")));
        const char* gb = static_cast<const char*>(gu.data_ptr()) + 2 * e * gbytes;
        EXPECT_EQ(std::vector<char>(gb, gb + gbytes), g) << "expert " << e << " gate";
        EXPECT_EQ(std::vector<char>(gb + gbytes, gb + 2 * gbytes), u) << "expert " << e << " up";
        const char* db = static_cast<const char*>(dn.data_ptr()) + e * gbytes;
        EXPECT_EQ(std::vector<char>(db, db + gbytes), d) << "expert " << e << " down";
      }
    }
    if (c.type == "qwen2_moe") {
      EXPECT_EQ(bytes_of(ck.at(ours + "mlp.shared_expert.gate_up_proj.weight")),
                cat_bytes({&src.get(m + "shared_expert.gate_proj.weight"),
                           &src.get(m + "shared_expert.up_proj.weight")}));
      EXPECT_EQ(bytes_of(ck.at(ours + "mlp.shared_expert_gate.weight")),
                bytes_of(src.get(m + "shared_expert_gate.weight")));
    } else {
      EXPECT_FALSE(ck.count(ours + "mlp.shared_expert_gate.weight"));
    }
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<size_t>(layers(c)));

  // The model configuration survives in state.json.
  const ckpt::Selection sel = ckpt::select_explicit(work + "/primus");
  const MoeConfig& e = sel.verification.state.model.moe;
  EXPECT_EQ(e.num_experts, kMoeE);
  EXPECT_EQ(e.topk, 2);
  EXPECT_EQ(e.ffn_hidden_size, kMoeF);
  EXPECT_EQ(e.shared_expert_gate, c.type == "qwen2_moe");
  for (int l = 0; l < layers(c); ++l) EXPECT_EQ(e.is_moe_layer(l), is_moe(c, l)) << l;
  EXPECT_EQ(e.pre_softmax,
            c.type == "qwen2_moe");  // norm_topk_prob false: softmax over all, not renormalised

  ckpt::PrimusToHfOptions o;
  o.fused_experts = c.fused;
  o.max_shard_bytes = c.sharded ? 0 : 50'000;  // the other layout on the way back
  ckpt::convert_primus_to_hf(work + "/primus", work + "/back", o);
  expect_same_tensors(hf, work + "/back");
  expect_config_kept(read_json(hf + "/config.json"), read_json(work + "/back/config.json"));
  fs::remove_all(work);
}

TEST_P(CheckpointHfMoe, DirectLoadGivesTheLogitsOfTheConversion) {
  const MoeCase c = GetParam();
  const std::string work = scratch_dir("hf-moe-logits");
  const std::string hf = write_case(c, work + "/hf", 11);
  ckpt::convert_hf_to_primus(hf, work + "/primus");
  const Tensor tokens = Tensor::from_vector<int32_t>({1, 5, 96, 42, 7, 0, 3, 3, 50, 2, 9, 17}, {2, 6});
  InferenceModel from_hf = load_inference_model(hf, "cpu");
  InferenceModel from_ckpt = load_inference_model(work + "/primus", "cpu");
  Tensor x = compute_logits(from_hf, tokens), y = compute_logits(from_ckpt, tokens);
  ASSERT_EQ(x.shape(), (Shape{2, 6, kMoeV}));
  EXPECT_EQ(std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()), 0);
  bool finite = true, varied = false;
  for (int64_t i = 0; i < x.numel(); ++i) {
    finite = finite && std::isfinite(x.data<float>()[i]);
    varied = varied || x.data<float>()[i] != x.data<float>()[0];
  }
  EXPECT_TRUE(finite);
  EXPECT_TRUE(varied);
  fs::remove_all(work);
}

// transformers 5.17 saved a Qwen3-MoE config the importer refused ("'num_experts' must be an integer", the
// device check of 2026-11-25): its attribute map can write the count as num_local_experts. Either key is
// read; both must then agree.
TEST(CheckpointHfMoeKeys, QwenExpertCountUnderEitherKey) {
  json c = make_config(MoeCase{"qwen3_moe"});
  ASSERT_TRUE(c.contains("num_experts"));
  const int64_t experts = c["num_experts"].get<int64_t>();
  EXPECT_EQ(ckpt::model_config_from_hf(c, "c").model.moe.num_experts, experts);
  json local = c;
  local.erase("num_experts");
  local["num_local_experts"] = experts;
  EXPECT_EQ(ckpt::model_config_from_hf(local, "c").model.moe.num_experts, experts);
  json both = c;
  both["num_local_experts"] = experts + 1;
  std::string msg;
  try {
    ckpt::model_config_from_hf(both, "c");
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("disagree"), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(Families, CheckpointHfMoe,
                         ::testing::Values(MoeCase{"mixtral", "bfloat16", false, false, false},
                                           MoeCase{"mixtral", "float32", true, true, true},
                                           MoeCase{"qwen2_moe", "bfloat16", false, true, false},
                                           MoeCase{"qwen2_moe", "float16", true, false, true},
                                           MoeCase{"qwen3_moe", "bfloat16", false, false, true},
                                           MoeCase{"qwen3_moe", "float32", true, true, false}),
                         [](const ::testing::TestParamInfo<MoeCase>& i) {
                           const MoeCase& c = i.param;
                           return c.type + "_" + c.dtype + (c.fused ? "_fused" : "_perexpert") +
                                  (c.sharded ? "_sharded" : "_single");
                         });

TEST(CheckpointHfMoeConfig, RoutingMapsOntoOurRouter) {
  json mix = make_config({"mixtral"});
  ckpt::HfModelInfo i = ckpt::model_config_from_hf(mix, "config.json");
  EXPECT_FALSE(i.model.moe.pre_softmax);  // softmax, top-k, renormalise == top-k then softmax over k
  EXPECT_EQ(i.model.moe.score_function, "softmax");
  EXPECT_EQ(i.model.moe.load_balancing, "aux_loss");
  EXPECT_DOUBLE_EQ(i.model.moe.aux_loss_coeff, 0.02);
  json q = make_config({"qwen3_moe"});
  q["norm_topk_prob"] = false;
  EXPECT_TRUE(ckpt::model_config_from_hf(q, "config.json").model.moe.pre_softmax);
  q["router_aux_loss_coef"] = 0.0;
  EXPECT_EQ(ckpt::model_config_from_hf(q, "config.json").model.moe.load_balancing, "none");
  // Refusals name the key.
  auto refused = [](json c, const std::string& key) {
    const std::string e = error_of([&] { ckpt::model_config_from_hf(c, "/m/config.json"); });
    EXPECT_NE(e.find("/m/config.json"), std::string::npos) << e;
    EXPECT_NE(e.find(key), std::string::npos) << e;
  };
  json jitter = mix;
  jitter["router_jitter_noise"] = 0.1;
  refused(jitter, "router_jitter_noise");
  json window = mix;
  window["sliding_window"] = 4096;
  refused(window, "sliding_window");
  json too_many = mix;
  too_many["num_experts_per_tok"] = 5;
  refused(too_many, "num_experts_per_tok");
  json no_moe = make_config({"qwen2_moe"});
  no_moe["mlp_only_layers"] = {0, 1, 2};
  refused(no_moe, "no layer");
  json bad_layer = make_config({"qwen2_moe"});
  bad_layer["mlp_only_layers"] = {7};
  refused(bad_layer, "mlp_only_layers");
  json yarn = make_config({"qwen3_moe"});
  yarn["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64}};
  refused(yarn, "yarn");
  json quant = mix;
  quant["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}};
  refused(quant, "quant_method");
}

TEST(CheckpointHfMoeConfig, ExportRefusesWhatTheFamilyCannotExpress) {
  const ModelConfig qwen2 = ckpt::model_config_from_hf(make_config({"qwen2_moe"}), "c").model;
  EXPECT_EQ(ckpt::default_model_type(qwen2), "qwen2_moe");
  auto refused = [](const ModelConfig& m, const std::string& type, const std::string& why) {
    const std::string e = error_of([&] { ckpt::hf_config_from_model(m, type, "bfloat16", json()); });
    EXPECT_NE(e.find(why), std::string::npos) << e;
  };
  ModelConfig ungated = qwen2;
  ungated.moe.shared_expert_gate = false;
  refused(ungated, "qwen2_moe", "sigmoid gate");
  EXPECT_THROW(ckpt::default_model_type(ungated), Error);  // no family has an ungated shared expert
  refused(qwen2, "mixtral", "q/k/v biases");
  ModelConfig no_bias = qwen2;
  no_bias.add_qkv_bias = false;
  refused(no_bias, "mixtral", "dense layers");
  refused(qwen2, "qwen3_moe", "q/k norms");
  refused(qwen2, "llama", "experts");
  ModelConfig sig = ckpt::model_config_from_hf(make_config({"mixtral"}), "c").model;
  sig.moe.score_function = "sigmoid";
  refused(sig, "mixtral", "sigmoid");
  ModelConfig grouped = ckpt::model_config_from_hf(make_config({"mixtral"}), "c").model;
  grouped.moe.num_groups = 2;
  grouped.moe.group_topk = 1;
  refused(grouped, "mixtral", "group-limited");
  ModelConfig unnormalised = ckpt::model_config_from_hf(make_config({"mixtral"}), "c").model;
  unnormalised.moe.pre_softmax = true;
  refused(unnormalised, "mixtral", "renormalised");
  // A Megatron-side layer pattern becomes decoder_sparse_step 1 plus the dense layers listed.
  ModelConfig pattern = ckpt::model_config_from_hf(make_config({"qwen3_moe"}), "c").model;
  pattern.moe.layer_is_moe = {1, 0, 0};
  const json j = json::parse(ckpt::hf_config_from_model(pattern, "qwen3_moe", "bfloat16", json()).dump());
  EXPECT_EQ(j["decoder_sparse_step"], 1);
  EXPECT_EQ(j["mlp_only_layers"], json::array({1, 2}));
  EXPECT_EQ(j["norm_topk_prob"], true);
}

TEST(CheckpointHfMoeConfig, StateJsonKeepsTheMoeConfiguration) {
  ModelConfig m = ckpt::model_config_from_hf(make_config({"qwen2_moe"}), "c").model;
  m.moe.capacity_factor = 1.25;
  m.moe.drop_policy = "position";
  const ModelConfig back = ckpt::model_config_from_json(ckpt::model_config_to_json(m), "state.json");
  EXPECT_EQ(ckpt::model_config_to_json(back), ckpt::model_config_to_json(m));
  EXPECT_EQ(back.moe.layer_is_moe, m.moe.layer_is_moe);
  EXPECT_TRUE(back.moe.shared_expert_gate);
  EXPECT_EQ(back.moe.drop_policy, "position");
  // A dense model's state.json has no MoE section (older files read the same).
  ModelConfig dense;
  EXPECT_EQ(ckpt::model_config_to_json(dense).find("moe"), std::string::npos);
}

TEST(CheckpointHfMoeConfig, WeightsThatDoNotMatchAreRefusedNamingTheTensor) {
  const std::string work = scratch_dir("hf-moe-bad");
  const MoeCase c{"qwen2_moe"};
  auto convert_error = [&](HfTensors t, json cfg, const std::string& tag) {
    t.write(work + "/" + tag, cfg);
    return error_of([&] { ckpt::convert_hf_to_primus(work + "/" + tag, work + "/" + tag + "-out"); });
  };
  // An extra tensor.
  HfTensors extra = make_tensors(c, 3);
  extra.add("model.layers.0.mlp.experts.4.gate_proj.weight", {kMoeF, kMoeD});
  std::string e = convert_error(extra, make_config(c), "extra");
  EXPECT_NE(e.find("do not belong"), std::string::npos) << e;
  EXPECT_NE(e.find("model.layers.0.mlp.experts.4.gate_proj.weight"), std::string::npos) << e;
  // A missing expert.
  HfTensors missing = make_tensors(c, 3);
  missing.list.erase(
      std::remove_if(missing.list.begin(), missing.list.end(),
                     [](const auto& p) { return p.first == "model.layers.2.mlp.experts.3.up_proj.weight"; }),
      missing.list.end());
  e = convert_error(missing, make_config(c), "missing");
  EXPECT_NE(e.find("model.layers.2.mlp.experts.3.up_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("missing"), std::string::npos) << e;
  // A wrong shape (config.json's moe_intermediate_size disagrees with the experts).
  json wider = make_config(c);
  wider["moe_intermediate_size"] = kMoeF + 8;
  e = convert_error(make_tensors(c, 3), wider, "shape");
  EXPECT_NE(e.find("mlp.experts.0.gate_proj.weight has shape [40, 48]"), std::string::npos) << e;
  // A non-zero tensor where the function has zeros is not dropped silently: a llama-style o_proj bias.
  const MoeCase q3{"qwen3_moe"};
  HfTensors bias = make_tensors(q3, 3);
  for (int l = 0; l < 3; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    bias.add(p + "q_proj.bias", {kMoeHeads * 16});
    bias.add(p + "k_proj.bias", {kMoeKv * 16});
    bias.add(p + "v_proj.bias", {kMoeKv * 16});
    bias.add(p + "o_proj.bias", {kMoeD});
  }
  json with_bias = make_config(q3);
  with_bias["attention_bias"] = true;
  e = convert_error(bias, with_bias, "obias");
  EXPECT_NE(e.find("o_proj.bias is not zero"), std::string::npos) << e;
  fs::remove_all(work);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The model preset `convert hf-to-primus` writes loads (Megatron keys) into the model it came from, so that
// fine-tuning with it passes the trainer's same-model check.
TEST(CheckpointHfMoeConfig, WrittenPresetDescribesTheSameModel) {
  log::Level saved = log::level();
  log::set_level(log::Level::kWarn);
  for (const MoeCase& c : {MoeCase{"mixtral"}, MoeCase{"qwen2_moe"}, MoeCase{"qwen3_moe"}}) {
    SCOPED_TRACE(c.type);
    const std::string work = scratch_dir("hf-moe-preset");
    const std::string hf = write_case(c, work + "/hf");
    ckpt::convert_hf_to_primus(hf, work + "/primus");
    // As a user would: the preset beside the presets it extends, named by the experiment.
    config::testing::TempDir dir;
    const std::string models = config::testing::project_configs() + "/models/megatron/";
    dir.write("models/megatron/converted.yaml", read_text(work + "/primus/primus_model.yaml"));
    dir.write("models/megatron/llama_base.yaml", read_text(models + "llama_base.yaml"));
    const std::string exp =
        dir.write("exp.yaml",
                  "work_group: g\nuser_name: u\nexp_name: e\nworkspace: w\nmodules:\n"
                  "  pre_trainer:\n    framework: megatron\n    config: pre_trainer.yaml\n"
                  "    model: converted\n");
    config::ResolveOptions o;
    o.env = config::testing::fake_env();
    o.cli_overrides = {"--seq_length", "64"};  // the test models are short
    o.roots = std::vector<std::string>{dir.path(), config::testing::project_configs()};
    const ModelConfig got = config::load_config(exp, o).train.model;
    const ModelConfig want = ckpt::model_config_from_hf(read_json(hf + "/config.json"), "c").model;
    EXPECT_EQ(got.num_layers, want.num_layers);
    EXPECT_EQ(got.ffn_hidden_size, want.ffn_hidden_size);
    EXPECT_EQ(got.add_qkv_bias, want.add_qkv_bias);
    EXPECT_EQ(got.qk_layernorm, want.qk_layernorm);
    const MoeConfig &a = got.moe, &b = want.moe;
    EXPECT_EQ(a.num_experts, b.num_experts);
    EXPECT_EQ(a.topk, b.topk);
    EXPECT_EQ(a.ffn_hidden_size, b.ffn_hidden_size);
    EXPECT_EQ(a.shared_ffn_hidden_size, b.shared_ffn_hidden_size);
    EXPECT_EQ(a.shared_expert_gate, b.shared_expert_gate);
    EXPECT_EQ(a.layer_is_moe, b.layer_is_moe);
    EXPECT_EQ(a.score_function, b.score_function);
    EXPECT_EQ(a.pre_softmax, b.pre_softmax);
    EXPECT_EQ(a.num_groups, b.num_groups);
    EXPECT_EQ(a.topk_scaling_factor, b.topk_scaling_factor);
    EXPECT_EQ(a.expert_bias, b.expert_bias);
    EXPECT_EQ(a.load_balancing, b.load_balancing);
    EXPECT_EQ(a.aux_loss_coeff, b.aux_loss_coeff);
    fs::remove_all(work);
  }
  log::set_level(saved);
}

// Exports and conversions hold one parameter at a time: the export plan asks for each parameter once, in
// table order, only when its first HF tensor is written; a lazy safetensors tensor is made once, when
// written, and must have the shape it announced.
TEST(CheckpointHfMoeConfig, ExportAndConversionStreamOneParameterAtATime) {
  const MoeCase c{"qwen2_moe"};
  const std::string work = scratch_dir("hf-moe-stream");
  const std::string hf = write_case(c, work + "/hf");
  ckpt::HfCheckpoint src(hf);
  std::vector<std::string> asked;
  auto param_f32 = [&](const std::string& name) {
    asked.push_back(name);
    return ckpt::hf_param(src, *src.name_map().find(name), DType::kF32);
  };
  const std::vector<ckpt::HfOutTensor> plan = ckpt::hf_export_plan(src.name_map(), param_f32, DType::kBF16);
  EXPECT_TRUE(asked.empty());  // nothing is read while planning
  ckpt::write_hf_dir(work + "/back", plan, nlohmann::ordered_json::parse(src.config().dump()), 40'000);
  EXPECT_EQ(asked, src.name_map().params());
  expect_same_tensors(hf, work + "/back");

  ckpt::SafetensorsWriter w;
  int made = 0;
  w.add_lazy("a", DType::kF32, {2, 3}, [&] {
    ++made;
    return Tensor::zeros({2, 3}, DType::kF32);
  });
  w.add_lazy("b", DType::kF32, {4}, [] { return Tensor::zeros({5}, DType::kF32); });
  EXPECT_EQ(made, 0);
  const std::string e = error_of([&] { w.write(work + "/lazy.safetensors"); });
  EXPECT_EQ(made, 1);
  EXPECT_NE(e.find("lazy tensor 'b': produced"), std::string::npos) << e;
  fs::remove_all(work);
}
