#include "comm/communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <thread>

#include "comm/rank_names.h"
#include "core/log.h"
#include "profile/trace.h"

namespace primus::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

double effective_timeout_s(double configured_s) {
  if (const char* v = std::getenv("PRIMUS_COMM_TIMEOUT_S"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    double t = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(t > 0))
      throw ConfigError(fmt::format("environment: PRIMUS_COMM_TIMEOUT_S='{}' is not a positive number", v));
    return t;
  }
  return configured_s;
}

// ---------------------------------------------------------------------------------------------------------
// The registry of live communicators and the watchdog thread that polls them. One thread per process (not
// per communicator): it only compares clocks and asks backends for asynchronous errors, and one thread
// sees every group, so the first failure found aborts all of them at once.
namespace {

class Watchdog {
 public:
  static Watchdog& get() {
    static Watchdog* w = new Watchdog();  // never destroyed: communicators may outlive static destruction
    return *w;
  }
  void add(Communicator* c) {
    std::lock_guard<std::mutex> lock(mu_);
    comms_.insert(c);
    if (!thread_started_) {
      thread_started_ = true;
      std::thread([this] { loop(); }).detach();
    }
  }
  void remove(Communicator* c) {
    std::lock_guard<std::mutex> lock(mu_);
    comms_.erase(c);
  }
  void abort_all(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    for (Communicator* c : comms_) c->abort(reason);
  }

 private:
  void loop() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::optional<std::string> failure;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto now = std::chrono::steady_clock::now();
        for (Communicator* c : comms_) {
          if (c->aborted()) continue;
          failure = c->check_health(now);
          if (failure) break;
        }
        if (failure) {
          // Said before the abort: the abort wakes the blocked operation, whose thread may then report
          // its own symptom ("rank X closed its connection") and end the process before this thread logs
          // the cause (seen in CI: CommTcpProcesses.AHungRankTimesOut).
          log::error("communicator watchdog: {}; all communicators aborted, exiting", *failure);
          std::fflush(stdout);
          std::fflush(stderr);
          for (Communicator* c : comms_) c->abort(*failure);
        }
      }
      if (failure) {
        // The thread blocked in the operation cannot be woken reliably (a host backend sits in a system
        // call, a GPU stream may never drain): end the process so that the launcher sees a failure now.
        std::_Exit(1);
      }
    }
  }

  std::mutex mu_;
  std::set<Communicator*> comms_;
  bool thread_started_ = false;
};

}  // namespace

void abort_all_communicators(const std::string& reason) {
  Watchdog::get().abort_all(reason);
}

namespace {
std::atomic<OpObserver> g_op_observer{nullptr};
}  // namespace

void set_op_observer(OpObserver observer) {
  g_op_observer.store(observer);
}

Communicator::Communicator(int rank, int size, std::string name, int world_rank, double timeout_s)
    : rank_(rank), size_(size), name_(std::move(name)), world_rank_(world_rank), timeout_s_(timeout_s) {
  Watchdog::get().add(this);
}

Communicator::~Communicator() {
  Watchdog::get().remove(this);
}

std::string Communicator::describe_op(std::string_view op, std::string_view label, uint64_t seq) const {
  if (label.empty())
    return fmt::format("{}, group {}, op {} (seq {})", rank_name(world_rank_), name_, op, seq);
  return fmt::format("{}, group {}, op {} '{}' (seq {})", rank_name(world_rank_), name_, op, label, seq);
}

Communicator::OpInfo Communicator::current_op() const {
  std::lock_guard<std::mutex> lock(op_mu_);
  return op_;
}

void Communicator::fail(const std::string& what) const {
  OpInfo op = current_op();
  std::string msg = fmt::format("{}: {}", describe_op(op.op, op.label, op.seq), what);
  abort_all_communicators(msg);
  throw CommError(msg);
}

std::optional<std::string> Communicator::check_health(std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> lock(op_mu_);
  if (!op_.active) return std::nullopt;
  double waited = std::chrono::duration<double>(now - op_.start).count();
  if (waited < timeout_s_) return std::nullopt;
  return fmt::format("{} timed out after {:g} s", describe_op(op_.op, op_.label, op_.seq), timeout_s_);
}

void Communicator::abort(const std::string& reason) {
  if (aborted_.exchange(true)) return;
  try {
    do_abort(reason);
  } catch (...) {
    // Aborting is best effort: the process is going down anyway.
  }
}

template <typename F>
void Communicator::run_op(const char* op, std::string_view label, F&& body) {
  const uint64_t seq = next_seq();
  if (OpObserver f = g_op_observer.load()) f(name_, op, label, seq);
  if (aborted_.load())
    throw CommError(fmt::format("{}: the communicator was aborted after an earlier failure",
                                describe_op(op, label, seq)));
  {
    std::lock_guard<std::mutex> lock(op_mu_);
    op_ = OpInfo{op, std::string(label), seq, std::chrono::steady_clock::now(), synchronous()};
  }
  try {
    PRIMUS_TRACE_RANGE(op);  // host time of the call (enqueue, or the whole operation on host backends)
    body();
  } catch (const CommError&) {
    std::lock_guard<std::mutex> lock(op_mu_);
    op_.active = false;
    throw;
  } catch (const std::exception& e) {
    {
      std::lock_guard<std::mutex> lock(op_mu_);
      op_.active = false;
    }
    std::string msg = fmt::format("{}: {}", describe_op(op, label, seq), e.what());
    abort_all_communicators(msg);
    throw CommError(msg);
  }
  std::lock_guard<std::mutex> lock(op_mu_);
  op_.active = false;
}

// ---------------------------------------------------------------------------------------------------------
// Argument checks shared by every backend.
namespace {

bool reducible(DType t) {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kBF16 || t == DType::kI32 || t == DType::kI64;
}

}  // namespace

#define PRIMUS_COMM_REQUIRE(cond, ...)                                                                    \
  do {                                                                                                    \
    if (!(cond))                                                                                          \
      throw CommError(fmt::format("{}: {}", describe_op(op, label, seq_ + 1), fmt::format(__VA_ARGS__))); \
  } while (0)

// Host backends also take GPU tensors, staged through host copies (HostStage): several ranks sharing one GPU,
// where NCCL cannot run, still exercise the CUDA path of every layout. NCCL needs GPU tensors.
#define PRIMUS_COMM_CHECK_TENSOR(t, what)                                                               \
  do {                                                                                                  \
    PRIMUS_COMM_REQUIRE((t).defined(), "{} is undefined", what);                                        \
    PRIMUS_COMM_REQUIRE((t).is_contiguous(), "{} must be contiguous ({})", what, (t).describe());       \
    PRIMUS_COMM_REQUIRE((t).device().type == device_type() || device_type() == DeviceType::kCPU,        \
                        "{} is on {} but the {} backend needs {}", what, (t).device().str(), backend(), \
                        "GPU tensors");                                                                 \
  } while (0)

namespace {
// A GPU tensor's host copy for a host backend (the identity for a host tensor or a GPU backend). `read`: copy
// the values in (after the stream's pending work); finish() copies the result back.
class HostStage {
 public:
  HostStage(const Communicator& c, const Tensor& t, const Stream& s, bool read) : t_(t), s_(s) {
    if (t.device().is_cpu() || c.device_type() != DeviceType::kCPU) {
      host_ = t;
      return;
    }
    staged_ = true;
    stream_sync(s);
    host_ = read ? t.to(Stream::cpu()) : Tensor::empty(t.shape(), t.dtype());
  }
  const Tensor& host() const { return host_; }
  void finish() {
    if (!staged_) return;
    t_.copy_from(host_, s_);
    stream_sync(s_);
  }

 private:
  Tensor t_, host_;
  Stream s_;
  bool staged_ = false;
};
}  // namespace

void Communicator::all_reduce(const Tensor& t, ReduceOp rop, const Stream& s, std::string_view label) {
  const char* op = "all_reduce";
  PRIMUS_COMM_CHECK_TENSOR(t, "tensor");
  PRIMUS_COMM_REQUIRE(reducible(t.dtype()), "cannot reduce {} (f32, f64, bf16, i32, i64)",
                      dtype_name(t.dtype()));
  HostStage h(*this, t, s, true);
  run_op(op, label, [&] { do_all_reduce(h.host(), rop, s); });
  h.finish();
}

double Communicator::all_reduce_value(double v, ReduceOp op, const Stream& s, std::string_view label) {
  Tensor t = Tensor::from_vector(std::vector<double>{v}, {1});
  if (s.device.is_cuda()) t = t.to(s);
  all_reduce(t, op, s, label);
  return t.to_vector<double>()[0];
}

void Communicator::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp rop, const Stream& s,
                                  std::string_view label) {
  const char* op = "reduce_scatter";
  PRIMUS_COMM_CHECK_TENSOR(in, "input");
  PRIMUS_COMM_CHECK_TENSOR(out, "output");
  PRIMUS_COMM_REQUIRE(reducible(in.dtype()), "cannot reduce {}", dtype_name(in.dtype()));
  PRIMUS_COMM_REQUIRE(in.dtype() == out.dtype(), "input {} and output {} differ in dtype", in.describe(),
                      out.describe());
  PRIMUS_COMM_REQUIRE(in.numel() == out.numel() * size_,
                      "input has {} elements, output {}: need input = {} x output", in.numel(), out.numel(),
                      size_);
  HostStage hi(*this, in, s, true), ho(*this, out, s, false);
  run_op(op, label, [&] { do_reduce_scatter(hi.host(), ho.host(), rop, s); });
  ho.finish();
}

void Communicator::all_gather(const Tensor& in, const Tensor& out, const Stream& s, std::string_view label) {
  const char* op = "all_gather";
  PRIMUS_COMM_CHECK_TENSOR(in, "input");
  PRIMUS_COMM_CHECK_TENSOR(out, "output");
  PRIMUS_COMM_REQUIRE(in.dtype() == out.dtype(), "input {} and output {} differ in dtype", in.describe(),
                      out.describe());
  PRIMUS_COMM_REQUIRE(out.numel() == in.numel() * size_,
                      "input has {} elements, output {}: need output = {} x input", in.numel(), out.numel(),
                      size_);
  HostStage hi(*this, in, s, true), ho(*this, out, s, false);
  run_op(op, label, [&] { do_all_gather(hi.host(), ho.host(), s); });
  ho.finish();
}

void Communicator::all_to_all(const Tensor& in, const Tensor& out, const Stream& s, std::string_view label) {
  const char* op = "all_to_all";
  PRIMUS_COMM_CHECK_TENSOR(in, "input");
  PRIMUS_COMM_CHECK_TENSOR(out, "output");
  PRIMUS_COMM_REQUIRE(in.dtype() == out.dtype() && in.numel() == out.numel(),
                      "input {} and output {} must match in dtype and size", in.describe(), out.describe());
  PRIMUS_COMM_REQUIRE(in.numel() % size_ == 0, "{} elements do not split into {} equal chunks", in.numel(),
                      size_);
  std::vector<int64_t> counts(size_, in.numel() / size_);
  HostStage hi(*this, in, s, true), ho(*this, out, s, true);
  run_op(op, label, [&] { do_all_to_all_v(hi.host(), counts, ho.host(), counts, s); });
  ho.finish();
}

void Communicator::all_to_all_v(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                                const std::vector<int64_t>& recv_counts, const Stream& s,
                                std::string_view label) {
  const char* op = "all_to_all_v";
  PRIMUS_COMM_CHECK_TENSOR(in, "input");
  PRIMUS_COMM_CHECK_TENSOR(out, "output");
  PRIMUS_COMM_REQUIRE(in.dtype() == out.dtype(), "input and output differ in dtype");
  PRIMUS_COMM_REQUIRE(
      static_cast<int>(send_counts.size()) == size_ && static_cast<int>(recv_counts.size()) == size_,
      "need {} send and receive counts, got {} and {}", size_, send_counts.size(), recv_counts.size());
  int64_t ns = 0, nr = 0;
  for (int i = 0; i < size_; ++i) {
    PRIMUS_COMM_REQUIRE(send_counts[i] >= 0 && recv_counts[i] >= 0, "negative count for rank {}", i);
    ns += send_counts[i];
    nr += recv_counts[i];
  }
  PRIMUS_COMM_REQUIRE(ns <= in.numel() && nr <= out.numel(),
                      "counts need {} input / {} output elements, tensors have {} / {}", ns, nr, in.numel(),
                      out.numel());
  // The output is read in too: elements past the received counts keep their values.
  HostStage hi(*this, in, s, true), ho(*this, out, s, true);
  run_op(op, label, [&] { do_all_to_all_v(hi.host(), send_counts, ho.host(), recv_counts, s); });
  ho.finish();
}

void Communicator::broadcast(const Tensor& t, int root, const Stream& s, std::string_view label) {
  const char* op = "broadcast";
  PRIMUS_COMM_CHECK_TENSOR(t, "tensor");
  PRIMUS_COMM_REQUIRE(root >= 0 && root < size_, "root {} is not a rank of the group (size {})", root, size_);
  HostStage h(*this, t, s, true);
  run_op(op, label, [&] { do_broadcast(h.host(), root, s); });
  h.finish();
}

void Communicator::send(const Tensor& t, int peer, const Stream& s, std::string_view label) {
  const char* op = "send";
  PRIMUS_COMM_CHECK_TENSOR(t, "tensor");
  PRIMUS_COMM_REQUIRE(peer >= 0 && peer < size_ && peer != rank_,
                      "peer {} is not another rank of the group (size {})", peer, size_);
  HostStage h(*this, t, s, true);
  run_op(op, label, [&] { do_send(h.host(), peer, s); });
}

void Communicator::recv(const Tensor& t, int peer, const Stream& s, std::string_view label) {
  const char* op = "recv";
  PRIMUS_COMM_CHECK_TENSOR(t, "tensor");
  PRIMUS_COMM_REQUIRE(peer >= 0 && peer < size_ && peer != rank_,
                      "peer {} is not another rank of the group (size {})", peer, size_);
  HostStage h(*this, t, s, false);
  run_op(op, label, [&] { do_recv(h.host(), peer, s); });
  h.finish();
}

void Communicator::barrier(std::string_view label) {
  run_op("barrier", label, [&] { do_barrier(); });
}

std::unique_ptr<Communicator> Communicator::split(int color, int key, const std::string& name,
                                                  bool low_latency) {
  std::unique_ptr<Communicator> out;
  run_op("split", name, [&] { out = do_split(color < 0 ? -1 : color, key, name, low_latency); });
  return out;
}

#undef PRIMUS_COMM_CHECK_TENSOR
#undef PRIMUS_COMM_REQUIRE

}  // namespace primus::comm
