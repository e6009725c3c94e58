// TorchTitan-dialect keys that close the table: the JobConfig fields of TorchTitan at the commit Primus pins
// (third_party/torchtitan 73a0e69: torchtitan/config/job_config.py) that the other TorchTitan files do not
// declare, and Primus's model-argument override `model.n_layers`.
#include "config/key_builders.h"
#include "config/key_reasons.h"
#include "config/keys_torchtitan.h"

namespace primus::config::keys {

namespace {
constexpr const char* kWhyConfigPlumbing =
    "TorchTitan's config-file plumbing (its own launcher reads it); Primus-C++ reads the experiment file";
constexpr const char* kWhyMemoryBudget =
    "applies only to activation_checkpoint.mode memory_budget, which is not supported yet";
constexpr const char* kWhyNoRngInRecompute =
    "the recomputed forward draws no random numbers here (no dropout), so there is no RNG state to keep";
}  // namespace

void add_torchtitan_upstream_keys(KeyTable& t) {
  t.group("job");
  add_all(t, kWhyConfigPlumbing,
          {{"job.config_file", kS, "null", "the TOML/YAML file TorchTitan was started with"},
           {"job.print_config", kB, "false", "print the resolved config at start-up"},
           {"job.save_config_file", kS, "null", "write the resolved config to this file"},
           {"job.custom_config_module", kS, "", "Python module extending JobConfig"}});

  t.group("model");
  t.add(impl("model.n_layers", kI, "null",
             "Primus's model override: transformer layers instead of the flavor's (null: the flavor's)")
            .check(positive()));
  t.add(unsup(
      "model.tokenizer_path", kS, "null", "deprecated tokenizer folder",
      [](const Value& v, const KeyLookup&) { return v.is_null() || v.as_string().empty(); },
      "use model.hf_assets_path"));
  t.add(noeff("model.print_after_conversion", kB, "false", kWhyLogExtra, "print the model after converters"));

  t.group("training");
  t.add(unsup_unless_default("training.dtype", kS, "float32",
                             "parameter dtype under FSDP (bfloat16: pure-bf16 training)"));
  t.add(section("training.dataloader", "PyTorch data-loader settings"));
  t.add(section("validation.dataloader", "PyTorch data-loader settings of validation"));
  add_all(
      t, kWhyData,
      {{"training.dataloader.num_workers", kI, "0", "data-loader worker processes"},
       {"training.dataloader.persistent_workers", kB, "false", "keep data-loader workers alive"},
       {"training.dataloader.pin_memory", kB, "false", "pinned host memory for batches"},
       {"training.dataloader.prefetch_factor", kI, "null", "batches prefetched per worker"},
       {"validation.dataloader.num_workers", kI, "0", "validation data-loader workers"},
       {"validation.dataloader.persistent_workers", kB, "false", "keep validation workers alive"},
       {"validation.dataloader.pin_memory", kB, "false", "pinned memory for validation batches"},
       {"validation.dataloader.prefetch_factor", kI, "null", "validation batches prefetched per worker"}});
  t.add(unsup("lr_scheduler.total_steps", kI, "null", "schedule length independent of training.steps"));

  t.group("parallelism");
  t.add(noeff("parallelism.pipeline_parallel_expert_parallel_overlap", kB, "true", kWhyTitanPP,
              "overlap PP and EP communication"));
  t.add(noeff("parallelism.context_parallel_load_balancer", kS, "headtail", kWhyCP, "CP sequence split"));
  t.add(noeff("parallelism.expert_parallel_comm_backend", kS, "standard", kWhyMoE,
              "expert all-to-all: standard | deepep"));

  t.group("checkpoint");
  t.add(noeff("checkpoint.enable_ft_dataloader_checkpoints", kB, "true", kWhyResilience,
              "data-loader state in TorchFT checkpoints"));
  t.add(unsup("checkpoint.initial_load_in_hf_quantized", kB, "false", "load a quantised HF checkpoint"));
  t.add(unsup("checkpoint.load_only", kB, "false", "load checkpoints but never save"));

  t.group("activation recomputation");
  add_all(
      t, kWhyMemoryBudget,
      {{"activation_checkpoint.memory_budget", kF, "0.5", "activation-memory budget (0..1)"},
       {"activation_checkpoint.visualize_memory_budget_pareto", kB, "false", "plot the budget trade-off"}});
  t.add(noeff("activation_checkpoint.preserve_rng_state", kB, "true", kWhyNoRngInRecompute,
              "restore the RNG state in recomputation"));
  add_all(t, kWhyTorch,
          {{"activation_checkpoint.determinism_check", kS, "default", "torch.utils.checkpoint check"},
           {"activation_checkpoint.debug", kB, "false", "torch.utils.checkpoint debug output"},
           {"compile.backend", kS, "inductor", "torch.compile backend"}});

  t.group("communication");
  t.add(noeff("comm.save_traces_file_prefix", kS, "rank_", kWhyLogExtra, "flight-recorder file prefix"));
  t.add(unsup_unless_default("comm.mode", kS, "default",
                             "communication mode: default | fake_backend | local_tensor"));
}

}  // namespace primus::config::keys
