#pragma once
// The "nccl" backend (GPU tensors), built only when NCCL is found (PRIMUS_WITH_NCCL). Communicators are
// created non-blocking (ncclConfig_t.blocking = 0) so that initialisation, every call and the watchdog's
// checks return in bounded time; ncclCommGetAsyncError is polled and ncclCommAbort tears a communicator down.
// Sub-groups come from ncclCommSplit. Only NCCL calls present in 2.28.3 (the GPU machine's runtime) are used.
#include <memory>

#include "comm/bootstrap.h"
#include "comm/communicator.h"
#include "comm/tcp_store.h"

namespace primus::comm {

bool nccl_built();
// "2.28.3" (the runtime's version), or "" when not built.
std::string nccl_runtime_version();

// Collective: rank 0 creates the unique id and shares it through `store`, or, when store is null, through
// `host` (a CPU communicator, e.g. MPI's world) by broadcast. `device` is this rank's GPU.
std::unique_ptr<Communicator> nccl_world(const LaunchEnv& env, TcpStore* store, Communicator* host,
                                         int device, double timeout_s);

}  // namespace primus::comm
