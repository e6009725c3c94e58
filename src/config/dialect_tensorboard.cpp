#include "config/dialect_tensorboard.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/error.h"

namespace primus::config {

void map_tensorboard_megatron(const CheckedKeys& k, TensorBoardConfig& tb) {
  // Primus sets tensorboard_dir to {run directory}/tensorboard unless disable_tensorboard; Megatron writes
  // event files whenever tensorboard_dir is set, so a tensorboard_dir of its own turns them on as well.
  tb.dir = k.s("tensorboard_dir");
  tb.enabled = !k.b("disable_tensorboard") || !tb.dir.empty();
  tb.subdir = "tensorboard";
  tb.tags = "megatron";
  tb.log_interval = k.i("tensorboard_log_interval");
  tb.queue_size = k.i("tensorboard_queue_size");
  tb.learning_rate = k.b("log_learning_rate_to_tensorboard");
  tb.loss_scale = k.b("log_loss_scale_to_tensorboard");
  tb.batch_size = k.b("log_batch_size_to_tensorboard");
  tb.world_size = k.b("log_world_size_to_tensorboard");
  tb.memory = k.b("log_memory_to_tensorboard");
  tb.timers = k.b("log_timers_to_tensorboard");
  tb.throughput = k.b("log_throughput");
  tb.validation_ppl = k.b("log_validation_ppl_to_tensorboard");
}

void map_tensorboard_torchtitan(const CheckedKeys& k, TensorBoardConfig& tb) {
  // TorchTitan writes every metric at log_freq into {dump_folder}/{save_tb_folder}; our run directory is the
  // dump folder.
  tb.enabled = k.b("metrics.enable_tensorboard");
  tb.dir.clear();
  tb.subdir = k.s("metrics.save_tb_folder");
  for (const auto& part : std::filesystem::path(tb.subdir))
    if (part == "..")
      throw ConfigError(fmt::format("{}: metrics.save_tb_folder '{}' leaves the run directory ('..')",
                                    k.origin("metrics.save_tb_folder").str(), tb.subdir),
                        "name a folder inside the run directory, e.g. tb");
  if (tb.subdir.empty()) tb.subdir = "tb";
  tb.tags = "torchtitan";
  tb.log_interval = k.i("metrics.log_freq");
  tb.queue_size = 1000;  // TorchTitan: SummaryWriter(max_queue=1000)
  tb.learning_rate = tb.memory = tb.timers = tb.throughput = true;
  tb.loss_scale = tb.batch_size = tb.world_size = tb.validation_ppl = false;
}

}  // namespace primus::config
