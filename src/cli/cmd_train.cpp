// `primus train pretrain --config EXP.yaml [--dry-run] [overrides...]`, as Primus's `train pretrain`: tokens
// the command does not know are configuration overrides (key=value, --key=value, --key value, --flag).
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/cli_context.h"
#include "config/did_you_mean.h"
#include "config/key_decl.h"
#include "config/load_config.h"
#include "config/report.h"
#include "core/error.h"
#include "core/log.h"
#include "train/run.h"

namespace primus::cli {
namespace {

struct PretrainArgs {
  std::string config;
  bool dry_run = false;
  std::string backend_path;
  std::string resume;  // "auto" or a checkpoint path
  std::vector<std::string> overrides;
};

const std::vector<std::string> kPretrainOptions = {"--config",       "--exp",    "--dry-run",
                                                   "--backend_path", "--resume", "--help"};

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

int run_pretrain_command(const PretrainArgs& args) {
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
  config::ResolvedConfig rc = config::load_config(args.config, options);
  if (!args.backend_path.empty())
    rc.warnings.push_back(
        fmt::format("--backend_path {} has no effect: Primus-C++ has no Python backend", args.backend_path));

  // --resume works in both dialects: it sets the typed config directly (docs/checkpoints.md).
  if (args.resume == "auto") {
    if (rc.train.checkpoint.save.empty())
      throw ConfigError("--resume auto needs a save directory (save: or checkpoint.enable: true)");
    rc.train.checkpoint.auto_continue_train = true;
  } else if (!args.resume.empty()) {
    rc.train.checkpoint.load = args.resume;
  }
  if (args.dry_run) {
    std::string report = config::dry_run_report(rc);
    std::fwrite(report.data(), 1, report.size(), stdout);
    return 0;
  }
  for (const std::string& w : rc.warnings) log::warn("config: {}", w);
  return run_pretrain(rc.train, config::resolved_yaml(rc));
}

}  // namespace

void attach_train(CLI::App& root, CliContext& ctx) {
  CLI::App* train = root.add_subcommand("train", "Train a model (pretrain)");
  train->require_subcommand(1);

  auto args = std::make_shared<PretrainArgs>();
  CLI::App* pretrain = train->add_subcommand("pretrain", "Pretrain a model from a Primus experiment file");
  pretrain->add_option("--config,--exp", args->config,
                       "Experiment YAML (Primus format; --exp is Primus's alias)");
  pretrain->add_flag(
      "--dry-run", args->dry_run,
      "Print the resolved configuration and the plan (parameters, FLOPs/token, memory); touch no GPU");
  pretrain->add_option("--backend_path", args->backend_path, "Accepted for Primus compatibility; no effect");
  pretrain->add_option(
      "--resume", args->resume,
      "auto: continue from the newest valid checkpoint in the save directory (as "
      "auto_continue_train: true); PATH: load that checkpoint or HF directory (as load: PATH)");
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
}

}  // namespace primus::cli
