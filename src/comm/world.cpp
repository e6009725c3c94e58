#include "comm/world.h"

#include <cstdlib>

#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"
#include "comm/tcp_communicator.h"
#include "core/log.h"

namespace primus::comm {

World init_world(const LaunchEnv& env, const WorldOptions& options) {
  World w;
  w.env = env;
  const double timeout = effective_timeout_s(options.timeout_s);
  std::string backend = options.backend;
  if (backend == "auto") backend = env.source == "openmpi" ? "mpi" : "tcp";
  if (backend != "mpi" && backend != "tcp" && backend != "nccl")
    throw ConfigError(fmt::format("unknown communication backend '{}'", options.backend),
                      "backends: auto, mpi, tcp, nccl");
  w.backend = backend;
  // Under `primus launch` every line already gets "[rank N] " from the launcher: keep the rank (info lines
  // stay on rank 0) but not a second prefix.
  const char* launched = std::getenv("PRIMUS_LAUNCHER");
  log::set_rank(env.rank, launched != nullptr && *launched != '\0' ? 1 : env.world_size);
  log::info("distributed: {}; backend {}, collective timeout {:g} s", env.describe(), backend, timeout);

  // The TCP store: for tcp always (more than one rank), for nccl unless MPI can carry the unique id.
  const bool nccl_via_mpi =
      backend == "nccl" && under_mpirun() && env.source == "openmpi" && std::getenv("MASTER_ADDR") == nullptr;
  if (env.world_size > 1 && (backend == "tcp" || (backend == "nccl" && !nccl_via_mpi)))
    w.store = std::make_shared<TcpStore>(env.master_addr, env.master_port, env.rank == 0, timeout);

  if (backend == "mpi") {
    w.comm = mpi_world(timeout);
    if (w.comm->rank() != env.rank || w.comm->size() != env.world_size)
      throw ConfigError(
          fmt::format("MPI says rank {} of {}, but the launch environment ({}) says rank {} of {}",
                      w.comm->rank(), w.comm->size(), env.source, env.rank, env.world_size),
          "start MPI ranks with mpirun and no other launcher variables");
  } else if (backend == "tcp") {
    std::vector<int> ranks(env.world_size);
    for (int i = 0; i < env.world_size; ++i) ranks[i] = i;
    w.comm = TcpCommunicator::create(w.store, env.rank, env.world_size, ranks, "world", "tcp/world", timeout);
  } else {
    std::unique_ptr<Communicator> host;
    if (nccl_via_mpi && env.world_size > 1) host = mpi_world(timeout);
    const int device = options.cuda_device >= 0 ? options.cuda_device : env.local_rank;
    w.comm = nccl_world(env, w.store.get(), host.get(), device, timeout);
    // MPI stays initialised while `host` lives; it was only needed for the id (MPI_Finalize at its end).
  }
  return w;
}

}  // namespace primus::comm
