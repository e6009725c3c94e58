#pragma once
// The pipeline simulator: plays a schedule (parallel/pipeline_schedule.h) with a duration per action and
// reports when each action starts and ends, the step time, each rank's idle share (the bubble) and its peak
// number of micro-batch activations held (from the forward until the backward, or until the weight-gradient
// pass when backward is split, frees them).
//
// Time model: a rank runs its list in order; a compute action starts when the rank is free (its inputs are
// then local or already received); a send is posted instantly (non-blocking) and its data arrives p2p time
// units later; a receive ends when the data has arrived, and the rank is idle until then. That is the
// runtime's model with overlapped communication (overlap_p2p_comm) and no contention; without overlap a send
// also holds its rank until the data has arrived (Megatron's blocking batched send/recv).
//
//   PipelineCosts c = uniform_costs(s.topo);             // F = 1 per rank-stage, B = 2, BI = BW = 1
//   SimResult r = simulate(s, c);                         // r.bubble_fraction, r.step_time, r.peak_in_flight
#include <string>
#include <vector>

#include "parallel/pipeline_layout.h"
#include "parallel/pipeline_schedule.h"

namespace primus::parallel {

struct ChunkCosts {
  double f = 1, b = 2, bi = 1, bw = 1;  // forward, full backward, input-gradient, weight-gradient pass
  // The chunk's share of its rank's saved activations per micro-batch (its layers over the rank's layers);
  // negative: 1 / vpp, chunks of equal size.
  double activation = -1;
};

struct PipelineCosts {
  std::vector<std::vector<ChunkCosts>> chunk;  // [rank][chunk]
  double p2p = 0;                              // from a send's post to its data's arrival
  bool overlap = true;                         // false: a send holds its rank for p2p (blocking)
};

// The default cost model, in units of F = the forward of one micro-batch through one rank's layers of an
// even split: a chunk costs 1/vpp, backward twice the forward (B = 2F), and split backward one forward
// each (BI = BW = F), the usual 2:1 and 1:1 of a transformer layer's FLOPs.
struct CostRatios {
  double b = 2, bi = 1, bw = 1;  // times F
  double p2p = 0;                // times F
};
PipelineCosts uniform_costs(const PipelineTopology& topo, const CostRatios& ratios = {});

// Chunks weighted by the layers they hold (decoder + MTP layers; the embedding and the loss count as one
// layer when account_for_*_in_pipeline_split says so, else nothing), normalised so that the mean rank's
// forward is 1 F. An empty chunk costs nothing. Each chunk's activation share is its decoder + MTP layers
// over its rank's.
PipelineCosts layout_costs(const PipelineLayout& layout, const CostRatios& ratios = {},
                           double embedding_layers = 0, double loss_layers = 0);

struct TimedAction {
  Action action;
  double start = 0, end = 0;  // a receive: from when the rank reached it to when the data arrived
};

struct SimResult {
  std::vector<std::vector<TimedAction>> ranks;  // every action of every rank, in list order
  double step_time = 0;                         // the last action's end (the step starts at 0)
  std::vector<double> busy;                     // per rank: time spent computing
  std::vector<double> bubble;                   // per rank: 1 - busy / step_time
  double bubble_fraction = 0;                   // all ranks: 1 - sum(busy) / (pp x step_time)
  std::vector<int> peak_in_flight;  // per rank: most (micro-batch, chunk) activations held at once
  // per rank: the most activations held at once in micro-batches of a whole rank's layers, each (micro-batch,
  // chunk) weighted by its chunk's ChunkCosts::activation (peak_in_flight / vpp for chunks of equal size)
  std::vector<double> peak_microbatches;
};

// Throws a runtime Error when the list deadlocks (validate_schedule says why) or costs miss a chunk.
SimResult simulate(const Schedule& s, const PipelineCosts& costs);

}  // namespace primus::parallel
