#include "train/run.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config/run_names.h"
#include "core/log.h"
#include "train/trainer.h"

namespace primus {

int run_pretrain(const TrainConfig& cfg, const std::string& resolved_yaml) {
  config::check_run_names(cfg.run);  // also for configurations built in code, not only loaded ones
  const std::string run_dir = cfg.run.run_dir();
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec) throw Error(ErrorKind::kRuntime, "cannot create run directory " + run_dir + ": " + ec.message());
  {
    std::ofstream f(run_dir + "/config.yaml");
    f << resolved_yaml;
    if (!f) throw Error(ErrorKind::kRuntime, "cannot write " + run_dir + "/config.yaml");
  }
  log::info("primus {} | run directory {}", PRIMUS_VERSION, run_dir);
  Trainer trainer(cfg, run_dir, resolved_yaml);
  TrainResult r = trainer.train();

  nlohmann::json summary;
  summary["steps"] = r.steps;
  summary["first_loss"] = r.first_loss;
  summary["last_loss"] = r.last_loss;
  if (r.last_val_loss >= 0) summary["last_val_loss"] = r.last_val_loss;
  summary["tokens_per_s"] = r.tokens_per_s;
  summary["peak_mem_gb"] = r.peak_mem_gb;
  nlohmann::json holders = nlohmann::json::array();
  for (const auto& [owner, bytes] : r.memory_at_peak) holders.push_back({{"owner", owner}, {"bytes", bytes}});
  summary["memory_at_peak"] = holders;
  summary["device"] = trainer.stream().device.str();
  summary["last_iteration"] = r.last_iteration;
  if (trainer.start_iteration() > 0) summary["resumed_from_iteration"] = trainer.start_iteration();
  if (r.skipped > 0) summary["skipped_updates"] = r.skipped;
  if (!r.stop_reason.empty()) summary["stop_reason"] = r.stop_reason;
  summary["exit_code"] = r.exit_code;
  if (trainer.is_rank0()) std::ofstream(run_dir + "/summary.json") << summary.dump(1) << '\n';
  return r.exit_code;
}

}  // namespace primus
