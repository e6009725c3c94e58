#include "train/sparse_embedding.h"

#include <algorithm>

#include "config/plan.h"
#include "core/env.h"
#include "model/model_spec.h"

namespace primus {

int sparse_embedding_mode() {
  return env_int("PRIMUS_SPARSE_EMBEDDING_GRAD", 1, 0, 2);
}

int64_t sparse_embedding_rows(const TrainConfig& cfg, int64_t world_size) {
  const int mode = sparse_embedding_mode();
  if (mode == 0) return 0;
  const ParallelConfig& p = cfg.parallel;
  const bool one_process = world_size == 1 && p.tensor_model_parallel_size == 1 &&
                           p.pipeline_model_parallel_size == 1 && p.context_parallel_size == 1 &&
                           p.expert_model_parallel_size == 1 && p.data_parallel_size == 1 &&
                           p.data_parallel_replicate_degree == 1;
  if (!one_process || !cfg.model.untie_embeddings_and_output_weights || cfg.lora.enabled) return 0;
  const ModelSpec spec = ModelSpec::from_config(cfg.model);
  const config::BatchLayout layout = config::batch_layout(cfg);
  const int64_t tokens = layout.micro_batches * cfg.micro_batch_size * cfg.data.seq_length *
                         (1 + std::max<int64_t>(0, cfg.model.mtp_num_layers));
  if (tokens <= 0 || spec.vocab <= 0) return 0;
  const int64_t rows = std::min(spec.vocab, tokens);
  // Slots [rows, D] f32 + their rows (i32) + the map (i32 per table row) against the dense V x D f32.
  const double sparse_bytes = 4.0 * rows * (spec.hidden + 1) + 4.0 * spec.vocab;
  const double dense_bytes = 4.0 * spec.vocab * spec.hidden;
  if (mode == 1 && sparse_bytes > 0.5 * dense_bytes) return 0;
  return rows;
}

}  // namespace primus
