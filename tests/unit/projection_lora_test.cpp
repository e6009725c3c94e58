// The memory projection's count of LoRA adapter parameters (projection/memory_model.h) against what the
// adapter store lays out (model/param_store.cpp) for the same model, targets and tensor-parallel rank:
// packed- QKV attention with grouped kv heads, multi-latent attention with and without a query latent, tp 1
// and 2.
#include <gtest/gtest.h>

#include "model/param_store.h"
#include "projection/memory_model.h"
#include "unit/model_grad_util.h"

namespace primus {
namespace {

int64_t store_count(const ModelConfig& c, const LoraConfig& l, int tp) {
  ModelSpec spec = ModelSpec::from_config(c);
  if (tp > 1) spec = spec.with_tensor_shard(tp, 1, /*sequence_parallel=*/true);
  spec.adapters = l;
  return ParamStore(spec).parameter_count();
}

void expect_counts(ModelConfig c, const std::vector<std::string>& targets) {
  c.vocab_size = c.padded_vocab_size = 32;  // divisible by tp 2
  LoraConfig l;
  l.enabled = true;
  l.rank = 3;
  for (const std::string& t : targets) {
    l.targets = {t};
    for (int tp : {1, 2}) {
      SCOPED_TRACE(testing::Message() << t << ", tp " << tp);
      EXPECT_EQ(projection::lora_parameters_per_layer(c, l, tp) * static_cast<double>(c.num_layers),
                static_cast<double>(store_count(c, l, tp)));
    }
  }
  l.targets = targets;
  EXPECT_EQ(projection::lora_parameters_per_layer(c, l, 2) * static_cast<double>(c.num_layers),
            static_cast<double>(store_count(c, l, 2)));
}

TEST(ProjectionLora, AdapterCountIsTheStoresLayout) {
  ModelConfig llama = grad_test::tiny_model(/*qk_norm=*/false, /*qkv_bias=*/false, /*tied=*/false);
  expect_counts(llama, {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"});
  for (const int64_t q_lora : {0, 6}) {
    SCOPED_TRACE(q_lora);
    expect_counts(grad_test::tiny_mla(q_lora, /*tied=*/false),
                  {"q_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj",
                   "gate_up_proj", "down_proj"});
  }
}

}  // namespace
}  // namespace primus
