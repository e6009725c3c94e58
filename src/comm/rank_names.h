#pragma once
// How messages name a rank of the job: "rank 5" until the parallel layout is known, then
// "rank 5 (tp 1, cp 0, dp 2, pp 0)" -- so a report of a dead, hung or slow rank (a peer that closed its
// connection, a collective that timed out, a rank without heartbeat) says which shard of the model it held.
// The trainer sets the coordinates once from ParallelDims (parallel/parallel_dims.h) after the world exists;
// watchdog threads read them, so access is locked.
#include <string>
#include <vector>

namespace primus::comm {

// coords[r]: the coordinates of world rank r ("tp 1, cp 0, dp 2, pp 0"); empty clears them.
void set_rank_coordinates(std::vector<std::string> coords);
std::string rank_name(int world_rank);

}  // namespace primus::comm
