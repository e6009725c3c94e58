#pragma once
// state.json: the scalar training state a checkpoint restores (iteration, data position, optimizer step
// counter, LR schedule, RNG state) and the model configuration, so that a checkpoint describes itself
// (`primus convert primus-to-hf` and `primus checkpoint logits` need no YAML).
//
// RNG state: every random number in Primus-C++ comes from a counter-based generator keyed by (seed, name,
// element index) for initialisation and (seed, sample index) for mock data; there is no hidden generator
// state. The RNG state is therefore (seed, iteration), saved under "rng" so that stateful generators
// (dropout) have a place later; no_save_rng / no_load_rng apply to it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "model/fp8_linear.h"

namespace primus::ckpt {

inline constexpr const char* kStateName = "state.json";
inline constexpr const char* kConfigName = "config.yaml";

struct LrScheduleState {
  double lr = 0, min_lr = 0;
  int64_t warmup_iters = 0, decay_iters = 0;
  std::string decay_style;
};

struct RngState {
  std::string generator = "philox4x32-10 (counter-based: keyed by seed, name and index)";
  uint64_t seed = 0;
  int64_t step = 0;
};

struct TrainingState {
  int64_t iteration = 0;         // completed iterations; training continues at iteration + 1
  int64_t consumed_samples = 0;  // data position: the loader restarts at this sample
  int64_t optimizer_steps = 0;   // AdamW's step counter (bias correction); skipped updates do not count
  int64_t skipped_iterations = 0;
  int64_t global_batch_size = 0;
  std::vector<double> loss_reference;  // the loss-spike detector's window (so a resumed run judges alike)
  LrScheduleState lr_schedule;
  std::optional<RngState> rng;  // absent under no_save_rng
  bool has_optimizer = false;   // optim file present (m, v)
  std::string compute_dtype;    // dtype of the model file (f32 on the CPU, bf16 on the GPU)
  std::string config_xxh3;      // of the resolved YAML
  ModelConfig model;
  std::string hf_config;  // the config.json the weights were converted from ("" if none): kept for export
  // FP8 training: the recipe and (delayed scaling) every projection's amax history and scales, so that a
  // resumed run casts exactly as the uninterrupted one would. Absent for BF16 runs.
  std::optional<Fp8State::Saved> fp8;
  // LoRA: the checkpoint holds the adapters (and their optimizer state) only; the frozen base model comes
  // from `load` again on resume, and must be the one they were trained on (`base`, an identity of its files:
  // Trainer::load_lora_base). Absent for full training.
  struct Lora {
    int64_t rank = 0;
    double alpha = 0;
    std::vector<std::string> targets;
    std::string base;
  };
  std::optional<Lora> lora;
};

std::string state_to_json(const TrainingState& s);
TrainingState state_from_json(const std::string& text, const std::string& what);

// ModelConfig <-> JSON (every field: a checkpoint is self-describing).
std::string model_config_to_json(const ModelConfig& m);
ModelConfig model_config_from_json(const std::string& text, const std::string& what);

}  // namespace primus::ckpt
