#include "comm/mpi_communicator.h"

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <thread>
#include <vector>

#include "comm/rank_names.h"
#include "core/log.h"

namespace primus::comm {

namespace {

// OpenMPI's handles are pointers to its objects; we never look inside them.
using MPI_Comm = void*;
using MPI_Datatype = void*;
using MPI_Request = void*;
using MPI_Errhandler = void*;
constexpr int kMpiSuccess = 0;
constexpr int kMpiUndefined = -32766;  // OpenMPI's MPI_UNDEFINED
constexpr int kMpiThreadMultiple = 3;  // MPI_THREAD_MULTIPLE (the pipeline's sender threads)
constexpr int kMpiMaxErrorString = 256;
constexpr int kTag = 7;
std::atomic<bool> g_thread_multiple{false};
constexpr size_t kMaxMessage = size_t{1} << 30;  // MPI counts are ints: split larger messages

// The functions and predefined objects we use, resolved from libmpi.so.40.
struct MpiApi {
  void* lib = nullptr;
  int (*Initialized)(int*) = nullptr;
  int (*Finalized)(int*) = nullptr;
  int (*Init_thread)(int*, char***, int, int*) = nullptr;
  int (*Finalize)() = nullptr;
  int (*Abort)(MPI_Comm, int) = nullptr;
  int (*Comm_rank)(MPI_Comm, int*) = nullptr;
  int (*Comm_size)(MPI_Comm, int*) = nullptr;
  int (*Comm_split)(MPI_Comm, int, int, MPI_Comm*) = nullptr;
  int (*Comm_free)(MPI_Comm*) = nullptr;
  int (*Comm_set_errhandler)(MPI_Comm, MPI_Errhandler) = nullptr;
  int (*Isend)(const void*, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request*) = nullptr;
  int (*Irecv)(void*, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request*) = nullptr;
  int (*Waitall)(int, MPI_Request*, void*) = nullptr;
  int (*Testall)(int, MPI_Request*, int*, void*) = nullptr;
  int (*Error_string)(int, char*, int*) = nullptr;
  MPI_Comm comm_world = nullptr;
  MPI_Comm comm_null = nullptr;
  MPI_Datatype byte = nullptr;
  MPI_Errhandler errors_return = nullptr;

  std::string error_string(int code) const {
    char buf[kMpiMaxErrorString] = {0};
    int len = 0;
    if (Error_string && Error_string(code, buf, &len) == kMpiSuccess) return std::string(buf, len);
    return fmt::format("MPI error {}", code);
  }
};

template <typename F>
void load_fn(MpiApi& api, F& fn, const char* name) {
  fn = reinterpret_cast<F>(dlsym(api.lib, name));
  if (!fn) throw Error(ErrorKind::kRuntime, fmt::format("libmpi.so.40 has no symbol {}", name));
}

MpiApi load_mpi() {
  MpiApi api;
  // RTLD_GLOBAL: OpenMPI's own plugins (mca_*.so), which libmpi dlopens, resolve symbols against it.
  for (const char* name : {"libmpi.so.40", "libmpi.so"}) {
    api.lib = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
    if (api.lib) break;
  }
  if (!api.lib)
    throw ConfigError(
        fmt::format("the mpi backend needs OpenMPI (libmpi.so.40), which could not be loaded: {}", dlerror()),
        "install OpenMPI (apt-get install openmpi-bin) and start the ranks with mpirun; without "
        "mpirun use `primus launch` (tcp backend) instead");
  load_fn(api, api.Initialized, "MPI_Initialized");
  load_fn(api, api.Finalized, "MPI_Finalized");
  load_fn(api, api.Init_thread, "MPI_Init_thread");
  load_fn(api, api.Finalize, "MPI_Finalize");
  load_fn(api, api.Abort, "MPI_Abort");
  load_fn(api, api.Comm_rank, "MPI_Comm_rank");
  load_fn(api, api.Comm_size, "MPI_Comm_size");
  load_fn(api, api.Comm_split, "MPI_Comm_split");
  load_fn(api, api.Comm_free, "MPI_Comm_free");
  load_fn(api, api.Comm_set_errhandler, "MPI_Comm_set_errhandler");
  load_fn(api, api.Isend, "MPI_Isend");
  load_fn(api, api.Irecv, "MPI_Irecv");
  load_fn(api, api.Waitall, "MPI_Waitall");
  load_fn(api, api.Testall, "MPI_Testall");
  load_fn(api, api.Error_string, "MPI_Error_string");
  // Predefined handles are the addresses of OpenMPI's global objects.
  api.comm_world = dlsym(api.lib, "ompi_mpi_comm_world");
  api.comm_null = dlsym(api.lib, "ompi_mpi_comm_null");
  api.byte = dlsym(api.lib, "ompi_mpi_byte");
  api.errors_return = dlsym(api.lib, "ompi_mpi_errors_return");
  if (!api.comm_world || !api.comm_null || !api.byte || !api.errors_return)
    throw ConfigError(
        "the loaded libmpi is not OpenMPI (no ompi_mpi_comm_world): the mpi backend supports OpenMPI");
  return api;
}

// Owns MPI's lifetime: shared by every communicator so that MPI is finalised after the last one is freed.
struct MpiRuntime {
  MpiApi api;
  bool initialised_here = false;
  std::atomic<bool> failed{false};
  ~MpiRuntime() {
    if (!initialised_here) return;
    if (failed.load() || std::uncaught_exceptions() > 0) {
      // MPI_Finalize would wait for the other ranks forever: ask mpirun to stop the whole job instead.
      std::fflush(stdout);
      std::fflush(stderr);
      api.Abort(api.comm_world, 1);
      std::_Exit(1);
    }
    api.Finalize();
  }
};

class MpiCommunicator : public HostCommunicator {
 public:
  MpiCommunicator(std::shared_ptr<MpiRuntime> rt, MPI_Comm comm, int rank, int size, std::string name,
                  int world_rank, std::vector<int> world_ranks, double timeout_s)
      : HostCommunicator(rank, size, std::move(name), world_rank, timeout_s),
        rt_(std::move(rt)),
        comm_(comm),
        world_ranks_(std::move(world_ranks)) {}
  ~MpiCommunicator() override {
    if (comm_ != rt_->api.comm_world && !rt_->failed.load()) rt_->api.Comm_free(&comm_);
  }
  const char* backend() const override { return "mpi"; }

 protected:
  void check(int code, const char* call, int peer) {
    if (code == kMpiSuccess) return;
    fail(fmt::format("{} with {} failed: {}", call, rank_name(peer >= 0 ? world_ranks_[peer] : -1),
                     rt_->api.error_string(code)));
  }

  void exchange(int send_peer, const void* send_buf, size_t send_bytes, int recv_peer, void* recv_buf,
                size_t recv_bytes) override {
    const MpiApi& api = rt_->api;
    std::vector<MPI_Request> reqs;
    const char* sb = static_cast<const char*>(send_buf);
    char* rb = static_cast<char*>(recv_buf);
    // Large messages go as consecutive pieces; MPI keeps pieces between a pair of ranks in order.
    size_t so = 0, ro = 0;
    bool send_left = send_peer >= 0, recv_left = recv_peer >= 0;
    while (send_left || recv_left) {
      if (recv_left) {
        size_t n = std::min(kMaxMessage, recv_bytes - ro);
        MPI_Request r = nullptr;
        check(api.Irecv(rb + ro, static_cast<int>(n), api.byte, recv_peer, kTag, comm_, &r), "MPI_Irecv",
              recv_peer);
        reqs.push_back(r);
        ro += n;
        recv_left = ro < recv_bytes;
      }
      if (send_left) {
        size_t n = std::min(kMaxMessage, send_bytes - so);
        MPI_Request r = nullptr;
        check(api.Isend(sb + so, static_cast<int>(n), api.byte, send_peer, kTag, comm_, &r), "MPI_Isend",
              send_peer);
        reqs.push_back(r);
        so += n;
        send_left = so < send_bytes;
      }
    }
    if (!reqs.empty()) wait_all(reqs, recv_peer >= 0 ? recv_peer : send_peer);
  }

  // MPI_Waitall spins (yielding, when oversubscribed) until the peer answers, so a rank waiting long for a
  // slower one takes CPU time from the ranks doing the work: the CPU tests run 2 to 8 ranks on 2 cores, and a
  // pipeline stage waits out the other stages' micro-batches. For the first 2 ms this tests and yields as
  // MPI_Waitall does (short waits -- tensor parallelism's collectives -- keep their latency), then sleeps
  // between tests, the nap growing to 100 us.
  void wait_all(std::vector<MPI_Request>& reqs, int peer) {
    const MpiApi& api = rt_->api;
    const auto start = std::chrono::steady_clock::now();
    std::chrono::microseconds nap{0};
    for (;;) {
      int done = 0;
      check(api.Testall(static_cast<int>(reqs.size()), reqs.data(), &done, nullptr), "MPI_Testall", peer);
      if (done) return;
      if (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(2)) {
        sched_yield();
        continue;
      }
      nap = std::min(std::chrono::microseconds(100), std::max(std::chrono::microseconds(10), nap * 2));
      std::this_thread::sleep_for(nap);
    }
  }

  std::unique_ptr<Communicator> do_split(int color, int key, const std::string& name,
                                         bool /*low_latency: synchronous anyway*/) override {
    const MpiApi& api = rt_->api;
    auto all = gather_pairs(color, key);  // to know the members' world ranks (for messages)
    MPI_Comm out = nullptr;
    check(api.Comm_split(comm_, color < 0 ? kMpiUndefined : color, key, &out), "MPI_Comm_split", -1);
    if (color < 0 || out == api.comm_null) return nullptr;
    check(api.Comm_set_errhandler(out, api.errors_return), "MPI_Comm_set_errhandler", -1);
    int r = 0, n = 0;
    api.Comm_rank(out, &r);
    api.Comm_size(out, &n);
    std::vector<std::pair<int, int>> members;
    for (int i = 0; i < size(); ++i)
      if (all[i].first == color) members.push_back({all[i].second, i});
    std::sort(members.begin(), members.end());
    std::vector<int> world;
    for (auto& m : members) world.push_back(world_ranks_[m.second]);
    return std::make_unique<MpiCommunicator>(rt_, out, r, n, name, world_rank(), world, timeout_s());
  }

  void do_abort(const std::string&) override {
    // No MPI call here (this may run on the watchdog thread while another thread is inside MPI): the
    // runtime calls MPI_Abort when the world is torn down, and mpirun stops the job.
    rt_->failed = true;
  }

 private:
  std::shared_ptr<MpiRuntime> rt_;
  MPI_Comm comm_;
  std::vector<int> world_ranks_;
};

}  // namespace

bool under_mpirun() {
  const char* v = std::getenv("OMPI_COMM_WORLD_SIZE");
  return v != nullptr && *v != '\0';
}

bool mpi_thread_multiple() {
  return g_thread_multiple;
}

std::unique_ptr<Communicator> mpi_world(double timeout_s) {
  auto rt = std::make_shared<MpiRuntime>();
  rt->api = load_mpi();
  const MpiApi& api = rt->api;
  int inited = 0;
  api.Initialized(&inited);
  if (!inited) {
    int provided = 0;
    int rc = api.Init_thread(nullptr, nullptr, kMpiThreadMultiple, &provided);
    if (rc != kMpiSuccess)
      throw Error(ErrorKind::kRuntime, "MPI_Init_thread failed: " + api.error_string(rc));
    g_thread_multiple = provided >= kMpiThreadMultiple;
    rt->initialised_here = true;
  }
  api.Comm_set_errhandler(api.comm_world, api.errors_return);
  int rank = 0, size = 1;
  api.Comm_rank(api.comm_world, &rank);
  api.Comm_size(api.comm_world, &size);
  std::vector<int> world(size);
  for (int i = 0; i < size; ++i) world[i] = i;
  return std::make_unique<MpiCommunicator>(rt, api.comm_world, rank, size, "world", rank, world, timeout_s);
}

}  // namespace primus::comm
