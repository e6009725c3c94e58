#pragma once
// Communicator: the collectives every parallel feature (DDP, ZeRO, FSDP, TP, PP, EP) is written against.
// Backends: "mpi" (OpenMPI, CPU tensors, loaded on demand), "tcp" (sockets among ranks started by
// `primus launch`, CPU tensors) and "nccl" (GPU tensors). docs/distributed.md describes them.
//
// Every operation takes a label ("grad bucket 3", "fsdp gather layer 7") that error and timeout messages
// quote together with the rank, the group name and the operation's sequence number in that group:
//   "rank 3, group dp, op all_reduce 'grad bucket 3' (seq 41) timed out after 600 s"
// A failure (peer died, backend error, timeout) aborts every communicator of the process; a timeout detected
// by the watchdog ends the process (exit code 1) because the thread blocked in the operation cannot be woken.
//
// Tensors must be contiguous, of dtype f32, f64, bf16, i32 or i64 (send/recv/broadcast/all_gather/all_to_all
// take any dtype). NCCL takes GPU tensors; host backends (mpi, tcp) take host tensors, and GPU tensors
// through host copies (after syncing `stream`; results copied back before returning): several ranks sharing
// one GPU, where NCCL cannot run, still run the CUDA path of every layout. Host backends run synchronously on
// the calling thread; the NCCL backend enqueues on `stream` and returns.
//
// Reduction order (host backends): element i of a sum is ((x_0 + x_1) + x_2) + ... + x_{n-1} over the group's
// ranks in rank order, computed in f32 for bf16 inputs (one rounding at the end) and natively for
// f32/f64/ints, so results are bitwise reproducible and equal to that same sum computed in one process. kAvg
// divides the sum by n (a division, not a multiplication by 1/n). NCCL's order is its own (ring/tree): not
// bitwise equal.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace primus::comm {

enum class ReduceOp { kSum, kAvg, kMax, kMin };
const char* reduce_op_name(ReduceOp op);

// A failure of a collective; the message names rank, group, operation and sequence number.
class CommError : public Error {
 public:
  explicit CommError(std::string message, std::string hint = {})
      : Error(ErrorKind::kRuntime, std::move(message), {}, std::move(hint)) {}
};

struct CommOptions {
  double timeout_s = 600;  // distributed_timeout_minutes x 60; PRIMUS_COMM_TIMEOUT_S overrides (tests)
};
// The timeout to use: PRIMUS_COMM_TIMEOUT_S when set, else `configured_s`.
double effective_timeout_s(double configured_s);

class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }  // group name: "world", "dp", "tp", ...
  virtual const char* backend() const = 0;           // "mpi" | "tcp" | "nccl"
  virtual DeviceType device_type() const = 0;        // where tensors must live
  double timeout_s() const { return timeout_s_; }
  // The rank of this process in the world communicator (for messages).
  int world_rank() const { return world_rank_; }

  // In place: t = op over all ranks' t.
  void all_reduce(const Tensor& t, ReduceOp op, const Stream& s, std::string_view label);
  // One f64 value reduced over the ranks (a loss sum, a stop request, a norm's square), through `s`'s device
  // when it is a GPU (NCCL reduces GPU tensors only).
  double all_reduce_value(double v, ReduceOp op, const Stream& s, std::string_view label);
  // in: [size * k] elements, out: [k]; rank r receives the reduction of every rank's chunk r.
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, const Stream& s,
                      std::string_view label);
  // in: [k], out: [size * k]; chunk r of out is rank r's in.
  void all_gather(const Tensor& in, const Tensor& out, const Stream& s, std::string_view label);
  // in, out: [size * k]; chunk j of in goes to rank j, chunk j of out comes from rank j.
  void all_to_all(const Tensor& in, const Tensor& out, const Stream& s, std::string_view label);
  // Element counts per peer; chunks are packed in rank order in both buffers.
  void all_to_all_v(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                    const std::vector<int64_t>& recv_counts, const Stream& s, std::string_view label);
  void broadcast(const Tensor& t, int root, const Stream& s, std::string_view label);
  void send(const Tensor& t, int peer, const Stream& s, std::string_view label);
  void recv(const Tensor& t, int peer, const Stream& s, std::string_view label);
  void barrier(std::string_view label);

  // Collective over this communicator: ranks with the same color form a new communicator ordered by (key,
  // rank). color < 0: this rank joins none and gets nullptr (every rank must still call).
  // low_latency: for a group whose operations sit between kernels on the compute stream (the MoE token
  // dispatch): NCCL then enqueues each operation in a blocking call instead of returning at once and having
  // the host poll until it settles (each such wait idled the GPU for ms). Such a group's own creation cannot
  // be bounded by the backend; the hang watchdog still ends a process stuck in it. Host backends ignore it.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name, bool low_latency = false);

  // Tears the communicator down so that pending and future operations fail fast (idempotent, thread-safe).
  void abort(const std::string& reason);
  bool aborted() const { return aborted_.load(); }

  // "rank 3, group dp, op all_reduce 'grads' (seq 41)" for the operation in flight or the last one.
  std::string describe_op(std::string_view op, std::string_view label, uint64_t seq) const;

  // Called by the watchdog: a message when this communicator has failed or an operation is overdue.
  virtual std::optional<std::string> check_health(std::chrono::steady_clock::time_point now);

 protected:
  Communicator(int rank, int size, std::string name, int world_rank, double timeout_s);

  // Backend operations; arguments already validated. Host backends may ignore the stream.
  virtual void do_all_reduce(const Tensor& t, ReduceOp op, const Stream& s) = 0;
  virtual void do_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, const Stream& s) = 0;
  virtual void do_all_gather(const Tensor& in, const Tensor& out, const Stream& s) = 0;
  virtual void do_all_to_all_v(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                               const std::vector<int64_t>& recv_counts, const Stream& s) = 0;
  virtual void do_broadcast(const Tensor& t, int root, const Stream& s) = 0;
  virtual void do_send(const Tensor& t, int peer, const Stream& s) = 0;
  virtual void do_recv(const Tensor& t, int peer, const Stream& s) = 0;
  virtual void do_barrier() = 0;
  virtual std::unique_ptr<Communicator> do_split(int color, int key, const std::string& name,
                                                 bool low_latency) = 0;
  // `reason`: the failure that caused it, which a backend may pass on to its peers.
  virtual void do_abort(const std::string& reason) = 0;
  // Synchronous backends: the operation is over when do_* returns. Asynchronous ones (NCCL) track completion.
  virtual bool synchronous() const { return true; }

  // Throws CommError for the operation in flight, after aborting every communicator of the process.
  [[noreturn]] void fail(const std::string& what) const;

  // The operation in flight (for messages from inside a backend).
  struct OpInfo {
    std::string op;
    std::string label;
    uint64_t seq = 0;
    std::chrono::steady_clock::time_point start;
    bool active = false;
  };
  OpInfo current_op() const;
  uint64_t next_seq() { return ++seq_; }

 private:
  template <typename F>
  void run_op(const char* op, std::string_view label, F&& body);

  int rank_ = 0, size_ = 1;
  std::string name_;
  int world_rank_ = 0;
  double timeout_s_ = 600;
  uint64_t seq_ = 0;
  std::atomic<bool> aborted_{false};
  mutable std::mutex op_mu_;
  OpInfo op_;
};

// Aborts every live communicator of this process (errors, timeouts, signals).
void abort_all_communicators(const std::string& reason);

// Called at the start of every operation of every communicator (the hang watchdog, src/safe, records each
// rank's last collective with it). nullptr: none.
using OpObserver = void (*)(const std::string& group, const char* op, std::string_view label, uint64_t seq);
void set_op_observer(OpObserver observer);

}  // namespace primus::comm
