#pragma once
// TensorBoard keys of both dialects into TensorBoardConfig (docs/metrics.md): Megatron/Primus
// disable_tensorboard, tensorboard_dir, tensorboard_log_interval, tensorboard_queue_size and the
// log_*_to_tensorboard switches; TorchTitan metrics.enable_tensorboard, metrics.save_tb_folder,
// metrics.log_freq.
#include "config/schema.h"
#include "config/train_config.h"

namespace primus::config {

void map_tensorboard_megatron(const CheckedKeys& k, TensorBoardConfig& tb);
void map_tensorboard_torchtitan(const CheckedKeys& k, TensorBoardConfig& tb);

}  // namespace primus::config
