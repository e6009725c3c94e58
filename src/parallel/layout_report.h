#pragma once
// The parallel-layout section of `primus train pretrain --dry-run`: the degrees and data-parallel sharding as
// ParallelDims decides them (the one place that does), the training rules checked against the model and the
// batch, and where every rank sits: its node and local process, and its coordinates on the dense grid
// (tp, cp, dp = dp_replicate x dp_shard, pp) and on the expert grid (ep, edp), plus rank 0's groups.
//
// With `--nnodes N --nproc-per-node G` the world is one the run is not in: that is how an experiment written
// for 8-128 GPUs is checked on a laptop before a job is queued. Bad layouts throw ConfigError naming the
// keys.
#include <string>

#include "config/load_config.h"

namespace primus::parallel {

// world_size = nnodes x nproc_per_node. Ranks are listed one per row up to `max_rows`; beyond that the first
// and the last node's rows are shown. With PP > 1 (Megatron dialect) the split is computed by
// parallel/pipeline_layout.h, which knows uneven splits and layout strings, and its layers per stage printed.
std::string layout_report(const config::ResolvedConfig& rc, int world_size, int nproc_per_node,
                          int max_rows = 64);

}  // namespace primus::parallel
