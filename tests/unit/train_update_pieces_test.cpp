// The pieces of the overlapped update (train/update_pieces.h): they tile each region exactly, the no-decay
// span first and then the matrices in the order the forward reads them, merge small entries, and AdamW
// launched piece by piece (AdamW::launch_span) is bitwise AdamW launched per region.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "model/param_store.h"
#include "train/optimizer.h"
#include "train/update_pieces.h"

using namespace primus;

namespace {

// Odd sizes on purpose: entry boundaries fall anywhere in the flat buffer.
ModelConfig odd_moe() {
  ModelConfig m;
  m.num_layers = 3;
  m.hidden_size = 33;
  m.ffn_hidden_size = 31;
  m.num_attention_heads = 3;
  m.num_query_groups = 1;
  m.kv_channels = 11;
  m.vocab_size = m.padded_vocab_size = 127;
  m.untie_embeddings_and_output_weights = true;
  m.moe.num_experts = 5;
  m.moe.topk = 2;
  m.moe.ffn_hidden_size = 7;
  m.moe.shared_ffn_hidden_size = 9;
  m.moe.layer_is_moe = {0, 1, 1};
  m.moe.expert_bias = true;
  return m;
}

std::string short_name(const ParamStore& p, int i) {
  const std::string& n = p.entry(i).name;
  const size_t dot = n.find('.', n.find('.') + 1);  // drop "layers.K."
  return n.rfind("layers.", 0) == 0 ? n.substr(dot + 1) : n;
}

}  // namespace

TEST(UpdatePieces, TileEveryRegionWithTheNoDecaySpanFirst) {
  ParamStore p(ModelSpec::from_config(odd_moe()));
  for (int64_t min_elems : {int64_t{1}, int64_t{100}, int64_t{1} << 30}) {
    for (int r = 0; r < static_cast<int>(p.regions().size()); ++r) {
      const ParamRegion& reg = p.regions()[r];
      const std::vector<UpdatePiece> pieces = update_pieces(p, r, min_elems);
      ASSERT_FALSE(pieces.empty());
      std::vector<int> seen(p.entries().size(), 0);
      int64_t decay_covered = 0, plain_covered = 0;
      for (size_t k = 0; k < pieces.size(); ++k) {
        const UpdatePiece& pc = pieces[k];
        EXPECT_LT(pc.begin, pc.end);
        if (!pc.decay) {
          EXPECT_EQ(k, 0u) << "the no-decay span comes first";
          EXPECT_EQ(pc.begin, reg.decay_end);
          EXPECT_EQ(pc.end, reg.end);
          plain_covered += pc.end - pc.begin;
        } else {
          const int64_t expect_begin = k == 0 || !pieces[k - 1].decay ? reg.begin : pieces[k - 1].end;
          EXPECT_EQ(pc.begin, expect_begin) << "decay pieces are contiguous, in flat order";
          decay_covered += pc.end - pc.begin;
        }
        for (int e : pc.entries) {
          ++seen[e];
          EXPECT_GE(p.entry(e).offset, pc.begin) << p.entry(e).name;
          EXPECT_LE(p.entry(e).offset + p.entry(e).numel, pc.end) << p.entry(e).name;
          EXPECT_EQ(p.entry(e).decay, pc.decay) << p.entry(e).name;
        }
      }
      EXPECT_EQ(decay_covered, reg.decay_end - reg.begin);
      EXPECT_EQ(plain_covered, reg.end - reg.decay_end);
      for (int i = 0; i < static_cast<int>(p.entries().size()); ++i)
        EXPECT_EQ(seen[i], p.entry(i).region == r ? 1 : 0) << p.entry(i).name << " in region " << r;
    }
  }
}

TEST(UpdatePieces, MatricesComeInTheOrderTheForwardReadsThem) {
  ParamStore p(ModelSpec::from_config(odd_moe()));
  const std::vector<UpdatePiece> pieces = update_pieces(p, 3, 1);  // layer 2: an MoE layer
  std::vector<std::string> order;
  for (const UpdatePiece& pc : pieces)
    if (pc.decay) {
      ASSERT_EQ(pc.entries.size(), 1u) << "min_elems 1: one matrix per piece";
      order.push_back(short_name(p, pc.entries[0]));
    }
  const std::vector<std::string> expect = {"self_attn.qkv_proj.weight",
                                           "self_attn.o_proj.weight",
                                           "mlp.router.weight",
                                           "mlp.experts.gate_up_proj.weight",
                                           "mlp.experts.down_proj.weight",
                                           "mlp.shared_expert.gate_up_proj.weight",
                                           "mlp.shared_expert.down_proj.weight"};
  EXPECT_EQ(order, expect);
  ASSERT_FALSE(pieces.front().decay);
  std::vector<std::string> plain;
  for (int e : pieces.front().entries) plain.push_back(short_name(p, e));
  for (const char* n :
       {"input_layernorm.weight", "post_attention_layernorm.weight", "mlp.router.expert_bias"})
    EXPECT_NE(std::find(plain.begin(), plain.end(), n), plain.end()) << n;
}

TEST(UpdatePieces, SmallEntriesMergeUpToTheMinimum) {
  ParamStore p(ModelSpec::from_config(odd_moe()));
  const int64_t min_elems = 400;
  const std::vector<UpdatePiece> pieces = update_pieces(p, 2, min_elems);
  for (size_t k = 0; k < pieces.size(); ++k)
    if (pieces[k].decay && k + 1 < pieces.size())  // all but the span's last reach the minimum
      EXPECT_GE(pieces[k].end - pieces[k].begin, min_elems);
  EXPECT_LT(pieces.size(), update_pieces(p, 2, 1).size());
  EXPECT_EQ(update_pieces(p, 2, int64_t{1} << 40).size(), 2u) << "one no-decay and one decay piece";
}

TEST(UpdatePieces, AdamWPieceByPieceIsBitwiseAdamWPerRegion) {
  const ModelSpec spec = ModelSpec::from_config(odd_moe());
  for (MasterStorage storage : {MasterStorage::kRemainders, MasterStorage::kF32}) {
    ParamStore a(spec), b(spec);
    for (ParamStore* p : {&a, &b}) {
      p->allocate(DType::kBF16, Stream::cpu(), DType::kF32, storage);
      p->initialize(11, Stream::cpu());
    }
    OptimConfig oc;
    oc.weight_decay = 0.1;
    AdamW oa(oc, a), ob(oc, b);
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int step = 0; step < 3; ++step) {
      std::vector<float> g(static_cast<size_t>(a.total_numel()));
      for (float& x : g) x = nd(rng);
      for (ParamStore* p : {&a, &b})
        std::memcpy(p->grad_flat().data_ptr(), g.data(), g.size() * sizeof(float));
      oa.step(1e-2, 0.7f, Stream::cpu());
      ob.begin_step();
      for (int r = static_cast<int>(b.regions().size()); r-- > 0;)  // any region order, any piece size
        for (const UpdatePiece& pc : update_pieces(b, r, 50))
          ob.launch_span(pc.begin, pc.end, pc.decay, 1e-2, 0.7f, Stream::cpu());
    }
    auto bytes_equal = [](const Tensor& x, const Tensor& y) {
      return x.nbytes() == y.nbytes() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
    };
    EXPECT_TRUE(bytes_equal(a.compute_flat(), b.compute_flat()));
    EXPECT_TRUE(bytes_equal(a.adam_m_flat(), b.adam_m_flat()));
    EXPECT_TRUE(bytes_equal(a.adam_v_flat(), b.adam_v_flat()));
    if (storage == MasterStorage::kRemainders) {
      EXPECT_TRUE(bytes_equal(a.remainder_flat(), b.remainder_flat()));
    } else {
      EXPECT_TRUE(bytes_equal(a.master_flat(), b.master_flat()));
    }
    // The update did move the weights (the comparison is not of two untouched buffers).
    ParamStore fresh(spec);
    fresh.allocate(DType::kBF16, Stream::cpu(), DType::kF32, storage);
    fresh.initialize(11, Stream::cpu());
    EXPECT_FALSE(bytes_equal(a.compute_flat(), fresh.compute_flat()));
  }
}
