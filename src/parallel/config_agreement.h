#pragma once
// Ranks must run the same experiment: the same parallel degrees, batch, model and data. A rank that resolved
// a different configuration (another file, an override given to one rank, an environment variable that
// differs between nodes inside a ${VAR}) would build other groups or shapes and hang or corrupt the run at
// its first collective. So right after the world communicator exists, every rank's resolved configuration is
// compared with rank 0's (an xxh3 of the resolved YAML without its comments, all-gathered: the origins there
// hold paths that may differ between nodes), and on a mismatch every rank stops with a clear error before any
// model memory is allocated: the differing ranks name the differing lines.
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace primus::parallel {

// Collective over `world`. Throws ConfigError on every rank when any rank's `resolved_yaml` differs from rank
// 0's. `s`: a stream of the communicator's device (a CUDA stream for NCCL, the CPU otherwise).
void check_ranks_agree(comm::Communicator& world, const std::string& resolved_yaml, const Stream& s);

// The resolved YAML without comment lines and without the "  # origin" comment of each value.
std::string config_semantics(const std::string& resolved_yaml);

// The lines of `mine` that differ from `rank0`'s (line by line, "key: value" as the resolved YAML prints it),
// at most `max_lines`, each as "mine (rank 0: theirs)". Exposed for the tests.
std::vector<std::string> config_differences(const std::string& rank0, const std::string& mine,
                                            size_t max_lines = 6);

}  // namespace primus::parallel
