// `projection pipeline` from a config (parallel/pipeline_projection.h): training and planning loads read the
// same keys (training builds its plan when the config loads), the keys reach the split with their origins,
// the configured schedule follows Megatron's and Primus's switches, and bad input is an error naming the key.
#include <gtest/gtest.h>

#include "config/load_config.h"
#include "config/not_supported.h"
#include "config_test_util.h"
#include "model/param_store.h"
#include "parallel/pipeline_projection.h"
#include "parallel/pipeline_runtime.h"
#include "projection/setup.h"
#include "report/pipeline_page.h"

namespace primus::parallel {
namespace {

using config::testing::config_error_of;
using config::testing::fake_env;
using config::testing::TempDir;

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

struct Fixture {
  TempDir dir;
  // A Llama-3.1-8B experiment (32 layers) with `overrides` (YAML lines under overrides:).
  config::ResolvedConfig load(const std::string& overrides, bool planning = true, int64_t dp = 1,
                              std::vector<std::string> cli = {}) {
    const std::string text =
        "work_group: g\nuser_name: u\nexp_name: e\nworkspace: ./w\nmodules:\n  pre_trainer:\n"
        "    framework: megatron\n    config: pre_trainer.yaml\n    model: llama3.1_8B.yaml\n    overrides:\n"
        "      mock_data: true\n      micro_batch_size: 1\n      global_batch_size: 16\n" +
        overrides;
    config::ResolveOptions o;
    o.env = fake_env();
    o.roots = std::vector<std::string>{config::testing::project_configs()};
    o.planning = planning;
    o.plan_data_parallel = dp;
    o.cli_overrides = std::move(cli);
    return config::load_config(dir.write("exp.yaml", text), o);
  }
  PipelinePlanInput input(const std::string& overrides, int64_t dp = 1, std::vector<std::string> cli = {}) {
    return pipeline_input_from_config(load(overrides, true, dp, std::move(cli)));
  }
};

TEST(PipelineProjection, TrainingAndPlanningReadTheSameKeys) {
  Fixture f;
  // Training on 8 ranks (PP 4 x DP 2): the loader builds the training plan's input from the same keys.
  config::ResolveOptions o;
  o.env = fake_env({{"WORLD_SIZE", "8"}});
  o.roots = std::vector<std::string>{config::testing::project_configs()};
  const std::string head =
      "work_group: g\nuser_name: u\nexp_name: e\nworkspace: ./w\nmodules:\n  pre_trainer:\n"
      "    framework: megatron\n    config: pre_trainer.yaml\n    model: llama3.1_8B.yaml\n    overrides:\n"
      "      mock_data: true\n      micro_batch_size: 1\n      global_batch_size: 16\n";
  const config::ResolvedConfig train =
      config::load_config(f.dir.write("train.yaml", head + "      pipeline_model_parallel_size: 4\n"), o);
  ASSERT_TRUE(train.train.pipeline != nullptr);
  EXPECT_EQ(train.train.pipeline->split.pp, 4);
  EXPECT_EQ(train.train.pipeline->microbatches, 8);  // 16 / (1 x DP 2)
  EXPECT_EQ(train.train.pipeline->configured, ScheduleKind::k1F1B);
  const PipelinePlan plan = training_plan(*train.train.pipeline);
  EXPECT_EQ(plan.layout.at(3, 0).describe(), "layers 24-31 + loss");
  // A Primus schedule that is not generated is refused when the config loads, naming what chose it.
  EXPECT_HAS(config_error_of([&] {
               config::load_config(f.dir.write("zb.yaml", head + "      pipeline_model_parallel_size: 4\n"
                                                                 "      patch_zero_bubble: true\n"
                                                                 "      enable_1f1b_v: true\n"),
                                   o);
             }),
             "not supported yet: the pipeline schedule that patch_zero_bubble selects");

  // Planning (world = PP x --dp) reads the same keys.
  config::ResolvedConfig rc = f.load("      pipeline_model_parallel_size: 4\n");
  EXPECT_EQ(rc.world_size, 4);
  PipelinePlanInput in = pipeline_input_from_config(rc);
  EXPECT_EQ(in.split.pp, 4);
  EXPECT_EQ(in.split.num_layers, 32);
  EXPECT_EQ(in.microbatches, 16);
  EXPECT_EQ(in.microbatches_from, "global_batch_size 16 / (micro_batch_size 1 x data-parallel 1)");
  EXPECT_EQ(in.configured, ScheduleKind::k1F1B);
  EXPECT_HAS(in.split.origins.at("pipeline_model_parallel_size"), "exp.yaml");
}

TEST(PipelineProjection, DataParallelDividesTheMicroBatches) {
  Fixture f;
  PipelinePlanInput in = f.input("      pipeline_model_parallel_size: 2\n", /*dp=*/4);
  EXPECT_EQ(in.microbatches, 4);
  EXPECT_HAS(config_error_of([&] { f.input("      pipeline_model_parallel_size: 2\n", 3); }),
             "global_batch_size 16 is not divisible by micro_batch_size 1 x data-parallel size 3");
}

TEST(PipelineProjection, ConfiguredScheduleFollowsTheSwitches) {
  Fixture f;
  auto configured = [&](const std::string& o) {
    return f.input("      pipeline_model_parallel_size: 4\n" + o);
  };
  EXPECT_EQ(configured("      virtual_pipeline_model_parallel_size: 2\n").configured,
            ScheduleKind::kInterleaved);
  EXPECT_EQ(configured("      num_layers_per_virtual_pipeline_stage: 2\n").configured,
            ScheduleKind::kInterleaved);
  EXPECT_EQ(configured("      patch_zero_bubble: true\n").configured, ScheduleKind::kZBH1);
  EXPECT_EQ(configured("      patch_zero_bubble: true\n      zero_bubble_v_schedule: true\n"
                       "      zero_bubble_v_schedule_mem_setup: zb\n")
                .configured,
            ScheduleKind::kZBV);
  PipelinePlanInput half = configured("      patch_zero_bubble: true\n      zero_bubble_v_schedule: true\n");
  EXPECT_EQ(half.configured, ScheduleKind::kZBV);
  ASSERT_EQ(half.notes.size(), 1u);
  EXPECT_HAS(half.notes[0], "zero_bubble_v_schedule_mem_setup 'half'");
  EXPECT_EQ(configured("      patch_zero_bubble: true\n      enable_zero_bubble: false\n").configured,
            ScheduleKind::k1F1B);
  EXPECT_EQ(configured("      patch_primus_pipeline: true\n      pp_algorithm: zbv-formatted\n").configured,
            ScheduleKind::kZBV);
  PipelinePlanInput vhalf = configured("      patch_primus_pipeline: true\n      pp_algorithm: v-half\n");
  EXPECT_FALSE(vhalf.configured.has_value());
  EXPECT_HAS(vhalf.notes.at(0), "pp_algorithm v-half is not generated");
}

TEST(PipelineProjection, ProjectsEverySchedule) {
  Fixture f;
  PipelineProjection p = project_pipeline(f.input("      pipeline_model_parallel_size: 4\n"), {});
  ASSERT_EQ(p.schedules.size(), 5u);
  for (const ScheduleProjection& s : p.schedules) {
    EXPECT_TRUE(s.skipped.empty()) << schedule_name(s.kind) << ": " << s.skipped;
    EXPECT_TRUE(validate_schedule(s.schedule).empty());
  }
  const ScheduleProjection& ofob = p.schedules[1];
  EXPECT_TRUE(ofob.configured);
  EXPECT_NEAR(ofob.sim.bubble_fraction, 3.0 / 19, 1e-12);  // (p - 1) / (m + p - 1)
  EXPECT_EQ(p.schedules[2].layout->vpp(), 2);              // interleaved assumes 2 chunks
  EXPECT_HAS(p.schedules[2].note, "2 chunks per rank assumed");
  const std::string text = projection_text(p);
  EXPECT_HAS(text, "1f1b *");
  EXPECT_HAS(text, "15.79%");  // 1f1b: 3/19
  EXPECT_HAS(text, "rank 3: layers 24-31 + loss");
  EXPECT_HAS(projection_json(p), "\"bubble_fraction\"");
  const std::string html = report::pipeline_projection_html(p, "test <page>");
  EXPECT_HAS(html, "<title>test &lt;page&gt;</title>");
  EXPECT_HAS(html, "<svg");
  EXPECT_HAS(html, "weight grad BW");
  // One schedule asked for by name: its error is the user's.
  EXPECT_HAS(config_error_of([&] {
               project_pipeline(f.input("      pipeline_model_parallel_size: 4\n"),
                                {.microbatches = 6, .schedules = {ScheduleKind::kInterleaved}});
             }),
             "leave a last group of 2 < pipeline_model_parallel_size 4");
  // Among all, another schedule's problem is a skipped row.
  PipelineProjection q =
      project_pipeline(f.input("      pipeline_model_parallel_size: 4\n"), {.microbatches = 6});
  EXPECT_HAS(q.schedules[2].skipped, "last group of 2");
  EXPECT_TRUE(q.schedules[1].skipped.empty());
}

TEST(PipelineProjection, LargeStepsAreDrawnWithFewerMicroBatches) {
  Fixture f;
  PipelineProjection p = project_pipeline(f.input("      pipeline_model_parallel_size: 8\n"),
                                          {.microbatches = 512, .schedules = {ScheduleKind::k1F1B}});
  const std::string html = report::pipeline_projection_html(p, "big");
  EXPECT_HAS(html, "Drawn with 16 micro-batches");
  EXPECT_LT(html.size(), 200000u);
}

TEST(PipelineProjection, SplitErrorsNameTheKeyAndItsOrigin) {
  Fixture f;
  EXPECT_HAS(
      config_error_of([&] { project_pipeline(f.input("      pipeline_model_parallel_size: 5\n"), {}); }),
      "num_layers=32 (");
  EXPECT_HAS(
      config_error_of([&] { project_pipeline(f.input("      pipeline_model_parallel_size: 5\n"), {}); }),
      "is not divisible by pipeline_model_parallel_size=5 (");
  // The same from the command line cites the command line.
  EXPECT_HAS(
      config_error_of([&] { project_pipeline(f.input("", 1, {"pipeline_model_parallel_size=3"}), {}); }),
      "pipeline_model_parallel_size=3 (command line");
  EXPECT_HAS(config_error_of([&] {
               project_pipeline(f.input("      pipeline_model_parallel_size: 2\n"
                                        "      pipeline_model_parallel_layout: \"Et*15|t*16L\"\n"),
                                {});
             }),
             "places 31 decoder layers (t) but num_layers=32");
  // A layout given as a list of chunks (Megatron accepts both).
  PipelinePlanInput listed = f.input(
      "      pipeline_model_parallel_size: 2\n"
      "      pipeline_model_parallel_layout: [[embedding, decoder], [decoder, loss]]\n",
      1, {"num_layers=2"});
  EXPECT_EQ(listed.split.layout, "Et|tL");
  EXPECT_HAS(config_error_of([&] {
               f.input(
                   "      pipeline_model_parallel_size: 2\n"
                   "      pipeline_model_parallel_layout: [[embedding, attention], [loss]]\n");
             }),
             "unknown layer type 'attention'");
  // A config whose even split does not divide is still planned with an explicit layout.
  PipelineProjection p =
      project_pipeline(f.input("      pipeline_model_parallel_size: 3\n"
                               "      pipeline_model_parallel_layout: \"Et*10|t*11|t*11L\"\n"),
                       {.schedules = {ScheduleKind::k1F1B}});
  EXPECT_EQ(p.schedules[0].layout->at(2, 0).describe(), "layers 21-31 + loss");
}

TEST(PipelineProjection, PrimusCostKeysSetTheDurations) {
  Fixture f;
  PipelineProjection p = project_pipeline(f.input("      pipeline_model_parallel_size: 2\n"
                                                  "      pp_cost_f: [1000, 3000]\n      pp_cost_b: 2000\n"
                                                  "      pp_cost_w: 1000\n"),
                                          {.schedules = {ScheduleKind::k1F1B}});
  const PipelineCosts& c = p.schedules[0].costs;
  EXPECT_NEAR(c.chunk[0][0].f, 0.5, 1e-12);  // 1000 / mean 2000
  EXPECT_NEAR(c.chunk[1][0].f, 1.5, 1e-12);
  EXPECT_NEAR(c.chunk[1][0].b, 1.5, 1e-12);  // (2000 + 1000) / 2000
  EXPECT_HAS(config_error_of([&] {
               project_pipeline(
                   f.input("      pipeline_model_parallel_size: 2\n      pp_cost_f: [1, 2, 3]\n"), {});
             }),
             "pp_cost_f lists 3 values; expected one, or one per pipeline rank (2)");
}

// The memory projection's parameters per pipeline rank are the trainer's: the loss's stage of a
// multi-token-prediction model counts the MTP depth (its MoE experts split over ep) and the copy of the
// embedding it reads the shifted tokens from (ModelSpec::holds_tied_copy), untied or tied.
TEST(PipelineProjection, RankParametersCountTheMtpDepthAndTheEmbeddingCopy) {
  Fixture f;
  for (const std::string moe : {"",
                                "      num_experts: 4\n      moe_router_topk: 2\n      moe_ffn_hidden_size: "
                                "1024\n      moe_layer_freq: 1\n"}) {
    for (const bool tied : {false, true}) {
      const config::ResolvedConfig rc =
          f.load("      num_layers: 4\n      pipeline_model_parallel_size: 2\n      mtp_num_layers: 1\n" +
                 std::string(tied ? "      untie_embeddings_and_output_weights: false\n" : "") + moe);
      const projection::Setup s = projection::make_setup(rc, 2, 2, /*gpu=*/false);
      ASSERT_EQ(s.ranks.size(), 2u);
      EXPECT_EQ(s.ranks[0].mtp_layers, 0);
      EXPECT_EQ(s.ranks[1].mtp_layers, 1);
      const ModelSpec whole = ModelSpec::from_config(rc.train.model);
      for (int r = 0; r < 2; ++r) {
        const projection::RankParams p = projection::rank_parameters(s, s.ranks[static_cast<size_t>(r)]);
        const ParamStore store(stage_spec(whole, s.plan->layout, r));
        EXPECT_EQ(p.expert > 0, !moe.empty());
        EXPECT_EQ(p.dense + p.expert, static_cast<double>(store.parameter_count()))
            << "rank " << r << (tied ? " tied" : " untied") << (moe.empty() ? "" : " moe");
      }
    }
  }
}

}  // namespace
}  // namespace primus::parallel
