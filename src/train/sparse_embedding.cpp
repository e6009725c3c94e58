#include "train/sparse_embedding.h"

#include <algorithm>
#include <cstdlib>

#include "config/plan.h"
#include "core/env.h"
#include "model/model_spec.h"
#include "parallel/parallel_dims.h"

namespace primus {

int sparse_embedding_mode() {
  return env_int("PRIMUS_SPARSE_EMBEDDING_GRAD", 1, 0, 2);
}

int64_t sparse_embedding_rows(const TrainConfig& cfg, int64_t world_size) {
  const int mode = sparse_embedding_mode();
  if (mode == 0) return 0;
  if (!cfg.model.untie_embeddings_and_output_weights || cfg.lora.enabled) return 0;
  // A plan (dry run, projection) of a tokenizer whose vocabulary is not known here has no table to size.
  if (cfg.model.padded_vocab_size <= 0 && cfg.model.vocab_size <= 0) return 0;
  // One process emulating a data-parallel layout (PRIMUS_DP_EMULATE) sums its virtual ranks' dense
  // gradients.
  if (const char* e = std::getenv("PRIMUS_DP_EMULATE"); e != nullptr && *e != '\0') return 0;
  // Whole-model stores replicated over plain data parallelism (DDP, or one process): the layout's groups are
  // ParallelDims' to decide (asked only once no model-parallel degree or HSDP could make the world not fit).
  const ParallelConfig& p = cfg.parallel;
  if (p.tensor_model_parallel_size != 1 || p.pipeline_model_parallel_size != 1 ||
      p.context_parallel_size != 1 || p.expert_model_parallel_size != 1 ||
      p.data_parallel_replicate_degree > 1)
    return 0;
  const parallel::ParallelLayout layout =
      parallel::layout_from_config(cfg.parallel, static_cast<int>(std::max<int64_t>(1, world_size)));
  const parallel::ParallelDims& d = layout.dims;
  if (layout.sharding != parallel::Sharding::kNoShard || d.tp() != 1 || d.pp() != 1 || d.cp() != 1 ||
      d.ep() != 1)
    return 0;
  const ModelSpec spec = ModelSpec::from_config(cfg.model);
  const config::BatchLayout batch = config::batch_layout(cfg, d.dp());
  // Every data-parallel rank's tokens of a step (x (1 + MTP depths), which look up shifted tokens): the
  // ranks reserve the union of their rows so that their slots line up (parallel/data_parallel.h).
  const int64_t tokens = batch.micro_batches * cfg.micro_batch_size * cfg.data.seq_length * d.dp() *
                         (1 + std::max<int64_t>(0, cfg.model.mtp_num_layers));
  if (tokens <= 0) return 0;
  const int64_t rows = std::min(spec.vocab, tokens);
  // Slots [rows, D] f32 + their rows (i32) + the map (i32 per table row) against the dense V x D f32.
  const double sparse_bytes = 4.0 * rows * (spec.hidden + 1) + 4.0 * spec.vocab;
  const double dense_bytes = 4.0 * spec.vocab * spec.hidden;
  if (mode == 1 && sparse_bytes > 0.5 * dense_bytes) return 0;
  return rows;
}

}  // namespace primus
