// `primus train pretrain --config EXP.yaml [--dry-run] [overrides...]`, as Primus's `train pretrain`: tokens
// the command does not know are configuration overrides (key=value, --key=value, --key value, --flag).
// `primus train posttrain` is Primus's supervised fine-tuning (stage: sft): the same trainer on chat data.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "cli/cli_context.h"
#include "config/did_you_mean.h"
#include "config/key_decl.h"
#include "config/load_config.h"
#include "config/not_supported.h"
#include "config/report.h"
#include "config/yaml_reader.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "model/fp8_linear.h"
#include "parallel/layout_report.h"
#include "projection/memory_model.h"
#include "train/run.h"

namespace primus::cli {
namespace {

struct PretrainArgs {
  std::string config;
  bool dry_run = false;
  std::string backend_path;
  std::string resume;  // "auto" or a checkpoint path
  int nnodes = 0;      // with nproc_per_node: plan for that world (--dry-run only)
  int nproc_per_node = 0;
  std::vector<std::string>
      overrides_files;  // --overrides FILE: flat key: value YAML (projection plan's output)
  std::vector<std::string> overrides;
};

const std::vector<std::string> kPretrainOptions = {"--config",         "--exp",       "--dry-run",
                                                   "--backend_path",   "--resume",    "--nnodes",
                                                   "--nproc-per-node", "--overrides", "--help"};

// An overrides file (`primus projection plan --output`): a mapping of keys to scalars, nested maps read as
// dotted keys, turned into key=value tokens placed before the command line's (which win).
std::vector<std::string> overrides_from_file(const std::string& path) {
  const config::Value root = config::read_yaml_file(path);
  if (!root.is_map())
    throw ConfigError(fmt::format("--overrides {}: expected a mapping of config keys to values, got a {}",
                                  path, root.type_name()));
  std::vector<std::string> tokens;
  std::function<void(const config::Value&, const std::string&)> walk = [&](const config::Value& v,
                                                                           const std::string& prefix) {
    for (const auto& [key, value] : v.entries()) {
      const std::string name = prefix.empty() ? key : prefix + "." + key;
      if (value.is_map()) {
        walk(value, name);
      } else if (value.is_list()) {
        throw ConfigError(fmt::format("{}: {} is a list; an overrides file holds scalars (key: value)",
                                      value.origin().str(), name));
      } else {
        tokens.push_back(name + "=" +
                         (value.is_null()     ? std::string("None")
                          : value.is_string() ? value.as_string()
                                              : value.repr()));
      }
    }
  };
  walk(root, "");
  return tokens;
}

bool is_config_key(const std::string& key) {
  for (const config::KeyTable* t : {&config::megatron_keys(), &config::torchtitan_keys()})
    if (t->find(key) != nullptr) return true;
  return false;
}

// An override that is no configuration key but is close to one of this command's options is a mistyped option
// ("--dryrun"): say so here, where the suggestion can be the option.
void check_mistyped_options(const std::vector<std::string>& overrides) {
  for (const std::string& token : overrides) {
    if (token.rfind("--", 0) != 0) continue;
    std::string key =
        token.substr(2, token.find('=') == std::string::npos ? std::string::npos : token.find('=') - 2);
    if (is_config_key(key)) continue;
    std::vector<std::string> near = config::did_you_mean("--" + key, kPretrainOptions, 1);
    // Only a near spelling ("--dryrun", "--dry_run", "--confg"): a longer word is more likely a config key.
    if (!near.empty() && config::edit_distance(key, near[0].substr(2)) <= 2)
      throw ConfigError(fmt::format("command line: unknown option '--{}'; did you mean '{}'?", key, near[0]),
                        "run `primus train pretrain --help`");
  }
}

// The FP8 recipe a run would use, checked against the model's sizes as training checks them (the GPU's
// FP8 support is checked when training starts): "" for BF16 runs.
static std::string fp8_report(const TrainConfig& t) {
  const std::optional<Fp8Recipe> r = Fp8Recipe::from_config(t.fp8);
  if (!r) return {};
  // A dry run of a tokenizer whose vocabulary is not known here (no tokenizer file at hand, not in
  // config/vocab's table) has no model to size: say so rather than fail on the sizes of an empty vocabulary.
  if (t.model.padded_vocab_size <= 0 && t.model.vocab_size <= 0)
    return fmt::format(
        "fp8            {} ({}); its GEMM sizes are checked when training starts (the "
        "vocabulary size is unknown here)\n",
        r->describe(), t.fp8.source);
  check_fp8_runnable(*r, t, Stream::cpu());
  return fmt::format("fp8            {} ({}); {:.1f}% of the step's GEMM FLOPs in FP8\n", r->describe(),
                     t.fp8.source, 100.0 * fp8_gemm_flop_share(*r, t));
}

// The memory projection of the run (projection/memory_model.h): per-rank peak and headroom on the GPU a run
// would use (the local one's memory when present, else an H100's), or the CPU trainer's peak.
std::string memory_section(const config::ResolvedConfig& rc, int world, int nproc) {
  const bool gpu = config::guess_device(rc.train.device).gpu;
  projection::GpuSpec spec = projection::gpu_spec("H100-SXM");
  size_t used = 0, total = 0;
  if (gpu && cuda_available()) device_memory_info(Device::cuda(0), &used, &total);
  if (total > 0) spec.memory_gb = static_cast<double>(total) / 1e9;
  const projection::Setup setup = projection::make_setup(rc, world, nproc, gpu);
  const projection::MemoryProjection m = projection::project_memory(setup, spec);
  std::string out = "\n== Memory (per rank, projected; `primus projection memory` for the breakdown) ==\n";
  for (const projection::RankMemory& r : m.ranks)
    out += fmt::format("pp rank {:<3} peak {:.2f} GB ({})\n", r.pp_rank, r.peak_bytes / 1e9, r.holds);
  if (gpu) {
    out += fmt::format("GPU            {} with {:.1f} GB: {} (+ {:.1f} GB CUDA context and NCCL)\n",
                       total > 0 ? "this GPU" : "an H100", spec.memory_gb,
                       m.fits() ? fmt::format("fits, {:.1f} GB to spare", m.headroom_bytes() / 1e9)
                                : fmt::format("DOES NOT FIT ({:.1f} GB short)", -m.headroom_bytes() / 1e9),
                       m.outside_allocator_bytes / 1e9);
  } else {
    const projection::Setup on_gpu = projection::make_setup(rc, world, nproc, true);
    const projection::MemoryProjection g = projection::project_memory(on_gpu, spec);
    out += fmt::format("on an H100     peak {:.2f} GB per rank in BF16: {}\n", g.peak_bytes / 1e9,
                       g.fits() ? "fits" : "does not fit");
  }
  return out;
}

// Before a GPU run starts: the projected peak against this GPU's memory, as a warning (the projection can be
// off by a few percent; the run is not refused).
void warn_if_projected_oom(const config::ResolvedConfig& rc) {
  if (!config::guess_device(rc.train.device).gpu || !cuda_available()) return;
  size_t used = 0, total = 0;
  device_memory_info(Device::cuda(0), &used, &total);
  if (total == 0) return;
  projection::GpuSpec spec = projection::gpu_spec("H100-SXM");
  spec.memory_gb = static_cast<double>(total) / 1e9;
  try {
    const projection::MemoryProjection m = projection::project_memory(
        projection::make_setup(rc, static_cast<int>(rc.world_size), static_cast<int>(rc.world_size), true),
        spec);
    if (!m.fits())
      log::warn(
          "memory: the projected peak is {:.1f} GB per GPU (+ {:.1f} GB context and NCCL) against {:.1f} GB "
          "on this GPU: the run will likely run out of memory (`primus projection memory` / `plan` show "
          "what would fit)",
          m.peak_bytes / 1e9, m.outside_allocator_bytes / 1e9, spec.memory_gb);
  } catch (const ConfigError&) {
    // the layout's own errors are the trainer's to report
  }
}

// The arguments with --overrides files' tokens placed before the command line's (which win).
PretrainArgs with_override_files(const PretrainArgs& given) {
  PretrainArgs args = given;
  std::vector<std::string> from_files;
  for (const std::string& f : args.overrides_files)
    for (std::string& t : overrides_from_file(f)) from_files.push_back(std::move(t));
  args.overrides.insert(args.overrides.begin(), from_files.begin(), from_files.end());
  return args;
}

// --resume works in both dialects: it sets the typed config directly (docs/checkpoints.md).
void apply_resume(config::ResolvedConfig& rc, const std::string& resume) {
  if (resume == "auto") {
    if (rc.train.checkpoint.save.empty())
      throw ConfigError("--resume auto needs a save directory (save: or checkpoint.enable: true)");
    rc.train.checkpoint.auto_continue_train = true;
  } else if (!resume.empty()) {
    rc.train.checkpoint.load = resume;
  }
}

// What both commands do once the config is loaded: the dry-run report (for `nproc` processes per node), or
// the run.
int report_or_train(const config::ResolvedConfig& rc, bool dry_run, int nproc) {
  if (dry_run) {
    // In this order: the layout's errors (with the world that fits) come from layout_report, before the
    // memory projection builds the same layout.
    std::string report = config::dry_run_report(rc);
    report += fp8_report(rc.train);
    report += parallel::layout_report(rc, static_cast<int>(rc.world_size), nproc);
    report += memory_section(rc, static_cast<int>(rc.world_size), nproc);
    std::fwrite(report.data(), 1, report.size(), stdout);
    return 0;
  }
  for (const std::string& w : rc.warnings) log::warn("config: {}", w);
  warn_if_projected_oom(rc);
  // The experiment's `env:` (Primus exports it for the backend); a variable set by the caller wins.
  for (const auto& [name, value] : rc.info.env) setenv(name.c_str(), value.c_str(), /*overwrite=*/0);
  return run_pretrain(rc.train, config::resolved_yaml(rc));
}

// A world the run is not in (--nnodes x --nproc-per-node, --dry-run only): its size replaces WORLD_SIZE
// (planning mode), and features not supported yet are listed as warnings instead of refusing, so the layout
// can be checked. Returns whether a world was given.
bool plan_world(const PretrainArgs& args, const char* command, config::ResolveOptions& options) {
  if (args.nnodes <= 0 && args.nproc_per_node <= 0) return false;
  if (!args.dry_run)
    throw ConfigError("--nnodes / --nproc-per-node plan a world for --dry-run only",
                      fmt::format("to run on several processes use `primus launch --nnodes N "
                                  "--nproc-per-node G -- train {} ...`",
                                  command));
  if (args.nnodes < 1 || args.nproc_per_node < 1)
    throw ConfigError(fmt::format("--nnodes {} --nproc-per-node {}: both must be given, each >= 1",
                                  args.nnodes, args.nproc_per_node));
  options.planning = true;
  options.plan_world_size = int64_t{args.nnodes} * args.nproc_per_node;
  return true;
}

int run_pretrain_command(const PretrainArgs& given) {
  const PretrainArgs args = with_override_files(given);
  if (args.config.empty()) {
    std::string hint = "primus train pretrain --config EXPERIMENT.yaml [--dry-run] [key=value ...]";
    for (const std::string& o : args.overrides) {
      bool yaml =
          o.size() > 5 && (o.ends_with(".yaml") || o.ends_with(".yml")) && o.find('=') == std::string::npos;
      if (yaml) hint = fmt::format("did you mean `--config {}`?", o);
    }
    throw ConfigError("train pretrain: --config FILE is required (the Primus experiment YAML)", hint);
  }
  check_mistyped_options(args.overrides);
  config::ResolveOptions options;
  options.cli_overrides = args.overrides;
  const bool planned_world = plan_world(args, "pretrain", options);
  config::ResolvedConfig rc = config::load_config(args.config, options);
  if (!args.backend_path.empty())
    rc.warnings.push_back(
        fmt::format("--backend_path {} has no effect: Primus-C++ has no Python backend", args.backend_path));

  apply_resume(rc, args.resume);
  if (rc.train.sft.enabled)
    throw ConfigError(
        fmt::format("train pretrain: {} sets stage: sft ({})", args.config, rc.keys.origin("stage").str()),
        "supervised fine-tuning runs as `primus train posttrain --config ...`");
  return report_or_train(rc, args.dry_run,
                         planned_world ? args.nproc_per_node : static_cast<int>(rc.world_size));
}

// `train posttrain`: Primus's SFT entry (stage: sft; docs/posttrain.md). The experiment's post_trainer module
// (or, as Primus allows, its pre_trainer module) with stage: sft trains on chat-formatted JSONL data, the
// loss on the responses only, usually from a Hugging Face or Primus checkpoint (finetune: true, load: DIR).
int run_posttrain_command(const PretrainArgs& given) {
  if (given.config.empty())
    throw ConfigError("train posttrain: --config FILE is required (the Primus experiment YAML)",
                      "primus train posttrain --config EXPERIMENT.yaml [--dry-run] [key=value ...]");
  const PretrainArgs args = with_override_files(given);
  check_mistyped_options(args.overrides);
  config::ResolveOptions options;
  options.cli_overrides = args.overrides;
  const bool planned_world = plan_world(args, "posttrain", options);
  options.module_name = "post_trainer";
  config::ResolvedConfig rc;
  try {
    rc = config::load_config(args.config, options);
  } catch (const ConfigError& e) {
    // Primus lets `train posttrain` use a pre_trainer module when there is no post_trainer one.
    if (std::string(e.what()).find("no module 'post_trainer'") == std::string::npos) throw;
    options.module_name = "pre_trainer";
    rc = config::load_config(args.config, options);
  }
  if (!rc.train.sft.enabled)
    throw ConfigError(fmt::format("train posttrain: {} trains stage '{}'; post-training needs stage: sft",
                                  args.config, "pretrain"),
                      "set stage: sft with sft_dataset_name (Primus's sft_trainer.yaml does), or run `primus "
                      "train pretrain`");
  apply_resume(rc, args.resume);
  return report_or_train(rc, args.dry_run,
                         planned_world ? args.nproc_per_node : static_cast<int>(rc.world_size));
}

}  // namespace

void attach_train(CLI::App& root, CliContext& ctx) {
  CLI::App* train =
      root.add_subcommand("train", "Train a model (pretrain, or posttrain: supervised fine-tuning)");
  train->require_subcommand(1);

  auto args = std::make_shared<PretrainArgs>();
  CLI::App* pretrain = train->add_subcommand("pretrain", "Pretrain a model from a Primus experiment file");
  pretrain->add_option("--config,--exp", args->config,
                       "Experiment YAML (Primus format; --exp is Primus's alias)");
  pretrain->add_flag(
      "--dry-run", args->dry_run,
      "Print the resolved configuration and the plan (parameters, FLOPs/token, memory); touch no GPU");
  pretrain->add_option("--backend_path", args->backend_path, "Accepted for Primus compatibility; no effect");
  pretrain->add_option("--nnodes", args->nnodes,
                       "With --dry-run: plan for this many nodes (checks the parallel layout of a world the "
                       "run is not in; features not supported yet become warnings)");
  pretrain->add_option("--nproc-per-node,--nproc_per_node", args->nproc_per_node,
                       "With --dry-run and --nnodes: processes (GPUs) per node");
  pretrain->add_option(
      "--resume", args->resume,
      "auto: continue from the newest valid checkpoint in the save directory (as "
      "auto_continue_train: true); PATH: load that checkpoint or HF directory (as load: PATH)");
  pretrain->add_option(
      "--overrides", args->overrides_files,
      "A YAML file of key: value overrides (e.g. `primus projection plan --output`), applied "
      "before the command line's");
  pretrain->allow_extras();
  pretrain->footer(
      "Overrides (as Primus takes them; highest priority): key=value, --key=value, --key value, a bare "
      "--flag (= "
      "true);\n"
      "dots nest: --training.seq_len 4096. Example:\n"
      "  primus train pretrain --config configs/quickstart.yaml --train_iters 50 lr=3e-4 --dry-run\n"
      "Config roots: PRIMUS_CONFIG_PATH (colon-separated, first wins), then the project's configs/.");
  pretrain->callback([pretrain, args, &ctx] {
    args->overrides = pretrain->remaining();
    ctx.action = [args] { return run_pretrain_command(*args); };
  });

  auto post_args = std::make_shared<PretrainArgs>();
  CLI::App* posttrain = train->add_subcommand(
      "posttrain",
      "Supervised fine-tuning (stage: sft) from a Primus experiment file: chat-formatted JSONL "
      "data, loss on the responses, packed or padded rows (docs/posttrain.md)");
  posttrain->add_option("--config,--exp", post_args->config, "Experiment YAML (Primus format)");
  posttrain->add_flag("--dry-run", post_args->dry_run,
                      "Print the resolved configuration and the plan; touch no GPU");
  posttrain->add_option("--backend_path", post_args->backend_path,
                        "Accepted for Primus compatibility; no effect");
  posttrain->add_option("--nnodes", post_args->nnodes,
                        "With --dry-run: plan for this many nodes (as `train pretrain --nnodes`)");
  posttrain->add_option("--nproc-per-node,--nproc_per_node", post_args->nproc_per_node,
                        "With --dry-run and --nnodes: processes (GPUs) per node");
  posttrain->add_option("--resume", post_args->resume, "auto, or a checkpoint / HF directory to load");
  posttrain->add_option("--overrides", post_args->overrides_files, "A YAML file of key: value overrides");
  posttrain->allow_extras();
  posttrain->callback([posttrain, post_args, &ctx] {
    post_args->overrides = posttrain->remaining();
    ctx.action = [post_args] { return run_posttrain_command(*post_args); };
  });
}

}  // namespace primus::cli
