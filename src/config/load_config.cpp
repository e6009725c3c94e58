#include "config/load_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/key_use.h"
#include "config/run_names.h"
#include "config/yaml_scalar.h"
#include "core/error.h"
#include "parallel/pipeline_projection.h"

namespace primus::config {

std::string ResolvedConfig::cite(const std::string& field, const std::string& value) const {
  auto it = sources.find(field);
  if (it == sources.end()) return fmt::format("{}={}", field, value);
  return fmt::format("{}={} ({})", it->second.key, value, it->second.origin.str());
}

namespace {

int64_t world_size_from_env(const EnvLookup& env) {
  // torchrun / primus launch set WORLD_SIZE; mpirun and MPICH set their own (comm/bootstrap.h).
  auto w = env("WORLD_SIZE");
  for (const char* alt : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (!w || w->empty()) w = env(alt);
  if (!w || w->empty()) return 1;
  auto n = python_int(*w);
  if (!n || *n < 1)
    throw ConfigError(fmt::format("environment: WORLD_SIZE='{}' is not a positive integer", *w));
  return *n;
}

// Planning: the ranks that the model-parallel degrees need, times the data-parallel size asked for. Read with
// get(), which is not a use of the keys (the mappers read them again).
int64_t planning_world_size(const CheckedKeys& k, const std::string& framework, int64_t data_parallel) {
  auto degree = [&](const char* key) -> int64_t {
    const Value* v = k.get(key);
    return v != nullptr && v->is_int() && v->as_int() > 0 ? v->as_int() : 1;
  };
  if (data_parallel < 1)
    throw ConfigError(fmt::format("planning: data-parallel size {} must be >= 1", data_parallel));
  if (framework == "megatron")
    return degree("tensor_model_parallel_size") * degree("pipeline_model_parallel_size") *
           degree("context_parallel_size") * data_parallel;
  const Value* shard = k.get("parallelism.data_parallel_shard_degree");
  const int64_t dp_shard = shard != nullptr && shard->is_int() && shard->as_int() > 0 ? shard->as_int() : 0;
  return degree("parallelism.tensor_parallel_degree") * degree("parallelism.pipeline_parallel_degree") *
         degree("parallelism.context_parallel_degree") *
         degree("parallelism.data_parallel_replicate_degree") * (dp_shard > 0 ? dp_shard : data_parallel);
}

}  // namespace

ResolvedConfig load_config(const std::string& experiment_path, const ResolveOptions& options) {
  ResolvedTree tree = resolve_experiment(experiment_path, options);
  ResolvedConfig rc;
  rc.info = std::move(tree.info);
  rc.warnings = rc.info.warnings;
  rc.world_size = world_size_from_env(options.env);

  // The run's names sit at the experiment's top level; as module keys (e.g. `--exp_name x`) Primus would
  // merge them into the module where nothing reads them.
  for (const char* meta : {"work_group", "user_name", "exp_name", "workspace"}) {
    if (const Value* v = tree.module.find(meta))
      throw ConfigError(
          fmt::format("{}: '{}' is an experiment-level key, not a module key", v->origin().str(), meta),
          fmt::format("set it at the top of the experiment file; Primus's examples read it from a "
                      "variable ({}: ${{PRIMUS_...:default}}) so that it can be changed per run",
                      meta));
  }

  const KeyTable& table = keys_for_framework(rc.info.framework);
  std::vector<std::string> unsupported;
  rc.keys = check_keys(tree.module, table,
                       fmt::format("module '{}' (framework {})", rc.info.module_name, rc.info.framework),
                       options.planning ? &unsupported : nullptr);
  for (const std::string& u : unsupported)
    rc.warnings.push_back("planning only, training would refuse: " + u);
  rc.planning = options.planning;
  if (options.planning)
    rc.world_size = options.plan_world_size > 0
                        ? options.plan_world_size
                        : planning_world_size(rc.keys, rc.info.framework, options.plan_data_parallel);
  rc.platform = check_keys(tree.platform, platform_keys(), "the platform preset");
  if (!rc.keys.is_null("framework") && rc.keys.s("framework") != rc.info.framework)
    throw ConfigError(fmt::format("{}: framework cannot be overridden (the experiment's module says '{}')",
                                  rc.keys.origin("framework").str(), rc.info.framework));

  TrainConfig& t = rc.train;
  t.run.work_group = rc.info.work_group;
  t.run.user_name = rc.info.user_name;
  t.run.exp_name = rc.info.exp_name;
  t.run.workspace = rc.info.workspace;
  check_workspace(rc.info.workspace, rc.info.workspace_origin.str());
  check_run_name("work_group", rc.info.work_group, rc.info.work_group_origin.str());
  check_run_name("user_name", rc.info.user_name, rc.info.user_name_origin.str());
  check_run_name("exp_name", rc.info.exp_name, rc.info.exp_name_origin.str());
  t.run.framework = rc.info.framework;
  t.run.config_file = rc.info.path;

  if (rc.info.framework == "megatron") {
    map_megatron(rc);
  } else {
    map_torchtitan(rc);
  }
  if (options.planning) {
    // A plan needs the keys it reads, not a run the trainer would accept: the cross-key rules become
    // warnings.
    try {
      validate_config(rc);
    } catch (const ConfigError& e) {
      rc.warnings.push_back(std::string("planning only, training would refuse: ") + e.what());
    }
  } else {
    validate_config(rc);
  }
  if (rc.info.framework == "megatron") {
    // The pipeline split and schedule (read for every config: the keys are declared implemented). A training
    // run with PP > 1 builds its plan here, so that a split or schedule it cannot run is refused before any
    // rank starts.
    auto plan = std::make_shared<parallel::PipelinePlanInput>(
        parallel::pipeline_input_from_config(rc, /*training_use=*/true));
    if (!options.planning && rc.train.parallel.pipeline_model_parallel_size > 1)
      parallel::training_plan(*plan);
    rc.train.pipeline = std::move(plan);
  }
  // A self-check of our key labels (config/key_use.h), on demand: the tests and the Primus sweep set it.
  if (auto check = options.env("PRIMUS_CHECK_KEY_USE"); check && *check == "1") {
    std::vector<std::string> bad = key_use_violations(rc.keys);
    if (!bad.empty())
      PRIMUS_FAIL("{}: key statuses disagree with the code (PRIMUS_CHECK_KEY_USE): {}", rc.info.path,
                  fmt::format("{}", fmt::join(bad, "; ")));
  }
  return rc;
}

}  // namespace primus::config
