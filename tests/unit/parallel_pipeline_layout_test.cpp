// The pipeline split (parallel/pipeline_layout.h): Megatron's documented examples, Primus's manual split,
// the layout grammar, and an error naming the key for every bad input.
#include <gtest/gtest.h>

#include <functional>

#include "config_test_util.h"
#include "core/error.h"
#include "parallel/pipeline_layout.h"

namespace primus::parallel {
namespace {

using primus::config::testing::config_error_of;

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

// "layers a-b" of every (rank, chunk), for compact expectations.
std::vector<std::vector<std::pair<int, int>>> layer_ranges(const PipelineLayout& l) {
  std::vector<std::vector<std::pair<int, int>>> out(l.pp());
  for (int r = 0; r < l.pp(); ++r)
    for (int c = 0; c < l.vpp(); ++c)
      out[r].emplace_back(l.at(r, c).first_layer, l.at(r, c).first_layer + l.at(r, c).num_layers);
  return out;
}

using Ranges = std::vector<std::vector<std::pair<int, int>>>;

TEST(PipelineLayout, EvenSplitPutsEmbeddingFirstAndLossLast) {
  PipelineLayout l = make_pipeline_layout({.num_layers = 32, .pp = 4});
  EXPECT_EQ(l.vpp(), 1);
  EXPECT_EQ(layer_ranges(l), (Ranges{{{0, 8}}, {{8, 16}}, {{16, 24}}, {{24, 32}}}));
  EXPECT_TRUE(l.at(0, 0).embedding);
  EXPECT_FALSE(l.at(0, 0).loss);
  EXPECT_TRUE(l.at(3, 0).loss);
  EXPECT_EQ(l.at(0, 0).describe(), "embedding + layers 0-7");
  EXPECT_EQ(l.at(3, 0).describe(), "layers 24-31 + loss");
}

TEST(PipelineLayout, VirtualStagesFollowMegatronsDocstring) {
  // Megatron's get_num_layers_to_build: "8 layers, 2 stages, 4 model chunks: Stage 0: [0] [2] [4] [6],
  // Stage 1: [1] [3] [5] [7]"; "8 layers, 2 stages, 2 virtual stages: Stage 0: [0, 1] [4, 5], Stage 1:
  // [2, 3] [6, 7]".
  EXPECT_EQ(layer_ranges(make_pipeline_layout({.num_layers = 8, .pp = 2, .vpp = 4})),
            (Ranges{{{0, 1}, {2, 3}, {4, 5}, {6, 7}}, {{1, 2}, {3, 4}, {5, 6}, {7, 8}}}));
  EXPECT_EQ(layer_ranges(make_pipeline_layout({.num_layers = 8, .pp = 2, .vpp = 2})),
            (Ranges{{{0, 2}, {4, 6}}, {{2, 4}, {6, 8}}}));
  // num_layers_per_virtual_pipeline_stage derives the same vpp.
  PipelineLayout l = make_pipeline_layout({.num_layers = 8, .pp = 2, .layers_per_virtual_stage = 1});
  EXPECT_EQ(l.vpp(), 4);
  EXPECT_TRUE(l.at(1, 3).loss);
  EXPECT_TRUE(l.at(0, 0).embedding);
  EXPECT_HAS(config_error_of([] {
               make_pipeline_layout({.num_layers = 8, .pp = 2, .vpp = 2, .layers_per_virtual_stage = 1});
             }),
             "gives 4 chunks per rank but virtual_pipeline_model_parallel_size=2");
  EXPECT_HAS(config_error_of(
                 [] { make_pipeline_layout({.num_layers = 12, .pp = 2, .layers_per_virtual_stage = 4}); }),
             "not a multiple of 4");
  EXPECT_HAS(config_error_of([] { make_pipeline_layout({.num_layers = 12, .pp = 2, .vpp = 4}); }),
             "rank 0 holds 6 layers, which is not divisible by 4 chunks per rank");
}

TEST(PipelineLayout, UnevenFirstAndLastStages) {
  PipelineLayout l =
      make_pipeline_layout({.num_layers = 30, .pp = 4, .first_stage_layers = 6, .last_stage_layers = 6});
  EXPECT_EQ(layer_ranges(l), (Ranges{{{0, 6}}, {{6, 15}}, {{15, 24}}, {{24, 30}}}));
  // Only the first given: the other three share the rest.
  EXPECT_EQ(layer_ranges(make_pipeline_layout({.num_layers = 31, .pp = 4, .first_stage_layers = 1})),
            (Ranges{{{0, 1}}, {{1, 11}}, {{11, 21}}, {{21, 31}}}));
  // With virtual stages each rank's count must split over its chunks.
  PipelineLayout v = make_pipeline_layout(
      {.num_layers = 28, .pp = 4, .vpp = 2, .first_stage_layers = 4, .last_stage_layers = 4});
  // 20 middle layers: 10 per middle rank, 5 per chunk; the first and last ranks 2 per chunk.
  EXPECT_EQ(layer_ranges(v),
            (Ranges{{{0, 2}, {14, 16}}, {{2, 7}, {16, 21}}, {{7, 12}, {21, 26}}, {{12, 14}, {26, 28}}}));
  EXPECT_TRUE(v.at(3, 1).loss);
  EXPECT_HAS(
      config_error_of([] {
        make_pipeline_layout({.num_layers = 30,
                              .pp = 4,
                              .first_stage_layers = 5,
                              .last_stage_layers = 6,
                              .origins = {{"decoder_first_pipeline_num_layers", "exp.yaml:7:3"}}});
      }),
      "decoder_first_pipeline_num_layers=5 (exp.yaml:7:3), decoder_last_pipeline_num_layers=6 leave 19 "
      "layers of num_layers=30 for 2 middle ranks");
  EXPECT_HAS(
      config_error_of([] {
        make_pipeline_layout({.num_layers = 8, .pp = 2, .first_stage_layers = 6, .last_stage_layers = 6});
      }),
      "leave -4 of num_layers=8");
  EXPECT_HAS(config_error_of([] {
               make_pipeline_layout(
                   {.num_layers = 8, .pp = 2, .layers_per_virtual_stage = 2, .first_stage_layers = 2});
             }),
             "cannot be combined with decoder_first/last_pipeline_num_layers");
}

TEST(PipelineLayout, AccountingForEmbeddingAndLoss) {
  // 30 layers + embedding + loss = 32 "layers", 8 per rank; the first and last chunk build one fewer.
  PipelineLayout l = make_pipeline_layout(
      {.num_layers = 30, .pp = 4, .account_for_embedding = true, .account_for_loss = true});
  EXPECT_EQ(layer_ranges(l), (Ranges{{{0, 7}}, {{7, 15}}, {{15, 23}}, {{23, 30}}}));
  PipelineLayout v = make_pipeline_layout(
      {.num_layers = 30, .pp = 4, .vpp = 2, .account_for_embedding = true, .account_for_loss = true});
  EXPECT_EQ(v.at(0, 0).num_layers, 3);
  EXPECT_EQ(v.at(1, 0).num_layers, 4);
  EXPECT_EQ(v.at(3, 1).num_layers, 3);
  EXPECT_EQ(v.at(3, 1).first_layer, 27);
  EXPECT_HAS(
      config_error_of([] { make_pipeline_layout({.num_layers = 30, .pp = 4, .account_for_loss = true}); }),
      "num_layers=30 + 1 for the embedding/loss (account_for_*_in_pipeline_split) is not divisible by "
      "pipeline_model_parallel_size=4");
}

TEST(PipelineLayout, LayersThatDoNotDivideNameTheKeys) {
  const std::string e = config_error_of([] {
    make_pipeline_layout(
        {.num_layers = 30,
         .pp = 4,
         .origins = {{"num_layers", "llama.yaml:3:1"}, {"pipeline_model_parallel_size", "cli"}}});
  });
  EXPECT_HAS(e, "num_layers=30 (llama.yaml:3:1) is not divisible by pipeline_model_parallel_size=4 (cli)");
  try {
    make_pipeline_layout({.num_layers = 30, .pp = 4});
  } catch (const ConfigError& err) {
    EXPECT_HAS(err.hint(), "pipeline_model_parallel_layout");
  }
}

TEST(PipelineLayout, MtpLayersGoWithTheLossWithoutALayout) {
  PipelineLayout l = make_pipeline_layout({.num_layers = 8, .mtp_num_layers = 1, .pp = 2});
  EXPECT_EQ(l.at(1, 0).num_mtp, 1);
  EXPECT_EQ(l.at(1, 0).describe(), "layers 4-7 + MTP layer 0 + loss");
  EXPECT_EQ(l.layer_count(1, 0), 5);
}

TEST(PipelineLayout, PrimusManualSplit) {
  // Primus's validate_manual_split docstring: "[2,3,2,2,2,2,2,1] in layer16-pp4-vpp2 ... the vpp split of
  // pp_rank0/1/2/3 is [2,3]/[2,2]/[2,2]/[2,1]" (entry rank * vpp + chunk; layers in model order).
  PipelineLayout l =
      make_pipeline_layout({.num_layers = 16, .pp = 4, .vpp = 2, .manual_split = {2, 3, 2, 2, 2, 2, 2, 1}});
  EXPECT_EQ(layer_ranges(l),
            (Ranges{{{0, 2}, {8, 11}}, {{2, 4}, {11, 13}}, {{4, 6}, {13, 15}}, {{6, 8}, {15, 16}}}));
  // With the V shape the list is in model order: "[3,2,2,2,2,2,2,1] ... pp_rank0: 3 ... 1".
  PipelineLayout v = make_pipeline_layout(
      {.num_layers = 16, .pp = 4, .manual_split = {3, 2, 2, 2, 2, 2, 2, 1}, .v_shape = true});
  EXPECT_EQ(layer_ranges(v),
            (Ranges{{{0, 3}, {15, 16}}, {{3, 5}, {13, 15}}, {{5, 7}, {11, 13}}, {{7, 9}, {9, 11}}}));
  EXPECT_TRUE(v.at(0, 1).loss);
  EXPECT_HAS(config_error_of([] {
               make_pipeline_layout({.num_layers = 16, .pp = 4, .manual_split = {4, 4, 4}});
             }),
             "has 3 entries; expected 4 (one per rank)");
  EXPECT_HAS(config_error_of([] {
               make_pipeline_layout({.num_layers = 16, .pp = 4, .manual_split = {4, 4, 4, 5}});
             }),
             "sums to 17 but num_layers=16");
  EXPECT_HAS(config_error_of([] {
               make_pipeline_layout({.num_layers = 16, .pp = 4, .manual_split = {8, 0, 4, 4}});
             }),
             "every entry must be > 0, got 0");
  EXPECT_HAS(config_error_of([] {
               make_pipeline_layout(
                   {.num_layers = 16, .pp = 4, .last_stage_layers = 4, .manual_split = {4, 4, 4, 4}});
             }),
             "decoder_pipeline_manual_split_list");
}

TEST(PipelineLayout, VShapePutsTheLossOnRankZero) {
  PipelineLayout l = make_pipeline_layout({.num_layers = 16, .pp = 4, .v_shape = true});
  EXPECT_EQ(l.vpp(), 2);
  EXPECT_EQ(layer_ranges(l),
            (Ranges{{{0, 2}, {14, 16}}, {{2, 4}, {12, 14}}, {{4, 6}, {10, 12}}, {{6, 8}, {8, 10}}}));
  EXPECT_TRUE(l.at(0, 0).embedding);
  EXPECT_TRUE(l.at(0, 1).loss);
  EXPECT_EQ(l.topology().stage_of(3, 1), 4);
  EXPECT_EQ(l.topology().rank_chunk_of(7), (std::pair<int, int>{0, 1}));
  EXPECT_HAS(
      config_error_of([] { make_pipeline_layout({.num_layers = 24, .pp = 4, .vpp = 3, .v_shape = true}); }),
      "runs exactly 2 chunks per rank");
}

TEST(PipelineLayout, LayoutGrammarExpandsLikeMegatron) {
  // Megatron's parse_str_to_list examples (with our layer letters).
  EXPECT_EQ(expand_layout_string("Ettt|(tt|)*2,m|L"),
            (std::vector<std::string>{"Ettt", "tt", "tt", "m", "L"}));
  EXPECT_EQ(expand_layout_string("(tt)*3"), (std::vector<std::string>{"tttttt"}));
  EXPECT_EQ(expand_layout_string("Et,(tt|)*2,L"), (std::vector<std::string>{"Ettt", "tt", "L"}));
  EXPECT_EQ(expand_layout_string("(|tt)*2,L"), (std::vector<std::string>{"", "tt", "ttL"}));
  EXPECT_EQ(expand_layout_string("Et*3|*2L"), (std::vector<std::string>{"Ettt", "", "L"}));
  EXPECT_EQ(expand_layout_string("E(t*2|)*2L"), (std::vector<std::string>{"Ett", "tt", "L"}));
}

TEST(PipelineLayout, LayoutGrammarErrorsNameThePosition) {
  EXPECT_HAS(config_error_of([] { expand_layout_string("Et*3|x|L"); }), "unknown layer 'x' at position 5");
  EXPECT_HAS(config_error_of([] { expand_layout_string("Et*3|x|L"); }),
             "expected E (embedding), t (decoder layer)");
  EXPECT_HAS(config_error_of([] { expand_layout_string("E(tt|*2L"); }), "'(' is not closed at position 1");
  EXPECT_HAS(config_error_of([] { expand_layout_string("E(tt|)L"); }),
             "a group (...) must be followed by *N");
  EXPECT_HAS(config_error_of([] { expand_layout_string("E((t)*2|)*2L"); }), "nested parentheses");
  EXPECT_HAS(config_error_of([] { expand_layout_string("Et*|L"); }), "'*' is not followed by a repeat count");
  EXPECT_HAS(config_error_of([] { expand_layout_string("*3t"); }), "'*' repeats nothing");
  EXPECT_HAS(config_error_of([] { expand_layout_string("Ett)L"); }), "')' without '('");
  EXPECT_HAS(config_error_of([] { expand_layout_string(",,"); }), "empty layout");
  EXPECT_HAS(config_error_of([] { expand_layout_string("E t|L"); }), "unknown layer ' '");
}

TEST(PipelineLayout, MegatronsDeepSeekV3Layout) {
  // Megatron's docs: DeepSeek-V3 (61 decoder layers + 1 MTP layer) with PP16 VPP2:
  //   PP rank 0: embedding + 3 decoder | 2 decoder; 1-13: 2 | 2; 14: 2 | mtp; 15: 2 | loss.
  PipelineLayout l =
      make_pipeline_layout({.num_layers = 61, .mtp_num_layers = 1, .pp = 16, .layout = "Et*3|(tt|)*29,m|L"});
  EXPECT_EQ(l.vpp(), 2);
  EXPECT_EQ(l.at(0, 0).describe(), "embedding + layers 0-2");
  EXPECT_EQ(l.at(0, 1).describe(), "layers 33-34");
  EXPECT_EQ(l.at(13, 1).describe(), "layers 59-60");
  EXPECT_EQ(l.at(14, 0).describe(), "layers 29-30");
  EXPECT_EQ(l.at(14, 1).describe(), "MTP layer 0");
  EXPECT_EQ(l.at(15, 1).describe(), "loss");
  EXPECT_EQ(l.layer_count(15, 1), 0);
  EXPECT_HAS(l.describe(), "rank 14 | chunk 0: layers 29-30 | chunk 1: MTP layer 0");
}

TEST(PipelineLayout, LayoutErrorsNameTheKeyAndWhatWasExpected) {
  auto with_layout = [](std::string layout, int64_t layers, int64_t pp, int64_t mtp = 0) {
    return config_error_of([=] {
      make_pipeline_layout({.num_layers = layers,
                            .mtp_num_layers = mtp,
                            .pp = pp,
                            .layout = layout,
                            .origins = {{"pipeline_model_parallel_layout", "exp.yaml:12:5"}}});
    });
  };
  EXPECT_HAS(
      with_layout("Et*3|(tt|)*29,m|L", 60, 16, 1),
      "pipeline_model_parallel_layout=\"Et*3|(tt|)*29,m|L\" (exp.yaml:12:5) places 61 decoder layers (t) but "
      "num_layers=60: the layout must cover every layer");
  EXPECT_HAS(with_layout("Et*3|(tt|)*29,m|L", 61, 16, 0), "places 1 MTP layers (m) but mtp_num_layers=0");
  EXPECT_HAS(with_layout("Ett|tt|ttL", 6, 2),
             "has 3 model chunks ('|'-separated), which is not a multiple of "
             "pipeline_model_parallel_size=2");
  EXPECT_HAS(with_layout("tEt|ttL", 4, 2), "the embedding E must appear exactly once, as the first entry");
  EXPECT_HAS(with_layout("Ett|tLt", 5, 2), "the loss L must appear exactly once, as the last entry");
  EXPECT_HAS(with_layout("Ett|mtL", 3, 2, 1), "a decoder layer (t) follows an MTP layer (m)");
  EXPECT_HAS(with_layout("Ett|tm||L", 3, 2, 1),
             "MTP layers sit in chunk 0 of rank 1; they must be in the rank's "
             "last chunk (1)");
  EXPECT_HAS(with_layout("Et|t|m|mL", 2, 2, 2), "MTP layers are spread over 2 chunks");
  EXPECT_HAS(with_layout("Et|q|L", 1, 3), "unknown layer 'q' at position 3");
  EXPECT_HAS(config_error_of([] {
               make_pipeline_layout({.num_layers = 4, .pp = 2, .first_stage_layers = 2, .layout = "Ett|ttL"});
             }),
             "decoder_first_pipeline_num_layers cannot be combined with pipeline_model_parallel_layout");
  EXPECT_HAS(config_error_of(
                 [] { make_pipeline_layout({.num_layers = 4, .pp = 2, .vpp = 2, .layout = "Ett|ttL"}); }),
             "gives 1 chunks per rank (2 chunks / pp 2), but virtual_pipeline_model_parallel_size=2");
  EXPECT_HAS(config_error_of([] {
               make_pipeline_layout({.num_layers = 4, .pp = 2, .layout = "Ett|ttL", .v_shape = true});
             }),
             "the V-shape schedule (ZB-V) needs exactly 2");
}

TEST(PipelineLayout, VShapeLayoutStringIsInModelOrder) {
  // With the V shape chunk i < pp sits on rank i, chunk i >= pp on rank 2 pp - 1 - i (Primus's layout).
  PipelineLayout l =
      make_pipeline_layout({.num_layers = 6, .pp = 2, .layout = "Et|tt|tt|tL", .v_shape = true});
  EXPECT_EQ(l.at(0, 0).describe(), "embedding + layer 0");
  EXPECT_EQ(l.at(1, 0).describe(), "layers 1-2");
  EXPECT_EQ(l.at(1, 1).describe(), "layers 3-4");
  EXPECT_EQ(l.at(0, 1).describe(), "layer 5 + loss");
}

}  // namespace
}  // namespace primus::parallel
