#pragma once
// The "mpi" backend: CPU tensors over OpenMPI point-to-point (MPI_Isend/MPI_Irecv), with the collective
// algorithms of host_communicator.h so that the reduction order is fixed (MPI_Allreduce's is not specified).
//
// libmpi is loaded with dlopen("libmpi.so.40") only when this backend is asked for: Debian ships OpenMPI as
// shared libraries only, and the GPU machine has no OpenMPI, so the `primus` binary must not depend on it.
// The few MPI types used are opaque pointers declared here (OpenMPI's ABI: MPI_Comm etc. are pointers to
// ompi_* objects, whose predefined instances are looked up by symbol), so no mpi.h is needed to build.
#include <memory>
#include <string>

#include "comm/host_communicator.h"

namespace primus::comm {

// True when the process was started by OpenMPI's mpirun (OMPI_COMM_WORLD_SIZE is set).
bool under_mpirun();

// Initialises MPI (MPI_Init_thread) and returns the world communicator. Throws with a hint when libmpi
// cannot be loaded. The world's destruction finalises MPI, or calls MPI_Abort when a communicator failed or
// the stack is unwinding from an exception (so that mpirun stops every rank at once instead of blocking in
// MPI_Finalize).
std::unique_ptr<Communicator> mpi_world(double timeout_s);
// Whether MPI lets several threads call it at once (MPI_THREAD_MULTIPLE was provided): the pipeline's
// sender threads need it (parallel/pipeline_channels.h). False before mpi_world.
bool mpi_thread_multiple();

}  // namespace primus::comm
