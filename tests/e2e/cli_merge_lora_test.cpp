// `primus convert merge-lora` (docs/checkpoints.md): a tiny HF Llama and a PEFT adapter for it merge into a
// loadable HF directory with a summary line; an adapter of another base model exits 2 naming the module and
// writes nothing. The merge arithmetic itself is checked in tests/unit/checkpoint_peft_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "checkpoint/hf_config.h"
#include "checkpoint/hf_weights.h"
#include "checkpoint/peft_adapter.h"
#include "cli_process.h"
#include "scratch_dir.h"

using namespace primus;
using namespace primus::cli_test;

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

namespace {

class MergeLoraCli : public ScratchDirTest {
 protected:
  // An HF Llama of one layer (hidden 16, ffn `ffn`, 2 heads of 8, 1 KV head), bf16, with a tokenizer file.
  std::string base(const std::string& name, int64_t ffn) {
    const nlohmann::ordered_json cfg = {{"architectures", {"LlamaForCausalLM"}},
                                        {"model_type", "llama"},
                                        {"hidden_size", 16},
                                        {"intermediate_size", ffn},
                                        {"num_hidden_layers", 1},
                                        {"num_attention_heads", 2},
                                        {"num_key_value_heads", 1},
                                        {"max_position_embeddings", 64},
                                        {"rms_norm_eps", 1e-5},
                                        {"vocab_size", 32},
                                        {"tie_word_embeddings", true},
                                        {"rope_theta", 10000.0},
                                        {"torch_dtype", "bfloat16"}};
    const std::vector<std::pair<std::string, Shape>> shapes = {
        {"model.embed_tokens.weight", {32, 16}},
        {"model.layers.0.input_layernorm.weight", {16}},
        {"model.layers.0.self_attn.q_proj.weight", {16, 16}},
        {"model.layers.0.self_attn.k_proj.weight", {8, 16}},
        {"model.layers.0.self_attn.v_proj.weight", {8, 16}},
        {"model.layers.0.self_attn.o_proj.weight", {16, 16}},
        {"model.layers.0.post_attention_layernorm.weight", {16}},
        {"model.layers.0.mlp.gate_proj.weight", {ffn, 16}},
        {"model.layers.0.mlp.up_proj.weight", {ffn, 16}},
        {"model.layers.0.mlp.down_proj.weight", {16, ffn}},
        {"model.norm.weight", {16}}};
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& [n, shape] : shapes)
      tensors.emplace_back(n, ckpt::from_f32(random(shape), DType::kBF16));
    const std::string dir = (dir_ / name).string();
    ckpt::write_hf_dir(dir, tensors, cfg, 0);
    write(name + "/tokenizer_config.json", "{\"model_max_length\": 64}");
    return dir;
  }
  // Our adapters on every projection of that model (ffn 24), exported as PEFT.
  std::string adapter() {
    const ModelConfig m =
        ckpt::model_config_from_hf(nlohmann::json::parse(slurp((dir_ / "base/config.json").string())), "base")
            .model;
    LoraConfig l;
    l.rank = 4;
    l.alpha = 8;
    l.targets = {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};
    std::vector<ckpt::LoraTensor> v = {{"layers.0.self_attn.qkv_proj.lora_A.weight", random({4, 16})},
                                       {"layers.0.self_attn.qkv_proj.lora_B.weight", random({32, 4})},
                                       {"layers.0.self_attn.o_proj.lora_A.weight", random({4, 16})},
                                       {"layers.0.self_attn.o_proj.lora_B.weight", random({16, 4})},
                                       {"layers.0.mlp.gate_up_proj.lora_A.weight", random({4, 16})},
                                       {"layers.0.mlp.gate_up_proj.lora_B.weight", random({48, 4})},
                                       {"layers.0.mlp.down_proj.lora_A.weight", random({4, 24})},
                                       {"layers.0.mlp.down_proj.lora_B.weight", random({16, 4})}};
    const std::string dir = (dir_ / "adapter").string();
    ckpt::write_peft_adapter(dir, v, m, l, "", "base");
    return dir;
  }
  Tensor random(const Shape& shape) {
    std::normal_distribution<float> nd(0.0f, 0.2f);
    Tensor t = Tensor::empty(shape, DType::kF32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = nd(rng_);
    return t;
  }
  std::mt19937 rng_{5};
};

}  // namespace

TEST_F(MergeLoraCli, MergesIntoALoadableDirectoryAndRefusesAnotherBase) {
  const std::string b = base("base", 24), a = adapter(), out = (dir_ / "merged").string();
  CliResult r = run_primus(
      {"convert", "merge-lora", "--base", b, "--adapter", a, "--output", out, "--dtype", "float32"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.out + r.err, "merged " + a + " into " + b + " -> " + out);
  EXPECT_HAS(r.out + r.err, "7 of 11 tensors adapted");
  ckpt::HfCheckpoint merged(out);  // validates names and shapes
  EXPECT_EQ(merged.st_dtype("model.layers.0.mlp.up_proj.weight"), "F32");
  EXPECT_EQ(merged.info().torch_dtype, "float32");
  EXPECT_TRUE(std::filesystem::exists(out + "/tokenizer_config.json"));

  // Another base (ffn 20): exit 2, the module and both shapes named, nothing written.
  const std::string other = base("other", 20);
  CliResult bad = run_primus({"convert", "merge-lora", "-b", other, "-a", a, "-o", (dir_ / "bad").string()});
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_HAS(bad.err, "model.layers.0.mlp.down_proj");
  EXPECT_HAS(bad.err, "[16, 24]");
  EXPECT_HAS(bad.err, "[16, 20]");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "bad"));

  CliResult help = run_primus({"convert", "merge-lora", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_HAS(help.out, "--adapter");
}
