// Builds without NCCL: the nccl backend reports that it is missing (nccl_communicator_cuda.cpp otherwise).
#ifndef PRIMUS_WITH_NCCL
#include "comm/nccl_communicator.h"

namespace primus::comm {

bool nccl_built() {
  return false;
}
std::string nccl_runtime_version() {
  return "";
}
std::unique_ptr<Communicator> nccl_world(const LaunchEnv&, TcpStore*, Communicator*, int, double) {
  throw ConfigError(
      "the nccl backend is not built into this primus (a CPU-only build, or NCCL was not found)",
      "use --backend tcp or mpi on the CPU, or rebuild with -DPRIMUS_CUDA=ON and NCCL installed");
}

}  // namespace primus::comm
#endif
