// DeepSeek-V2/V3 Hugging Face interop and FP8 import (docs/checkpoints.md): the E4M3 decode against an
// independent formula for all 256 bytes; block dequantisation against a plain loop on odd shapes; synthetic
// DeepSeek directories (MLA with and without q_lora, dense first layer, routed + shared experts, V3's
// e_score_correction_bias and MTP layer, FP8 weights with weight_scale_inv) mapped to our parameter names
// with the RoPE rows de-interleaved, and back byte-identically; config.json round trips; the conversion
// runs into the MLA model (model/mla_attention.h); routing rules our router does not compute are refused
// naming the key.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "checkpoint/convert.h"
#include "checkpoint/fp8_dequant.h"
#include "checkpoint/hf_config.h"
#include "checkpoint/peft_adapter.h"
#include "checkpoint_test_util.h"
#include "core/error.h"
#include "core/log.h"
#include "model/param_store.h"
#include "train/logits.h"
#include "unit/hf_test_util.h"

namespace fs = std::filesystem;
using namespace primus;
using namespace primus::hf_test;
using nlohmann::json;
using primus::ckpt_test::scratch_dir;

namespace {

// E4M3FN by the book: (-1)^s (1 + m/8) 2^(e-7) for e in 1..15 (except e=15, m=7: NaN), (-1)^s (m/8) 2^-6 for
// e = 0.
double e4m3_reference(int b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return std::nan("");
  const double mag = e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -mag : mag;
}

// Dequantised bf16 bits by a plain loop: f32 product, then bf16 rounding.
std::vector<uint16_t> dequant_reference(const std::vector<uint8_t>& q, int64_t rows, int64_t cols,
                                        const std::vector<float>& scale, int64_t br, int64_t bc) {
  const int64_t sc = (cols + bc - 1) / bc;
  std::vector<uint16_t> out(q.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = static_cast<float>(e4m3_reference(q[r * cols + c])) * scale[(r / br) * sc + c / bc];
      out[r * cols + c] = float_to_bf16(v).bits;
    }
  return out;
}

Tensor fp8_tensor(const std::vector<uint8_t>& q, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::kFP8E4M3);
  std::memcpy(t.data_ptr(), q.data(), q.size());
  return t;
}

// Random E4M3 bytes without NaN, and positive block scales.
struct Fp8Weight {
  std::vector<uint8_t> q;
  std::vector<float> scale;
  Shape shape, scale_shape;
};
Fp8Weight random_fp8(std::mt19937& rng, int64_t rows, int64_t cols, int64_t br, int64_t bc) {
  Fp8Weight w;
  w.shape = {rows, cols};
  w.scale_shape = {(rows + br - 1) / br, (cols + bc - 1) / bc};
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> sc(1e-4f, 3e-3f);
  for (int64_t i = 0; i < rows * cols; ++i) {
    int b = byte(rng);
    if ((b & 0x7f) == 0x7f) b ^= 1;
    w.q.push_back(static_cast<uint8_t>(b));
  }
  for (int64_t i = 0; i < w.scale_shape[0] * w.scale_shape[1]; ++i) w.scale.push_back(sc(rng));
  return w;
}

// A small DeepSeek model: heads 3, dn 16 / dr 8 / dv 12, kv_lora 32, q_lora 24 (V3) or null (V2), one dense
// layer then MoE (8 experts of width 20, one shared), V3 with one MTP layer.
constexpr int64_t kD = 40, kH = 3, kDn = 16, kDr = 8, kDv = 12, kKvl = 32, kQl = 24, kV = 97, kE = 8, kF = 20;

json ds_config(bool v3, bool fp8) {
  json j;
  j["architectures"] = {v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM"};
  j["model_type"] = v3 ? "deepseek_v3" : "deepseek_v2";
  j["hidden_size"] = kD;
  j["intermediate_size"] = 56;
  j["moe_intermediate_size"] = kF;
  j["num_hidden_layers"] = 2;
  j["num_attention_heads"] = kH;
  j["num_key_value_heads"] = kH;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = 512;
  j["rms_norm_eps"] = 1e-6;
  j["vocab_size"] = kV;
  j["tie_word_embeddings"] = false;
  j["n_routed_experts"] = kE;
  j["n_shared_experts"] = 1;
  j["num_experts_per_tok"] = v3 ? 4 : 2;
  j["first_k_dense_replace"] = 1;
  j["moe_layer_freq"] = 1;
  j["kv_lora_rank"] = kKvl;
  j["q_lora_rank"] = v3 ? json(kQl) : json(nullptr);
  j["qk_nope_head_dim"] = kDn;
  j["qk_rope_head_dim"] = kDr;
  j["v_head_dim"] = kDv;
  j["rope_theta"] = 10000.0;
  j["rope_scaling"] = {{"type", "yarn"},       {"factor", 40.0}, {"original_max_position_embeddings", 64},
                       {"beta_fast", 32},      {"beta_slow", 1}, {"mscale", 1.0},
                       {"mscale_all_dim", 1.0}};
  j["attention_bias"] = false;
  j["aux_loss_alpha"] = 0.001;
  j["seq_aux"] = true;
  j["bos_token_id"] = 0;
  j["eos_token_id"] = 1;
  j["torch_dtype"] = "bfloat16";
  j["transformers_version"] = "4.33.1";
  if (v3) {
    j["topk_method"] = "noaux_tc";
    j["scoring_func"] = "sigmoid";
    j["n_group"] = 4;
    j["topk_group"] = 2;
    j["norm_topk_prob"] = true;
    j["routed_scaling_factor"] = 2.5;
    j["num_nextn_predict_layers"] = 1;
  } else {
    j["topk_method"] = "greedy";
    j["n_group"] = 1;
    j["topk_group"] = 1;
    j["norm_topk_prob"] = false;
    j["routed_scaling_factor"] = 1.5;
  }
  if (fp8)
    j["quantization_config"] = {{"quant_method", "fp8"},
                                {"fmt", "e4m3"},
                                {"weight_block_size", {16, 16}},
                                {"activation_scheme", "dynamic"}};
  return j;
}

struct DsDir {
  HfTensors t;
  std::map<std::string, Fp8Weight> fp8;  // weights stored as F8_E4M3, with their scales
  std::vector<std::pair<std::string, Tensor>> all() const { return t.list; }
};

// The tensors of a DeepSeek directory; with fp8, the attention and expert matrices are F8_E4M3 + scales.
DsDir ds_tensors(bool v3, bool fp8, bool with_mtp = true, uint32_t seed = 9) {
  DsDir d{HfTensors(DType::kBF16, seed), {}};
  std::mt19937 rng(seed);
  auto mat = [&](const std::string& name, int64_t rows, int64_t cols) {
    if (!fp8) {
      d.t.add(name, {rows, cols});
      return;
    }
    Fp8Weight w = random_fp8(rng, rows, cols, 16, 16);
    d.t.list.emplace_back(name, fp8_tensor(w.q, w.shape));
    d.t.list.emplace_back(name + "_scale_inv", Tensor::from_vector<float>(w.scale, w.scale_shape));
    d.fp8[name] = std::move(w);
  };
  auto layer = [&](const std::string& p, bool moe) {
    d.t.add(p + "input_layernorm.weight", {kD});
    const std::string a = p + "self_attn.";
    if (v3) {
      mat(a + "q_a_proj.weight", kQl, kD);
      d.t.add(a + "q_a_layernorm.weight", {kQl});
      mat(a + "q_b_proj.weight", kH * (kDn + kDr), kQl);
    } else {
      mat(a + "q_proj.weight", kH * (kDn + kDr), kD);
    }
    mat(a + "kv_a_proj_with_mqa.weight", kKvl + kDr, kD);
    d.t.add(a + "kv_a_layernorm.weight", {kKvl});
    mat(a + "kv_b_proj.weight", kH * (kDn + kDv), kKvl);
    mat(a + "o_proj.weight", kD, kH * kDv);
    d.t.add(p + "post_attention_layernorm.weight", {kD});
    if (!moe) {
      mat(p + "mlp.gate_proj.weight", 56, kD);
      mat(p + "mlp.up_proj.weight", 56, kD);
      mat(p + "mlp.down_proj.weight", kD, 56);
      return;
    }
    d.t.add(p + "mlp.gate.weight", {kE, kD});
    if (v3) d.t.add(p + "mlp.gate.e_score_correction_bias", {kE}, DType::kF32);
    for (int e = 0; e < kE; ++e) {
      const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
      mat(x + "gate_proj.weight", kF, kD);
      mat(x + "up_proj.weight", kF, kD);
      mat(x + "down_proj.weight", kD, kF);
    }
    mat(p + "mlp.shared_experts.gate_proj.weight", kF, kD);
    mat(p + "mlp.shared_experts.up_proj.weight", kF, kD);
    mat(p + "mlp.shared_experts.down_proj.weight", kD, kF);
  };
  d.t.add("model.embed_tokens.weight", {kV, kD});
  layer("model.layers.0.", false);
  layer("model.layers.1.", true);
  d.t.add("model.norm.weight", {kD});
  d.t.add("lm_head.weight", {kV, kD});
  if (v3 && with_mtp) {
    const std::string p = "model.layers.2.";
    d.t.add(p + "enorm.weight", {kD});
    d.t.add(p + "hnorm.weight", {kD});
    mat(p + "eh_proj.weight", kD, 2 * kD);
    d.t.list.emplace_back(p + "embed_tokens.weight", d.t.get("model.embed_tokens.weight"));
    layer(p, true);
    d.t.add(p + "shared_head.norm.weight", {kD});
    d.t.list.emplace_back(p + "shared_head.head.weight", d.t.get("lm_head.weight"));
  }
  return d;
}

// Our row j of a DeepSeek q / kv_a part comes from HF row src(j): within each block of `block` rows, the
// last kDr are de-interleaved (j < kDr/2 <- 2j, else 2(j - kDr/2) + 1).
int64_t rope_src(int64_t j, int64_t block) {
  const int64_t b = j / block, r = j % block, first = block - kDr;
  if (r < first) return j;
  const int64_t k = r - first;
  return b * block + first + (k < kDr / 2 ? 2 * k : 2 * (k - kDr / 2) + 1);
}

std::vector<char> permute_rows(const Tensor& t, int64_t block) {
  const size_t row = t.nbytes() / static_cast<size_t>(t.size(0));
  std::vector<char> out(t.nbytes());
  for (int64_t j = 0; j < t.size(0); ++j)
    std::memcpy(out.data() + j * row, static_cast<const char*>(t.data_ptr()) + rope_src(j, block) * row, row);
  return out;
}

class CheckpointHfDeepSeek : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = log::level();
    log::set_level(log::Level::kError);
  }
  void TearDown() override { log::set_level(saved_); }
  log::Level saved_ = log::Level::kInfo;
};

}  // namespace

TEST(CheckpointFp8, E4M3DecodeMatchesTheFormatForAll256Bytes) {
  int nans = 0;
  for (int b = 0; b < 256; ++b) {
    const float v = ckpt::e4m3fn_to_float(static_cast<uint8_t>(b));
    const double ref = e4m3_reference(b);
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(v)) << b;
      ++nans;
      continue;
    }
    EXPECT_EQ(static_cast<double>(v), ref) << "byte 0x" << std::hex << b;
    EXPECT_EQ(std::signbit(v), (b & 0x80) != 0) << b;  // -0 for 0x80
  }
  EXPECT_EQ(nans, 2);  // 0x7f and 0xff only: E4M3FN has no infinities
  EXPECT_EQ(ckpt::e4m3fn_to_float(0x7e), 448.0f);
  EXPECT_EQ(ckpt::e4m3fn_to_float(0xfe), -448.0f);
  EXPECT_EQ(ckpt::e4m3fn_to_float(0x38), 1.0f);
  EXPECT_EQ(ckpt::e4m3fn_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(ckpt::e4m3fn_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(ckpt::e4m3fn_to_float(0x3f), 1.875f);
}

TEST(CheckpointFp8, BlockDequantisationMatchesAPlainLoopOnOddShapes) {
  std::mt19937 rng(3);
  struct Case {
    int64_t rows, cols, br, bc;
  };
  for (const Case c : {Case{200, 300, 128, 128}, Case{200, 300, 64, 96}, Case{1, 300, 128, 128},
                       Case{129, 1, 128, 128}, Case{7, 5, 2, 3}}) {
    SCOPED_TRACE(fmt::format("{}x{} blocks {}x{}", c.rows, c.cols, c.br, c.bc));
    const Fp8Weight w = random_fp8(rng, c.rows, c.cols, c.br, c.bc);
    const Tensor out = ckpt::dequantize_fp8_blocks(
        fp8_tensor(w.q, w.shape), Tensor::from_vector<float>(w.scale, w.scale_shape), c.br, c.bc, "w");
    ASSERT_EQ(out.dtype(), DType::kBF16);
    ASSERT_EQ(out.shape(), w.shape);
    const std::vector<uint16_t> ref = dequant_reference(w.q, c.rows, c.cols, w.scale, c.br, c.bc);
    EXPECT_EQ(std::memcmp(out.data_ptr(), ref.data(), ref.size() * 2), 0);
  }
}

TEST(CheckpointFp8, CorruptWeightsAndScalesAreRefusedNamingThem) {
  std::mt19937 rng(4);
  Fp8Weight w = random_fp8(rng, 20, 30, 16, 16);
  const Tensor scale = Tensor::from_vector<float>(w.scale, w.scale_shape);
  w.q[1 * 30 + 7] = 0xff;  // NaN
  std::string e =
      error_of([&] { ckpt::dequantize_fp8_blocks(fp8_tensor(w.q, w.shape), scale, 16, 16, "x.weight"); });
  EXPECT_NE(e.find("x.weight: element [1, 7] is an FP8 NaN"), std::string::npos) << e;
  w.q[1 * 30 + 7] = 0x10;
  const Tensor wrong = Tensor::from_vector<float>({1, 2, 3}, {1, 3});
  e = error_of([&] { ckpt::dequantize_fp8_blocks(fp8_tensor(w.q, w.shape), wrong, 16, 16, "x.weight"); });
  EXPECT_NE(e.find("x.weight_scale_inv: expected f32 [2, 2]"), std::string::npos) << e;
  std::vector<float> inf = w.scale;
  inf[3] = INFINITY;
  e = error_of([&] {
    ckpt::dequantize_fp8_blocks(fp8_tensor(w.q, w.shape), Tensor::from_vector<float>(inf, w.scale_shape), 16,
                                16, "x.weight");
  });
  EXPECT_NE(e.find("x.weight_scale_inv: block 3"), std::string::npos) << e;
}

// LoRA adapters on MLA's projections as a PEFT directory: HF DeepSeek module names, the rotary rows of B
// (q_b_proj's per head, kv_a_proj_with_mqa's last dr) back in HF's interleaved order -- spelled here, not
// through the name map: our rotate-half row i of a head's dr rows is HF row 2i (i < dr/2) or 2(i - dr/2) + 1
// -- and read back into our store bitwise.
TEST(CheckpointPeftMla, AdaptersOfTheFiveProjectionsRoundTripWithRopeRowsInterleaved) {
  const std::string dir = ckpt_test::scratch_dir("peft-mla") + "/adapter";
  const json cfg = ds_config(/*v3=*/true, /*fp8=*/false);
  const ModelConfig m = ckpt::model_config_from_hf(cfg, "test config").model;
  constexpr int64_t r = 3;
  LoraConfig lora;
  lora.enabled = true;
  lora.rank = r;
  lora.alpha = 6;
  lora.targets = {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"};
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto random = [&](int64_t rows, int64_t cols) {
    Tensor t = Tensor::empty({rows, cols}, DType::kF32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = nd(rng);
    return t;
  };
  const std::map<std::string, std::pair<int64_t, int64_t>> shapes = {// projection -> [out, in]
                                                                     {"q_a_proj", {kQl, kD}},
                                                                     {"q_b_proj", {kH * (kDn + kDr), kQl}},
                                                                     {"kv_a_proj_with_mqa", {kKvl + kDr, kD}},
                                                                     {"kv_b_proj", {kH * (kDn + kDv), kKvl}},
                                                                     {"o_proj", {kD, kH * kDv}}};
  std::vector<ckpt::LoraTensor> ours;
  for (int l = 0; l < 2; ++l)
    for (const auto& [proj, oi] : shapes) {
      const std::string p = "layers." + std::to_string(l) + ".self_attn." + proj;
      ours.push_back({p + ".lora_A.weight", random(r, oi.second)});
      ours.push_back({p + ".lora_B.weight", random(oi.first, r)});
    }
  const ckpt::PeftWriteReport w = ckpt::write_peft_adapter(dir, ours, m, lora, cfg.dump(), "");
  EXPECT_EQ(w.model_type, "deepseek_v3");
  EXPECT_EQ(w.modules, 10);
  EXPECT_EQ(w.target_modules,
            (std::vector<std::string>{"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"}))
      << testing::PrintToString(w.target_modules);

  const ckpt::PeftAdapter a = ckpt::read_peft_adapter(dir);
  auto ours_b = [&](int l, const std::string& proj) {
    for (const auto& t : ours)
      if (t.name == "layers." + std::to_string(l) + ".self_attn." + proj + ".lora_B.weight") return t.value;
    throw std::runtime_error("no adapter " + proj);
  };
  auto expect_row = [&](const Tensor& hf, int64_t hf_row, const Tensor& our, int64_t our_row) {
    for (int64_t c = 0; c < r; ++c)
      ASSERT_EQ(hf.data<float>()[hf_row * r + c], our.data<float>()[our_row * r + c])
          << "HF row " << hf_row << " ours " << our_row;
  };
  const Tensor hf_kva = a.modules.at("model.layers.1.self_attn.kv_a_proj_with_mqa").b,
               our_kva = ours_b(1, "kv_a_proj_with_mqa");
  for (int64_t i = 0; i < kKvl; ++i) expect_row(hf_kva, i, our_kva, i);
  for (int64_t i = 0; i < kDr; ++i)
    expect_row(hf_kva, kKvl + (i < kDr / 2 ? 2 * i : 2 * (i - kDr / 2) + 1), our_kva, kKvl + i);
  const Tensor hf_qb = a.modules.at("model.layers.0.self_attn.q_b_proj").b, our_qb = ours_b(0, "q_b_proj");
  for (int64_t h = 0; h < kH; ++h) {
    const int64_t base = h * (kDn + kDr);
    for (int64_t i = 0; i < kDn; ++i) expect_row(hf_qb, base + i, our_qb, base + i);
    for (int64_t i = 0; i < kDr; ++i)
      expect_row(hf_qb, base + kDn + (i < kDr / 2 ? 2 * i : 2 * (i - kDr / 2) + 1), our_qb, base + kDn + i);
  }

  // Back into an adapter store: the targets from the directory, every tensor bitwise ours.
  const LoraConfig back = ckpt::lora_config_of(a, m, "deepseek_v3");
  EXPECT_EQ(back.targets, lora.targets);
  ModelSpec spec = ModelSpec::from_config(m);
  spec.adapters = back;
  ParamStore store(spec);
  store.allocate(DType::kF32, Stream::cpu(), DType::kF32);
  ckpt::load_peft_into_adapters(a, m, "deepseek_v3", store, Stream::cpu());
  ASSERT_EQ(store.entries().size(), ours.size());
  for (const auto& t : ours) {
    const std::vector<float> got = store.master(store.find(t.name)).to_vector<float>();
    ASSERT_EQ(got, t.value.to_vector<float>()) << t.name;
  }
  std::error_code ec;
  std::filesystem::remove_all(std::filesystem::path(dir).parent_path(), ec);
}

TEST_F(CheckpointHfDeepSeek, ParameterNamesAreTheMlaLayout) {
  const std::string work = scratch_dir("hf-ds-names");
  for (const bool v3 : {false, true}) {
    SCOPED_TRACE(v3 ? "v3" : "v2");
    const std::string dir = work + (v3 ? "/v3" : "/v2");
    ds_tensors(v3, false).t.write(dir, ds_config(v3, false));
    ckpt::HfCheckpoint hf(dir);
    ckpt::check_hf_names(hf);
    ckpt::check_hf_extras(hf);
    std::map<std::string, Shape> ours;
    for (const auto& e : hf.name_map().entries())
      if (e.kind == ckpt::HfMapKind::kParam) ours[e.param] = e.param_shape;
    const int64_t q = kH * (kDn + kDr);
    std::map<std::string, Shape> attn = {{"kv_a_proj_with_mqa.weight", {kKvl + kDr, kD}},
                                         {"kv_a_layernorm.weight", {kKvl}},
                                         {"kv_b_proj.weight", {kH * (kDn + kDv), kKvl}},
                                         {"o_proj.weight", {kD, kH * kDv}}};
    if (v3) {
      attn["q_a_proj.weight"] = {kQl, kD};
      attn["q_a_layernorm.weight"] = {kQl};
      attn["q_b_proj.weight"] = {q, kQl};
    } else {
      attn["q_proj.weight"] = {q, kD};
    }
    std::map<std::string, Shape> want = {{"embed_tokens.weight", {kV, kD}},
                                         {"norm.weight", {kD}},
                                         {"lm_head.weight", {kV, kD}},
                                         {"layers.0.mlp.gate_up_proj.weight", {112, kD}},
                                         {"layers.0.mlp.down_proj.weight", {kD, 56}}};
    auto moe_layer = [&](const std::string& p) {
      want[p + "mlp.router.weight"] = {kE, kD};
      want[p + "mlp.experts.gate_up_proj.weight"] = {kE, 2 * kF, kD};
      want[p + "mlp.experts.down_proj.weight"] = {kE, kD, kF};
      want[p + "mlp.shared_expert.gate_up_proj.weight"] = {2 * kF, kD};
      want[p + "mlp.shared_expert.down_proj.weight"] = {kD, kF};
      if (v3) want[p + "mlp.router.expert_bias"] = {kE};
    };
    std::vector<std::string> layer_prefixes = {"layers.0.", "layers.1."};
    moe_layer("layers.1.");
    if (v3) {
      layer_prefixes.push_back("mtp.0.layer.");
      moe_layer("mtp.0.layer.");
      want["mtp.0.enorm.weight"] = {kD};
      want["mtp.0.hnorm.weight"] = {kD};
      want["mtp.0.eh_proj.weight"] = {kD, 2 * kD};
      want["mtp.0.final_layernorm.weight"] = {kD};
    }
    for (const std::string& p : layer_prefixes) {
      want[p + "input_layernorm.weight"] = {kD};
      want[p + "post_attention_layernorm.weight"] = {kD};
      for (const auto& [n, s] : attn) want[p + "self_attn." + n] = s;
    }
    EXPECT_EQ(ours, want);
    EXPECT_EQ(hf.info().model.mtp_num_layers, v3 ? 1 : 0);
  }
  fs::remove_all(work);
}

TEST_F(CheckpointHfDeepSeek, Fp8WeightsDequantiseAndRopeRowsDeinterleave) {
  const std::string work = scratch_dir("hf-ds-fp8");
  const DsDir d = ds_tensors(true, true);
  d.t.write(work + "/hf", ds_config(true, true), 200'000);
  ckpt::HfCheckpoint hf(work + "/hf");
  ckpt::check_hf_names(hf);
  ckpt::check_hf_extras(hf);
  auto reference = [&](const std::string& name) {
    const Fp8Weight& w = d.fp8.at(name);
    const std::vector<uint16_t> bits = dequant_reference(w.q, w.shape[0], w.shape[1], w.scale, 16, 16);
    Tensor t = Tensor::empty(w.shape, DType::kBF16);
    std::memcpy(t.data_ptr(), bits.data(), t.nbytes());
    return t;
  };
  const ckpt::HfNameMap& map = hf.name_map();
  // A plain FP8 matrix.
  const ckpt::HfMapEntry* qa = map.find("layers.0.self_attn.q_a_proj.weight");
  ASSERT_TRUE(qa);
  EXPECT_EQ(ckpt::hf_param_dtype(hf, *qa), DType::kBF16);
  EXPECT_EQ(bytes_of(ckpt::hf_param(hf, *qa, DType::kBF16)),
            bytes_of(reference("model.layers.0.self_attn.q_a_proj.weight")));
  // FP8 + RoPE rows: dequantised in the stored order, then each head's last dr rows de-interleaved.
  const ckpt::HfMapEntry* qb = map.find("layers.1.self_attn.q_b_proj.weight");
  EXPECT_EQ(bytes_of(ckpt::hf_param(hf, *qb, DType::kBF16)),
            permute_rows(reference("model.layers.1.self_attn.q_b_proj.weight"), kDn + kDr));
  const ckpt::HfMapEntry* kva = map.find("mtp.0.layer.self_attn.kv_a_proj_with_mqa.weight");
  EXPECT_EQ(bytes_of(ckpt::hf_param(hf, *kva, DType::kBF16)),
            permute_rows(reference("model.layers.2.self_attn.kv_a_proj_with_mqa.weight"), kKvl + kDr));
  // Stacked FP8 experts.
  const ckpt::HfMapEntry* gu = map.find("layers.1.mlp.experts.gate_up_proj.weight");
  std::vector<char> want;
  for (int e = 0; e < kE; ++e)
    for (const char* w : {"gate_proj", "up_proj"}) {
      auto b = bytes_of(reference(fmt::format("model.layers.1.mlp.experts.{}.{}.weight", e, w)));
      want.insert(want.end(), b.begin(), b.end());
    }
  EXPECT_EQ(bytes_of(ckpt::hf_param(hf, *gu, DType::kBF16)), want);
  // The correction bias stays f32.
  EXPECT_EQ(ckpt::hf_param_dtype(hf, *map.find("layers.1.mlp.router.expert_bias")), DType::kF32);

  // Export: bf16 everywhere (the dequantised values, RoPE rows interleaved again), no scales.
  std::map<std::string, Tensor> params;
  for (const std::string& p : map.params()) params[p] = ckpt::hf_param(hf, *map.find(p), DType::kF32);
  ckpt::HfMapOptions o;
  o.qkv_bias_tensors = false;
  const ckpt::HfNameMap out_map(hf.info().model, "deepseek_v3", o);
  size_t n = 0;
  for (const auto& [name, t] : ckpt::hf_tensors_from_params(params, out_map, DType::kBF16)) {
    ++n;
    if (d.fp8.count(name))
      EXPECT_EQ(bytes_of(t), bytes_of(reference(name))) << name;
    else
      EXPECT_EQ(bytes_of(t), bytes_of(d.t.get(name))) << name;
  }
  EXPECT_EQ(n, d.t.list.size() - d.fp8.size());  // every tensor but the scales
  fs::remove_all(work);
}

TEST_F(CheckpointHfDeepSeek, RoundTripIsByteIdenticalAndConfigIsKept) {
  const std::string work = scratch_dir("hf-ds-rt");
  for (const bool v3 : {false, true}) {
    SCOPED_TRACE(v3 ? "v3" : "v2");
    const std::string dir = work + (v3 ? "/v3" : "/v2");
    const DsDir d = ds_tensors(v3, false);
    d.t.write(dir, ds_config(v3, false));
    ckpt::HfCheckpoint hf(dir);
    ckpt::check_hf_names(hf);
    const ckpt::HfNameMap& map = hf.name_map();
    std::map<std::string, Tensor> params;
    for (const std::string& p : map.params()) {
      const ckpt::HfMapEntry* e = map.find(p);
      params[p] = ckpt::to_f32(ckpt::hf_param(hf, *e, ckpt::hf_param_dtype(hf, *e)));
    }
    const nlohmann::ordered_json cfg =
        ckpt::hf_config_from_model(hf.info().model, hf.info().model_type, "bfloat16", hf.config());
    ckpt::HfMapOptions o;
    const ckpt::HfNameMap out_map(hf.info().model, hf.info().model_type, o);
    ckpt::write_hf_dir(work + "/back", ckpt::hf_tensors_from_params(params, out_map, DType::kBF16), cfg,
                       90'000);
    expect_same_tensors(dir, work + "/back");
    expect_config_kept(hf.config(), read_json(work + "/back/config.json"));
    // The exported config.json reads back to the same model.
    ckpt::HfModelInfo again = ckpt::model_config_from_hf(read_json(work + "/back/config.json"), "back");
    again.model.name = hf.info().model.name;  // the directory's name
    EXPECT_EQ(ckpt::model_config_to_json(again.model), ckpt::model_config_to_json(hf.info().model));
    fs::remove_all(work + "/back");
  }
  fs::remove_all(work);
}

// The MLA sizes of ds_config(v3 = true).
void expect_mla_dims(const ModelConfig& m) {
  EXPECT_TRUE(m.mla.enabled);
  EXPECT_EQ(m.mla.q_lora_rank, kQl);
  EXPECT_EQ(m.mla.kv_lora_rank, kKvl);
  EXPECT_EQ(m.mla.qk_head_dim, kDn);
  EXPECT_EQ(m.mla.qk_pos_emb_head_dim, kDr);
  EXPECT_EQ(m.mla.v_head_dim, kDv);
}

// MLA over dense MLPs (no routed experts) is a DeepSeek model too: exported as deepseek_v3 with every layer
// dense (first_k_dense_replace = layers, no expert keys), read back as the same model; DeepSeek's configs
// that say so either way (n_routed_experts null, or first_k_dense_replace covering every layer) read as
// dense.
TEST(CheckpointHfDeepSeekDense, MlaOverDenseMlpsRoundTripsThroughConfigJson) {
  ModelConfig dense = ckpt::model_config_from_hf(ds_config(/*v3=*/true, /*fp8=*/false), "c").model;
  dense.moe = MoeConfig{};
  dense.mtp_num_layers = 0;
  EXPECT_EQ(ckpt::default_model_type(dense), "deepseek_v3");
  const nlohmann::ordered_json j = ckpt::hf_config_from_model(dense, "deepseek_v3", "float32", json());
  EXPECT_FALSE(j.contains("n_routed_experts"));  // (transformers 5 refuses null; its default is inert)
  EXPECT_EQ(j["first_k_dense_replace"], dense.num_layers);
  EXPECT_EQ(j["intermediate_size"], dense.ffn_hidden_size);
  const ModelConfig back = ckpt::model_config_from_hf(json::parse(j.dump()), "back").model;
  EXPECT_FALSE(back.moe.enabled());
  expect_mla_dims(back);
  EXPECT_EQ(back.ffn_hidden_size, dense.ffn_hidden_size);
  EXPECT_EQ(back.mla.rotary_scaling_factor, dense.mla.rotary_scaling_factor);
  EXPECT_EQ(ckpt::hf_config_from_model(back, "deepseek_v3", "float32", json()).dump(), j.dump());
  // qk_layernorm names MLA's latent norms in Megatron configs (Primus's DeepSeek configs set it, and MLA
  // requires it): an HF DeepSeek imports with it on, so that its preset and a Megatron config of the same
  // model agree, and the export is the same either way (it used to refuse true as Qwen 3's q/k norms).
  EXPECT_TRUE(dense.qk_layernorm);
  ModelConfig flag_off = dense;
  flag_off.qk_layernorm = false;
  EXPECT_EQ(ckpt::hf_config_from_model(flag_off, "deepseek_v3", "float32", json()).dump(), j.dump());
  // DeepSeek-V2 with its experts switched off by first_k_dense_replace: dense too (its MoE keys unread).
  json v2 = ds_config(/*v3=*/false, false);
  v2["first_k_dense_replace"] = 2;
  EXPECT_FALSE(ckpt::model_config_from_hf(v2, "v2").model.moe.enabled());
  json null_experts = ds_config(/*v3=*/true, false);
  null_experts["n_routed_experts"] = nullptr;
  EXPECT_FALSE(ckpt::model_config_from_hf(null_experts, "v3").model.moe.enabled());
  // A model with experts still needs its family's routing; a dense Llama-attention model is not DeepSeek.
  ModelConfig llama = dense;
  llama.mla = MlaConfig{};
  const std::string e =
      error_of([&] { ckpt::hf_config_from_model(llama, "deepseek_v3", "float32", json()); });
  EXPECT_NE(e.find("has no experts but deepseek_v3 is a mixture-of-experts family"), std::string::npos) << e;
  // Multi-token-prediction layers have HF names in deepseek_v3 only: a Llama with one is refused as a
  // ConfigError (which a LoRA run's end-of-run PEFT export turns into a warning), not a failed check.
  ModelConfig mtp_llama = llama;
  mtp_llama.moe = MoeConfig{};
  mtp_llama.qk_layernorm = false;
  mtp_llama.mtp_num_layers = 1;
  const std::string m = error_of([&] { ckpt::hf_config_from_model(mtp_llama, "llama", "float32", json()); });
  EXPECT_NE(m.find("1 multi-token-prediction layer(s), which only deepseek_v3 expresses, not llama"),
            std::string::npos)
      << m;
  EXPECT_NE(ckpt::peft_export_problem(mtp_llama, ""), "");
}

TEST_F(CheckpointHfDeepSeek, ConfigMapsRoutingMlaYarnAndMtp) {
  const ckpt::HfModelInfo v3 = ckpt::model_config_from_hf(ds_config(true, true), "c");
  const ModelConfig& m = v3.model;
  expect_mla_dims(m);
  EXPECT_TRUE(m.mla.yarn);
  EXPECT_EQ(m.mla.rotary_scaling_factor, 40.0);
  EXPECT_EQ(m.mla.original_max_position, 64);
  EXPECT_EQ(m.mla.mscale_all_dim, 1.0);
  EXPECT_EQ(m.mtp_num_layers, 1);
  EXPECT_TRUE(v3.quant.fp8);
  EXPECT_EQ(v3.quant.block_rows, 16);
  const MoeConfig& e = m.moe;
  EXPECT_EQ(e.score_function, "sigmoid");
  EXPECT_TRUE(e.expert_bias);
  EXPECT_TRUE(e.normalize_topk);
  EXPECT_EQ(e.num_groups, 4);
  EXPECT_EQ(e.group_topk, 2);
  EXPECT_EQ(e.topk_scaling_factor, 2.5);
  EXPECT_EQ(e.shared_ffn_hidden_size, kF);
  EXPECT_EQ(e.layer_is_moe, (std::vector<char>{0, 1}));
  EXPECT_EQ(e.load_balancing, "seq_aux_loss");
  const ModelConfig v2 = ckpt::model_config_from_hf(ds_config(false, false), "c").model;
  EXPECT_TRUE(v2.moe.pre_softmax);
  EXPECT_FALSE(v2.moe.normalize_topk);
  EXPECT_EQ(v2.moe.num_groups, 0);  // greedy
  EXPECT_EQ(v2.moe.topk_scaling_factor, 1.5);
  EXPECT_EQ(v2.mla.q_lora_rank, 0);
  // group_limited_greedy: the group max equals our sum of the top topk/topk_group only when that is 1.
  json glg = ds_config(false, false);
  glg["topk_method"] = "group_limited_greedy";
  glg["n_group"] = 4;
  glg["topk_group"] = 2;
  EXPECT_EQ(ckpt::model_config_from_hf(glg, "c").model.moe.num_groups, 4);
  // The preset names the Megatron keys (MLA ones included).
  const std::string preset = ckpt::model_preset_yaml(m, "src");
  for (const char* k :
       {"multi_latent_attention: true", "q_lora_rank: 24", "rope_type: yarn", "mtp_num_layers: 1",
        "moe_router_enable_expert_bias: true", "moe_router_num_groups: 4", "moe_layer_freq: [0, 1]"})
    EXPECT_NE(preset.find(k), std::string::npos) << k << "\n" << preset;
}

TEST_F(CheckpointHfDeepSeek, UnsupportedRoutingAndMissingScalesAreRefusedNamingThem) {
  auto refused = [](json c, const std::string& what) {
    const std::string e = error_of([&] { ckpt::model_config_from_hf(c, "/m/config.json"); });
    EXPECT_NE(e.find(what), std::string::npos) << e;
  };
  json glg = ds_config(false, false);
  glg["topk_method"] = "group_limited_greedy";
  glg["n_group"] = 4;
  glg["topk_group"] = 1;
  refused(glg, "topk_method group_limited_greedy with num_experts_per_tok 2 and topk_group 1");
  json norm2 = ds_config(false, false);
  norm2["norm_topk_prob"] = true;
  refused(norm2, "norm_topk_prob");
  json greedy3 = ds_config(true, false);
  greedy3["topk_method"] = "greedy";
  refused(greedy3, "topk_method 'greedy'");
  json groups3 = ds_config(true, false);
  groups3["topk_group"] = 1;
  refused(groups3, "noaux_tc groups");
  json softmax3 = ds_config(true, false);
  softmax3["scoring_func"] = "softmax";
  refused(softmax3, "scoring_func");
  // (n_routed_experts null is a dense DeepSeek model: CheckpointHfDeepSeekDense.)
  json per_tensor = ds_config(true, true);
  per_tensor["quantization_config"].erase("weight_block_size");
  refused(per_tensor, "weight_block_size");
  json yarn_attn = ds_config(true, false);
  yarn_attn["rope_scaling"]["attention_factor"] = 0.5;
  refused(yarn_attn, "attention_factor");

  const std::string work = scratch_dir("hf-ds-bad");
  // An FP8 weight without its scale.
  DsDir d = ds_tensors(true, true);
  const std::string gone = "model.layers.1.mlp.experts.5.down_proj.weight_scale_inv";
  d.t.list.erase(
      std::remove_if(d.t.list.begin(), d.t.list.end(), [&](const auto& p) { return p.first == gone; }),
      d.t.list.end());
  d.t.write(work + "/noscale", ds_config(true, true));
  std::string e = error_of([&] { ckpt::check_hf_names(ckpt::HfCheckpoint(work + "/noscale")); });
  EXPECT_NE(e.find("model.layers.1.mlp.experts.5.down_proj.weight is F8_E4M3 but " + gone + " is missing"),
            std::string::npos)
      << e;
  // FP8 weights without a quantization_config.
  ds_tensors(true, true).t.write(work + "/noquant", ds_config(true, false));
  e = error_of([&] { ckpt::check_hf_names(ckpt::HfCheckpoint(work + "/noquant")); });
  EXPECT_NE(e.find("no FP8 quantization_config"), std::string::npos) << e;
  // The MTP layer's copy of the head must be a copy.
  DsDir bad_copy = ds_tensors(true, false);
  for (auto& [n, t] : bad_copy.t.list)
    if (n == "model.layers.2.shared_head.head.weight") t = bad_copy.t.random({kV, kD}, false);
  for (auto& [n, t] : bad_copy.t.list)
    if (n == "model.layers.2.shared_head.head.weight") t = ckpt::from_f32(t, DType::kBF16);
  bad_copy.t.write(work + "/badcopy", ds_config(true, false));
  e = error_of([&] { ckpt::check_hf_extras(ckpt::HfCheckpoint(work + "/badcopy")); });
  EXPECT_NE(e.find("model.layers.2.shared_head.head.weight should be a copy of lm_head.weight"),
            std::string::npos)
      << e;
  // With MLA in the model the conversion runs (it was refused until then).
  ds_tensors(false, false).t.write(work + "/v2", ds_config(false, false));
  ckpt::convert_hf_to_primus(work + "/v2", work + "/v2-out");
  EXPECT_TRUE(fs::exists(work + "/v2-out"));
  fs::remove_all(work);
}

TEST_F(CheckpointHfDeepSeek, TransformersSavedV3WithoutMtpTensorsImportsWithoutMtp) {
  const std::string work = scratch_dir("hf-ds-nomtp");
  ds_tensors(true, false, /*with_mtp=*/false).t.write(work + "/hf", ds_config(true, false));
  ckpt::HfCheckpoint hf(work + "/hf");
  EXPECT_EQ(hf.info().model.mtp_num_layers, 0);
  ckpt::check_hf_names(hf);
  EXPECT_FALSE(hf.name_map().find("mtp.0.enorm.weight"));
  fs::remove_all(work);
}

// With MLA in the model: an HF DeepSeek directory (V2 without q_lora; V3 with q_lora, YaRN, the expert bias,
// FP8 weights and an MTP layer) loaded directly gives bitwise the logits of its conversion, finite and
// varied.
TEST_F(CheckpointHfDeepSeek, DirectLoadGivesTheLogitsOfTheConversion) {
  for (bool v3 : {false, true}) {
    SCOPED_TRACE(v3 ? "deepseek_v3 (fp8)" : "deepseek_v2");
    const std::string work = scratch_dir(v3 ? "hf-ds-logits-v3" : "hf-ds-logits-v2");
    ds_tensors(v3, v3).t.write(work + "/hf", ds_config(v3, v3));
    ckpt::convert_hf_to_primus(work + "/hf", work + "/primus");
    const Tensor tokens = Tensor::from_vector<int32_t>({1, 5, 9, 4, 7, 0, 3, 3, 8, 2, 9, 6}, {2, 6});
    InferenceModel from_hf = load_inference_model(work + "/hf", "cpu");
    InferenceModel from_ckpt = load_inference_model(work + "/primus", "cpu");
    Tensor x = compute_logits(from_hf, tokens), y = compute_logits(from_ckpt, tokens);
    ASSERT_EQ(x.shape(), y.shape());
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
}
