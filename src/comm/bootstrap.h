#pragma once
// Where this process sits in the job: rank, world size, local rank, node, and the rendezvous address, read
// from the launcher's environment (reference.md §2.1). Resolution order, first match wins:
//   explicit (arguments) > torchrun / `primus launch` (RANK, WORLD_SIZE, LOCAL_RANK, ...) > OpenMPI
//   (OMPI_COMM_WORLD_*) > MPICH/PMI (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, ...) > Slurm srun (SLURM_PROCID,
//   SLURM_NTASKS, SLURM_LOCALID, master = first host of SLURM_JOB_NODELIST) > Primus's launcher variables
//   (NNODES, NODE_RANK, GPUS_PER_NODE with LOCAL_RANK) > a single process (rank 0 of 1).
// MASTER_ADDR / MASTER_PORT in the environment override any source's master (Primus's run scripts set them).
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace primus::comm {

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env_lookup();

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  int nnodes = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "single";  // explicit | torchrun | openmpi | pmi | slurm | primus | single
  std::string variables;          // the variables it came from, for the log line

  // "rank 3 of 8 (local 3 of 4, node 0 of 2) from torchrun (RANK, WORLD_SIZE, ...); master host:29500"
  std::string describe() const;
};

// Values given on the command line or in the config (any subset; unset fields fall through to the
// environment sources). Not used by any CLI yet: the API exists for preflight and tests.
struct ExplicitLaunch {
  std::optional<int> rank, world_size, local_rank, local_world_size;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
};

// Throws ConfigError naming the variable for malformed or inconsistent values (rank >= world, ...).
LaunchEnv resolve_launch_env(const EnvLookup& env, const ExplicitLaunch& explicit_values = {});

// Expands a Slurm host list: "gpu[01-04,07],cpu3" -> gpu01 gpu02 gpu03 gpu04 gpu07 cpu3 (zero padding kept;
// several bracket groups in one name, e.g. "r[1-2]n[1-2]", expand as a product). Throws ConfigError.
std::vector<std::string> expand_slurm_nodelist(std::string_view list);

// The first count of Slurm's "8(x2),4" task-count syntax.
int first_slurm_count(std::string_view tasks_per_node);

}  // namespace primus::comm
