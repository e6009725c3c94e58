#pragma once
// Starting the job's communication: from the launch environment to the world communicator.
//
//   comm::LaunchEnv env = comm::resolve_launch_env(comm::process_env_lookup());
//   comm::World world = comm::init_world(env, {.backend = "auto", .timeout_s = 600});
//   world.comm->all_reduce(grads, comm::ReduceOp::kSum, stream, "grads");
//
// Backends: "mpi" (started by mpirun; CPU), "tcp" (any launcher with MASTER_ADDR/MASTER_PORT, e.g. `primus
// launch`; CPU), "nccl" (GPU; unique id through the TCP store, or through MPI under mpirun without
// MASTER_ADDR). "auto" = mpi under mpirun, else tcp.
#include <memory>
#include <string>

#include "comm/bootstrap.h"
#include "comm/communicator.h"
#include "comm/tcp_store.h"

namespace primus::comm {

struct WorldOptions {
  std::string backend = "auto";
  double timeout_s = 600;  // per collective; PRIMUS_COMM_TIMEOUT_S overrides
  int cuda_device = -1;    // nccl: the GPU of this rank (-1: local_rank)
};

struct World {
  LaunchEnv env;
  std::string backend;                 // the one chosen
  std::shared_ptr<TcpStore> store;     // null for mpi and single-process runs
  std::unique_ptr<Communicator> comm;  // the "world" group
};

// Collective over all ranks. Logs (rank 0) the launch source and the backend. Throws ConfigError for an
// unknown backend or one not built in, CommError/Error for rendezvous failures.
World init_world(const LaunchEnv& env, const WorldOptions& options);

}  // namespace primus::comm
