#include "config/experiment.h"
#include "config/key_decl.h"

#include <fmt/format.h>

#include <filesystem>

#include "config/cli_overrides.h"
#include "config/config_roots.h"
#include "config/did_you_mean.h"
#include "config/merge.h"
#include "config/not_supported.h"
#include "config/preset_loader.h"
#include "config/yaml_reader.h"
#include "core/error.h"

namespace primus::config {
namespace {

namespace fs = std::filesystem;

// `extends`/`bases` are resolved by load_preset before these are checked; `env` is exported for the run.
const std::vector<std::string> kExperimentKeys = {"work_group", "user_name", "exp_name", "workspace",
                                                  "modules",    "platform",  "env"};
const std::vector<std::string> kModuleKeys = {"framework", "config", "model",
                                              "overrides", "name",   "trainer_class"};
const std::vector<std::string> kPlatformKeys = {"config", "overrides"};
const std::vector<std::string> kFrameworks = {"megatron", "torchtitan"};
// Primus's other backends (primus/backends/*): valid experiments, refused as "not supported yet".
const std::vector<std::pair<std::string, std::string>> kOtherBackends = {
    {"megatron_bridge", "NeMo Megatron-Bridge recipes"},
    {"maxtext", "JAX MaxText"},
    {"maxdiffusion", "JAX MaxDiffusion (image/video diffusion)"},
    {"diffusion", "diffusion models (Flux, Wan)"},
    {"nemo_automodel", "NeMo AutoModel"},
    {"hummingbirdxt", "HummingbirdXT video diffusion"},
};

// Throws NotSupportedError when the experiment's module names one of Primus's other backends. Looks only at
// modules.<name>.framework (map or Primus's list form); anything malformed is left to the full checks.
void refuse_other_backend(const Value& experiment, const std::string& module_name) {
  const Value* modules = experiment.find("modules");
  if (modules == nullptr) return;
  const Value* module = nullptr;
  if (modules->is_map()) {
    module = modules->find(module_name);
  } else if (modules->is_list()) {
    for (const Value& m : modules->items()) {
      const Value* n = m.is_map() ? m.find("name") : nullptr;
      if (n != nullptr && n->is_string() && n->as_string() == module_name) module = &m;
    }
  }
  const Value* fw = module != nullptr && module->is_map() ? module->find("framework") : nullptr;
  if (fw == nullptr || !fw->is_string()) return;
  for (const auto& [name, what] : kOtherBackends)
    if (fw->as_string() == name)
      throw NotSupportedError(
          fmt::format("{}: not supported yet: backend {} ({}); Primus-C++ trains with the megatron and "
                      "torchtitan dialects",
                      fw->origin().str(), name, what));
}

void reject_unknown(const Value& map, const std::vector<std::string>& allowed, const std::string& where) {
  for (const auto& [key, value] : map.entries()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    throw ConfigError(fmt::format("{}: unknown key '{}' in {}{}", value.origin().str(), key, where,
                                  did_you_mean_text(key, allowed)),
                      fmt::format("allowed here: {}", fmt::join(allowed, ", ")));
  }
}

std::string scalar_text(const Value& v, const std::string& key) {
  if (v.is_string()) return v.as_string();
  if (v.is_number() || v.is_bool()) return v.repr();
  throw ConfigError(
      fmt::format("{}: '{}' must be a string, got {} {}", v.origin().str(), key, v.type_name(), v.repr()));
}

const Value& required(const Value& map, const std::string& key, const std::string& where) {
  const Value* v = map.find(key);
  if (v == nullptr || v->is_null())
    throw ConfigError(fmt::format("{}: missing required key '{}' in {}", map.origin().str(), key, where));
  return *v;
}

// The module's entry: `modules: {pre_trainer: {...}}`, or the list form `modules: [{name: pre_trainer,
// ...}]`.
const Value& find_module(const Value& modules, const std::string& name, ExperimentInfo& info) {
  std::vector<std::string> names;
  const Value* found = nullptr;
  auto consider = [&](const std::string& n, const Value& entry) {
    names.push_back(n);
    if (n.find("trainer") == std::string::npos)
      throw ConfigError(
          fmt::format("{}: module name '{}' must contain 'trainer' (as in Primus)", entry.origin().str(), n));
    if (n == name) {
      found = &entry;
    } else {
      info.warnings.push_back(
          fmt::format("module '{}' ({}) is not used by this command", n, entry.origin().str()));
    }
  };
  if (modules.is_map()) {
    for (const auto& [n, entry] : modules.entries()) consider(n, entry);
  } else if (modules.is_list()) {
    for (const Value& entry : modules.items()) {
      const Value* n = entry.find("name");
      if (n == nullptr || !n->is_string())
        throw ConfigError(
            fmt::format("{}: a module in the 'modules' list needs a 'name'", entry.origin().str()));
      consider(n->as_string(), entry);
    }
  } else {
    throw ConfigError(fmt::format("{}: 'modules' must map module names to modules", modules.origin().str()));
  }
  if (found == nullptr)
    throw ConfigError(fmt::format(
        "{}: no module '{}' in the experiment (it has: {}){}", modules.origin().str(), name,
        names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", ")), did_you_mean_text(name, names)));
  if (!found->is_map())
    throw ConfigError(
        fmt::format("{}: module '{}' must be a mapping with framework, config, model, overrides",
                    found->origin().str(), name));
  return *found;
}

void warn_shadowed(const Value& module_tree, const Value& model_tree, const std::vector<std::string>& keys,
                   ExperimentInfo& info) {
  for (const std::string& key : keys) {
    const Value* kept = module_tree.find(key);
    const Value* lost = model_tree.find(key);
    if (kept == nullptr || lost == nullptr || *kept == *lost) continue;
    info.warnings.push_back(
        fmt::format("model preset value {}={} ({}) is ignored: the module preset sets {} ({}), and Primus "
                    "lets the module win; "
                    "set it in the experiment's overrides instead",
                    key, lost->repr(), lost->origin().str(), kept->repr(), kept->origin().str()));
  }
}

Value load_platform(const Value& experiment, const std::vector<std::string>& roots, const EnvLookup& env,
                    ExperimentInfo& info) {
  const Value* platform = experiment.find("platform");
  std::string name = "platform_azure.yaml";
  Origin where = experiment.origin();
  Value overrides = Value::map(Origin::derived("Primus default platform overrides"));
  if (platform != nullptr && !platform->is_null()) {
    if (!platform->is_map())
      throw ConfigError(fmt::format("{}: 'platform' must be a mapping with config and overrides",
                                    platform->origin().str()));
    reject_unknown(*platform, kPlatformKeys, "platform");
    const Value& config = required(*platform, "config", "platform");
    name = scalar_text(config, "platform.config");
    where = config.origin();
    if (const Value* o = platform->find("overrides"); o != nullptr && o->is_map()) overrides = *o;
  } else {
    // Primus's default when an experiment names no platform (parser.py parse_platform).
    overrides.set("master_sink_level",
                  Value::string("INFO", Origin::derived("Primus default platform overrides")));
    bool exists = false;
    std::error_code ec;
    for (const auto& root : roots) exists = exists || fs::exists(fs::path(root) / "platforms" / name, ec);
    if (!exists) {
      info.warnings.push_back(
          "no platforms/platform_azure.yaml in the config roots; no platform preset loaded");
      return Value::map();
    }
  }
  info.platform_preset = find_preset(roots, "platforms", name, "platform preset", where);
  Value tree = load_preset(info.platform_preset, env, &info.files_read);
  deep_merge(tree, overrides);
  null_strings_to_null(tree);
  return tree;
}

}  // namespace

ResolvedTree resolve_experiment(const std::string& path, const ResolveOptions& options) {
  if (std::error_code ec; !fs::exists(path, ec))
    throw ConfigError(
        fmt::format("experiment file '{}' not found{}", path, ec ? ": " + ec.message() : std::string()));
  ResolvedTree out;
  ExperimentInfo& info = out.info;
  info.path = path;
  info.module_name = options.module_name;
  info.roots = options.roots ? *options.roots : config_search_path(options.env);

  Value first = read_yaml_file(path);
  if (!first.is_map())
    throw ConfigError(
        fmt::format("{}: an experiment file is a mapping with work_group, user_name, exp_name, "
                    "workspace and modules",
                    path));
  // A Transformer Engine precision-recipe file (top-level configs/matchers, as Primus's *-te-precision.yaml)
  // sits among the experiments but is what te_precision_config_file names.
  if (first.find("configs") != nullptr && first.find("matchers") != nullptr &&
      first.find("modules") == nullptr)
    throw NotSupportedError(
        fmt::format("{}: not supported yet: Transformer Engine precision recipes (a configs/matchers file, "
                    "named by te_precision_config_file; it is not an experiment)",
                    path),
        "Primus-C++ has no per-module precision recipes");
  // As Primus's parse_yaml: ${VAR} substitution, then `extends:` (or the old `bases:`) parents merged under
  // it.
  Value experiment = load_preset(path, options.env, &info.files_read, &info.warnings);
  if (const Value* env = experiment.find("env"); env != nullptr && !env->is_null()) {
    if (!env->is_map())
      throw ConfigError(fmt::format("{}: 'env' must map variable names to values, got {} {}",
                                    env->origin().str(), env->type_name(), env->repr()));
    for (const auto& [name, value] : env->entries())
      info.env.emplace_back(name, scalar_text(value, "env." + name));
  }
  // `train pretrain` on an experiment that only defines post_trainer (Primus runs it as SFT then).
  if (const Value* modules = experiment.find("modules");
      modules != nullptr && modules->is_map() && modules->find(options.module_name) == nullptr &&
      options.module_name == "pre_trainer" && modules->find("post_trainer") != nullptr)
    throw ConfigError(
        fmt::format("{}: the experiment defines module post_trainer (supervised fine-tuning), which "
                    "runs with `primus train posttrain`",
                    modules->find("post_trainer")->origin().str()),
        "primus train posttrain --config EXPERIMENT.yaml");
  // The backend decides which keys an experiment may hold (a megatron_bridge experiment has a top-level
  // `peft:`, a maxdiffusion module a `maxdiffusion_entrypoint:`), so a backend we do not have is refused
  // before any key is judged; a malformed file falls through to the checks below.
  refuse_other_backend(experiment, options.module_name);
  // A module key at the top level (an experiment that `extends:` another and sets lora: or lr: beside it) is
  // read by nobody, Primus included: say where it belongs instead of only "unknown key".
  for (const auto& [key, value] : experiment.entries()) {
    if (std::find(kExperimentKeys.begin(), kExperimentKeys.end(), key) != kExperimentKeys.end()) continue;
    if (megatron_keys().find(key) != nullptr || torchtitan_keys().find(key) != nullptr)
      throw ConfigError(
          fmt::format(
              "{}: '{}' is a module key at the experiment's top level, where nothing reads it (Primus "
              "ignores it there too)",
              value.origin().str(), key),
          fmt::format("move it under modules.{}.overrides", options.module_name));
  }
  reject_unknown(experiment, kExperimentKeys, "the experiment file");

  const std::string where = "the experiment file";
  const Value& wg = required(experiment, "work_group", where);
  const Value& un = required(experiment, "user_name", where);
  const Value& en = required(experiment, "exp_name", where);
  const Value& ws = required(experiment, "workspace", where);
  info.work_group = scalar_text(wg, "work_group");
  info.user_name = scalar_text(un, "user_name");
  info.exp_name = scalar_text(en, "exp_name");
  info.workspace = scalar_text(ws, "workspace");
  info.work_group_origin = wg.origin();
  info.user_name_origin = un.origin();
  info.exp_name_origin = en.origin();
  info.workspace_origin = ws.origin();

  const Value& module = find_module(required(experiment, "modules", where), options.module_name, info);
  const std::string module_where = fmt::format("module '{}'", options.module_name);
  reject_unknown(module, kModuleKeys, module_where);
  const Value& fw = required(module, "framework", module_where);
  info.framework = scalar_text(fw, "framework");
  // Primus loads a module's trainer by name (backend_adapter.load_trainer_class); its examples name only
  // the Flux diffusion trainer, a different training task.
  if (const Value* tc = module.find("trainer_class"); tc != nullptr && !tc->is_null())
    throw NotSupportedError(
        fmt::format("{}: not supported yet: trainer_class {} (Primus's custom trainers, "
                    "e.g. the Flux diffusion trainer; Primus-C++ has the LLM pretrainer)",
                    tc->origin().str(), scalar_text(*tc, "trainer_class")));
  if (std::find(kFrameworks.begin(), kFrameworks.end(), info.framework) == kFrameworks.end())
    throw ConfigError(fmt::format("{}: unknown framework '{}'{}", fw.origin().str(), info.framework,
                                  did_you_mean_text(info.framework, kFrameworks)),
                      "framework is megatron or torchtitan");
  const Value& config = required(module, "config", module_where);
  info.module_preset = find_preset(info.roots, "modules/" + info.framework, scalar_text(config, "config"),
                                   "module preset", config.origin());

  Value tree = load_preset(info.module_preset, options.env, &info.files_read);
  if (const Value* model = module.find("model"); model != nullptr && !model->is_null()) {
    info.model_name = scalar_text(*model, "model");
    info.model_preset =
        find_preset(info.roots, "models/" + info.framework, info.model_name, "model preset", model->origin());
    Value model_tree = load_preset(info.model_preset, options.env, &info.files_read);
    std::vector<std::string> shadowed = merge_missing_top_level(tree, model_tree, {"name"});
    warn_shadowed(tree, model_tree, shadowed, info);
    if (model_tree.find("model") == nullptr && tree.find("model") == nullptr)
      tree.set("model", Value::string(info.model_name, model->origin()));
  }

  if (const Value* overrides = module.find("overrides"); overrides != nullptr && !overrides->is_null()) {
    if (!overrides->is_map())
      throw ConfigError(fmt::format("{}: 'overrides' must be a mapping of keys", overrides->origin().str()));
    deep_merge(tree, *overrides);
  }
  tree.set("framework", Value::string(info.framework, fw.origin()));
  tree.set("name", Value::string(options.module_name, Origin::derived("the module's name")));
  deep_merge(tree, parse_cli_overrides(options.cli_overrides));
  null_strings_to_null(tree);

  out.platform = load_platform(experiment, info.roots, options.env, info);
  out.module = std::move(tree);
  return out;
}

}  // namespace primus::config
