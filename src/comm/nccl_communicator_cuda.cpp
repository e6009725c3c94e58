// The nccl backend (nccl_communicator.h). Compiled in CUDA builds; empty unless NCCL was found.
#ifdef PRIMUS_WITH_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>

#include "comm/nccl_communicator.h"
#include "core/cuda_check.h"
#include "core/log.h"
#include "profile/trace.h"

namespace primus::comm {

namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    default:
      return ncclUint8;
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

ncclConfig_t nonblocking_config() {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;  // calls return ncclInProgress instead of blocking: every wait below is bounded
  // PRIMUS_NCCL_BLOCKING=1: blocking communicators, to compare the host cost of the non-blocking mode's
  // settle polling (a diagnostic; a hung init or split then cannot be timed out).
  if (const char* b = std::getenv("PRIMUS_NCCL_BLOCKING"); b && std::string(b) == "1") cfg.blocking = 1;
  return cfg;
}

std::string nccl_error(ncclComm_t comm, ncclResult_t r) {
  const char* last = comm ? ncclGetLastError(comm) : nullptr;
  return fmt::format("{}{}{}", ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
}

// Polls a non-blocking communicator until its pending call settles; returns the final state.
ncclResult_t wait_settled(ncclComm_t comm, double timeout_s) {
  PRIMUS_TRACE_RANGE("nccl settle wait");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  ncclResult_t state = ncclInProgress;
  for (;;) {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    if (state != ncclInProgress) return state;
    if (std::chrono::steady_clock::now() > deadline) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int device, int rank, int size, std::string name, int world_rank,
                   double timeout_s)
      : Communicator(rank, size, std::move(name), world_rank, timeout_s), comm_(comm), device_(device) {
    PRIMUS_CUDA_CHECK(cudaSetDevice(device_));
    PRIMUS_CUDA_CHECK(cudaStreamCreateWithFlags(&internal_, cudaStreamNonBlocking));
    PRIMUS_CUDA_CHECK(cudaMalloc(&scratch_, 16));
  }
  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    if (!aborted()) {
      // Clean teardown: finalize flushes pending work (bounded by the timeout), then destroy.
      ncclResult_t r = ncclCommFinalize(comm_);
      if (r == ncclSuccess || r == ncclInProgress) r = wait_settled(comm_, timeout_s());
      if (r == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
    for (auto& p : pending_) cudaEventDestroy(p.event);
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    cudaFree(scratch_);
    cudaStreamDestroy(internal_);
  }
  const char* backend() const override { return "nccl"; }
  DeviceType device_type() const override { return DeviceType::kCUDA; }

  std::optional<std::string> check_health(std::chrono::steady_clock::time_point now) override {
    std::lock_guard<std::mutex> lock(mu_);
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm_, &state);
    if (state != ncclSuccess && state != ncclInProgress) {
      std::string where =
          pending_.empty() ? describe_op("(between operations)", "", 0)
                           : describe_op(pending_.front().op, pending_.front().label, pending_.front().seq);
      return fmt::format("{}: NCCL reported an asynchronous error: {}", where, nccl_error(comm_, state));
    }
    cudaSetDevice(device_);
    while (!pending_.empty() && cudaEventQuery(pending_.front().event) == cudaSuccess) {
      free_events_.push_back(pending_.front().event);
      pending_.pop_front();
    }
    if (pending_.empty()) return std::nullopt;
    const Pending& p = pending_.front();
    if (std::chrono::duration<double>(now - p.start).count() < timeout_s()) return std::nullopt;
    return fmt::format("{} timed out after {:g} s (not finished on the GPU)",
                       describe_op(p.op, p.label, p.seq), timeout_s());
  }

 protected:
  bool synchronous() const override { return false; }

  void check(ncclResult_t r, const char* call) {
    if (r == ncclInProgress) r = wait_settled(comm_, timeout_s());
    if (r == ncclInProgress) fail(fmt::format("{} did not settle within {:g} s", call, timeout_s()));
    if (r != ncclSuccess) fail(fmt::format("{} failed: {}", call, nccl_error(comm_, r)));
  }

  // Records completion of the operation just enqueued on `s`, for the watchdog.
  void track(const Stream& s) {
    std::lock_guard<std::mutex> lock(mu_);
    cudaEvent_t e;
    if (!free_events_.empty()) {
      e = free_events_.back();
      free_events_.pop_back();
    } else {
      PRIMUS_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    PRIMUS_CUDA_CHECK(cudaEventRecord(e, cuda_stream(s)));
    OpInfo op = current_op();
    pending_.push_back({op.op, op.label, op.seq, e, std::chrono::steady_clock::now()});
  }

  void do_all_reduce(const Tensor& t, ReduceOp op, const Stream& s) override {
    check(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.dtype()), nccl_op(op), comm_,
                        cuda_stream(s)),
          "ncclAllReduce");
    track(s);
  }
  void do_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, const Stream& s) override {
    check(ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), nccl_type(in.dtype()), nccl_op(op),
                            comm_, cuda_stream(s)),
          "ncclReduceScatter");
    track(s);
  }
  void do_all_gather(const Tensor& in, const Tensor& out, const Stream& s) override {
    check(ncclAllGather(in.data_ptr(), out.data_ptr(), in.nbytes(), ncclUint8, comm_, cuda_stream(s)),
          "ncclAllGather");
    track(s);
  }
  void do_all_to_all_v(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                       const std::vector<int64_t>& recv_counts, const Stream& s) override {
    const size_t es = dtype_size(in.dtype());
    const char* src = static_cast<const char*>(in.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    check(ncclGroupStart(), "ncclGroupStart");
    size_t so = 0, ro = 0;
    for (int j = 0; j < size(); ++j) {
      if (send_counts[j] > 0)
        check(ncclSend(src + so, send_counts[j] * es, ncclUint8, j, comm_, cuda_stream(s)), "ncclSend");
      if (recv_counts[j] > 0)
        check(ncclRecv(dst + ro, recv_counts[j] * es, ncclUint8, j, comm_, cuda_stream(s)), "ncclRecv");
      so += send_counts[j] * es;
      ro += recv_counts[j] * es;
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
    track(s);
  }
  void do_broadcast(const Tensor& t, int root, const Stream& s) override {
    check(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.nbytes(), ncclUint8, root, comm_, cuda_stream(s)),
          "ncclBroadcast");
    track(s);
  }
  void do_send(const Tensor& t, int peer, const Stream& s) override {
    check(ncclSend(t.data_ptr(), t.nbytes(), ncclUint8, peer, comm_, cuda_stream(s)), "ncclSend");
    track(s);
  }
  void do_recv(const Tensor& t, int peer, const Stream& s) override {
    check(ncclRecv(t.data_ptr(), t.nbytes(), ncclUint8, peer, comm_, cuda_stream(s)), "ncclRecv");
    track(s);
  }
  void do_barrier() override {
    // A one-element all-reduce on an internal stream, waited for on the host with the timeout.
    cudaSetDevice(device_);
    check(ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, internal_),
          "ncclAllReduce (barrier)");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s());
    for (;;) {
      cudaError_t e = cudaStreamQuery(internal_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) fail(fmt::format("barrier: {}", cudaGetErrorString(e)));
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress) fail("barrier: " + nccl_error(comm_, state));
      if (std::chrono::steady_clock::now() > deadline)
        fail(fmt::format("barrier timed out after {:g} s", timeout_s()));
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  std::unique_ptr<Communicator> do_split(int color, int key, const std::string& name,
                                         bool low_latency) override {
    ncclConfig_t cfg = nonblocking_config();
    if (low_latency) cfg.blocking = 1;  // the child only: the parent's split call itself stays non-blocking
    // With a non-blocking parent, NCCL publishes the child handle only when the split has completed, from its
    // own thread, after ncclCommSplit has returned. So the handle lives on the heap (leaked if the split
    // never completes, so that a late write cannot land in freed memory) and is polled until it appears.
    auto* slot = new ncclComm_t(nullptr);
    ncclResult_t r0 = ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, slot, &cfg);
    if (r0 != ncclSuccess && r0 != ncclInProgress) {
      delete slot;
      fail(fmt::format("ncclCommSplit failed: {}", nccl_error(comm_, r0)));
    }
    if (color < 0) {
      check(r0, "ncclCommSplit");
      delete slot;
      return nullptr;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s());
    ncclComm_t out = nullptr;
    for (;;) {
      out = *static_cast<volatile ncclComm_t*>(slot);
      if (out != nullptr) break;
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress)
        fail("ncclCommSplit failed: " + nccl_error(comm_, state));  // slot leaked on purpose (see above)
      if (std::chrono::steady_clock::now() > deadline)
        fail(fmt::format("ncclCommSplit did not complete within {:g} s", timeout_s()));
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    delete slot;
    check(wait_settled(comm_, timeout_s()), "ncclCommSplit (parent)");
    ncclResult_t r = wait_settled(out, timeout_s());
    if (r != ncclSuccess) {
      ncclCommAbort(out);
      fail(fmt::format("ncclCommSplit: the new communicator did not start: {}", nccl_error(out, r)));
    }
    int nr = 0, nn = 0;
    ncclCommUserRank(out, &nr);
    ncclCommCount(out, &nn);
    return std::make_unique<NcclCommunicator>(out, device_, nr, nn, name, world_rank(), timeout_s());
  }
  void do_abort(const std::string&) override {
    // Non-blocking communicators abort in bounded time; kernels of this communicator are stopped.
    ncclCommAbort(comm_);
  }

 private:
  struct Pending {
    std::string op, label;
    uint64_t seq;
    cudaEvent_t event;
    std::chrono::steady_clock::time_point start;
  };
  ncclComm_t comm_;
  int device_;
  cudaStream_t internal_ = nullptr;
  void* scratch_ = nullptr;
  std::mutex mu_;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
};

}  // namespace

bool nccl_built() {
  return true;
}

std::string nccl_runtime_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

std::unique_ptr<Communicator> nccl_world(const LaunchEnv& env, TcpStore* store, Communicator* host,
                                         int device, double timeout_s) {
  PRIMUS_CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId id;
  if (env.rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
      throw CommError(fmt::format("rank 0: ncclGetUniqueId failed: {}", ncclGetErrorString(r)));
  }
  if (env.world_size > 1) {
    if (store != nullptr) {
      if (env.rank == 0) store->set("nccl/world/unique_id", std::string(id.internal, sizeof(id.internal)));
      std::string v = store->get("nccl/world/unique_id");
      std::memcpy(id.internal, v.data(), std::min(v.size(), sizeof(id.internal)));
    } else if (host != nullptr) {
      Tensor t = Tensor::from_blob(id.internal, {static_cast<int64_t>(sizeof(id.internal))}, DType::kU8,
                                   Device::cpu());
      host->broadcast(t, 0, Stream::cpu(), "nccl unique id");
    } else {
      throw ConfigError(
          "the nccl backend needs MASTER_ADDR/MASTER_PORT (TCP store) or mpirun to share its id");
    }
  }
  ncclConfig_t cfg = nonblocking_config();
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, env.world_size, id, env.rank, &cfg);
  if (r == ncclInProgress || r == ncclSuccess) r = wait_settled(comm, timeout_s);
  if (r != ncclSuccess) {
    std::string why =
        r == ncclInProgress ? fmt::format("not done after {:g} s", timeout_s) : nccl_error(comm, r);
    if (comm) ncclCommAbort(comm);
    throw CommError(
        fmt::format("rank {}, group world, op ncclCommInitRankConfig on GPU {}: {}", env.rank, device, why),
        "check that every rank started and that NCCL_SOCKET_IFNAME / NCCL_IB_HCA fit this host");
  }
  log::info("nccl {} (runtime), headers {}.{}.{}: world communicator ready on GPU {}", nccl_runtime_version(),
            NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, device);
  return std::make_unique<NcclCommunicator>(comm, device, env.rank, env.world_size, "world", env.rank,
                                            timeout_s);
}

}  // namespace primus::comm
#endif  // PRIMUS_WITH_NCCL
