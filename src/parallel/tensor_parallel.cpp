#include "parallel/tensor_parallel.h"

#include <algorithm>

#include "core/env.h"
#include "core/error.h"
#include "core/stream_events.h"
#include "ops/gemm.h"
#include "ops/optimizer.h"

namespace primus::parallel {

TensorParallel::TensorParallel(comm::Communicator& tp, bool sequence_parallel, int kv_replicas)
    : tp_(tp), sp_(sequence_parallel && tp.size() > 1), kv_replicas_(kv_replicas) {
  PRIMUS_CHECK(kv_replicas >= 1 && tp.size() % kv_replicas == 0,
               "{} ranks sharing a kv head in a tp group of {}", kv_replicas, tp.size());
  if (kv_replicas > 1)
    kv_group_ = tp.split(tp.rank() / kv_replicas, tp.rank(), tp.name() + ".kv", /*low_latency=*/true);
}

TensorParallel::~TensorParallel() = default;

int64_t TensorParallel::local_rows(int64_t rows) const {
  if (!sp_) return rows;
  PRIMUS_CHECK(rows % size() == 0,
               "sequence parallelism: {} tokens do not split over {} tensor-parallel ranks", rows, size());
  return rows / size();
}

Tensor TensorParallel::gather_rows(const Tensor& x, const Stream& s, const char* label) const {
  if (!sp_) return x;
  PRIMUS_CHECK(x.ndim() == 2, "gather_rows: expected [rows, d], got {}", x.describe());
  Tensor out = Tensor::empty({x.size(0) * size(), x.size(1)}, x.dtype(), s);
  tp_.all_gather(x.flatten(), out.flatten(), s, label);
  return out;
}

Tensor TensorParallel::sum_rows(const Tensor& partial, const Stream& s, const char* label) const {
  if (!sp_) {
    tp_.all_reduce(partial, comm::ReduceOp::kSum, s, label);
    return partial;
  }
  PRIMUS_CHECK(partial.ndim() == 2, "sum_rows: expected [rows, d], got {}", partial.describe());
  Tensor out = Tensor::empty({local_rows(partial.size(0)), partial.size(1)}, partial.dtype(), s);
  tp_.reduce_scatter(partial.flatten(), out.flatten(), comm::ReduceOp::kSum, s, label);
  return out;
}

namespace {

// While a collective is on the wire, the GEMMs launched beside it may leave `sms` SMs free for it: cuBLAS's
// persistent kernels otherwise take every SM, and the collective's kernel (launched a moment later, on
// another stream) gets SMs only as the GEMM's last blocks retire. Measured on 2 x H200 (2026-11-28,
// docs/performance.md) the reservation cost the GEMMs more than the collectives gained, so it is off by
// default (PRIMUS_TP_OVERLAP_SMS sets it). The SM target does not change a GEMM's algorithm or results.
class GemmsBesideCollective {
 public:
  GemmsBesideCollective(const Stream& s, int sms)
      : s_(s), before_(sms > 0 ? ops::reserve_gemm_sms(s, sms) : -1) {}
  ~GemmsBesideCollective() {
    if (before_ >= 0) ops::reserve_gemm_sms(s_, before_);
  }
  GemmsBesideCollective(const GemmsBesideCollective&) = delete;
  GemmsBesideCollective& operator=(const GemmsBesideCollective&) = delete;

 private:
  Stream s_;
  int before_;  // the reservation to restore; -1: none made
};

}  // namespace

void TensorParallel::set_overlap(bool on) {
  PRIMUS_CHECK(!on || sp_, "tp_comm_overlap needs sequence parallelism (as Megatron)");
  overlap_ = on;
  // SMs the GEMMs leave to a collective running beside them (PRIMUS_TP_OVERLAP_SMS, a tuning knob).
  if (on) overlap_sms_ = env_int("PRIMUS_TP_OVERLAP_SMS", 0, 0, 1024);
}

const Stream& TensorParallel::comm_stream(const Stream& compute) const {
  // A host backend (tcp / mpi, GPU tensors staged through the host) runs its collectives synchronously
  // on the caller's stream: nothing to overlap with, so they stay there.
  if (tp_.device_type() != DeviceType::kCUDA || compute.device.is_cpu()) return compute;
  if (!comm_stream_made_) {
    comm_stream_ = make_comm_stream(compute);
    comm_stream_made_ = true;
  }
  return comm_stream_;
}

Tensor TensorParallel::gather_rows_overlapped(const Tensor& x, const Stream& s, const char* label,
                                              const RowsFn& consume) const {
  PRIMUS_CHECK(sp_ && x.ndim() == 2, "gather_rows_overlapped: expected [rows, d] under SP, got {}",
               x.describe());
  const int64_t nl = x.size(0), n = nl * size(), me = rank();
  Tensor out = Tensor::empty({n, x.size(1)}, x.dtype(), s);
  const Stream& c = comm_stream(s);
  const int beside_sms = c.handle != s.handle ? overlap_sms_ : 0;  // nothing runs beside a host collective
  stream_wait(c, StreamEvent::record(s));                          // x (and out's memory) are ready
  tp_.all_gather(x.flatten(), out.flatten(), c, label);
  const std::shared_ptr<StreamEvent> gathered = StreamEvent::record(c);
  {
    const GemmsBesideCollective beside(s, beside_sms);
    consume(me * nl, (me + 1) * nl, x);  // under the all-gather
  }
  stream_wait(s, gathered);
  // The other ranks' rows: those before this rank's and those after, each one contiguous range.
  if (me > 0) consume(0, me * nl, out.slice(0, me * nl));
  if (me + 1 < size()) consume((me + 1) * nl, n, out.slice((me + 1) * nl, n));
  return out;
}

Tensor TensorParallel::sum_rows_overlapped(int64_t n, int64_t cols, DType dtype, const Stream& s,
                                           const char* label, const RowsFn& produce,
                                           const std::function<void()>& under_last) const {
  PRIMUS_CHECK(sp_, "sum_rows_overlapped without sequence parallelism");
  const int64_t nl = local_rows(n), P = size();
  const int64_t k = std::max<int64_t>(1, std::min<int64_t>(overlap_chunks_, nl));
  Tensor mine = Tensor::empty({nl, cols}, dtype, s);
  const Stream& c = comm_stream(s);
  const int beside_sms = c.handle != s.handle ? overlap_sms_ : 0;
  std::vector<Tensor> slices;  // alive until the comm stream is joined below
  for (int64_t i = 0; i < k; ++i) {
    const int64_t a = i * nl / k, b = (i + 1) * nl / k, rows = b - a;
    // Slice i of every rank's rows, rank-major: what a reduce-scatter hands back as rows [a, b) of mine.
    Tensor slice = Tensor::empty({P * rows, cols}, dtype, s);
    {  // beside the previous slice's reduce-scatter (the first slice has none)
      const GemmsBesideCollective beside(s, i > 0 ? beside_sms : 0);
      for (int64_t j = 0; j < P; ++j) produce(j * nl + a, j * nl + b, slice.slice(j * rows, (j + 1) * rows));
    }
    stream_wait(c, StreamEvent::record(s));
    tp_.reduce_scatter(slice.flatten(), mine.slice(a, b).flatten(), comm::ReduceOp::kSum, c, label);
    slices.push_back(std::move(slice));
  }
  if (under_last) {
    const GemmsBesideCollective beside(s, beside_sms);
    under_last();
  }
  stream_wait(s, StreamEvent::record(c));
  return mine;
}

TensorParallel::GradView TensorParallel::whole_grads(ParamStore& params) {
  GradView g;
  g.grad = params.grad_flat();
  for (const ParamRegion& r : params.regions()) {
    g.first.push_back(r.begin);
    g.len.push_back(r.end - r.begin);
    g.offset.push_back(r.begin);
  }
  return g;
}

std::vector<std::pair<int64_t, int64_t>> TensorParallel::pieces(const ParamStore& params, const GradView& g,
                                                                Pieces which) const {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const ParamEntry& e : params.entries()) {
    int64_t first = 0, count = e.numel;
    if (which == Pieces::kWhole) {
      if (!e.slice.whole()) continue;
    } else {
      if (e.tp_sum.count == 0 || e.tp_sum.kv_group != (which == Pieces::kKvSum)) continue;
      first = e.tp_sum.first;
      count = e.tp_sum.count;
    }
    const int r = e.region;
    const int64_t lo = std::max(e.offset + first, g.first[r]);
    const int64_t hi = std::min(e.offset + first + count, g.first[r] + g.len[r]);
    if (hi > lo) out.emplace_back(g.offset[r] + (lo - g.first[r]), hi - lo);
  }
  return out;
}

void TensorParallel::sum_pieces(const std::vector<std::pair<int64_t, int64_t>>& pieces, const Tensor& grad,
                                comm::Communicator& group, const Stream& s, const char* label) const {
  // Every rank of a group holds the same layout, so all agree on whether there is anything to sum.
  int64_t total = 0;
  for (const auto& p : pieces) total += p.second;
  if (total == 0) return;
  // One all-reduce for all of them: packed, summed, unpacked (a few vectors per layer).
  Tensor packed = Tensor::empty({total}, grad.dtype(), s);
  int64_t at = 0;
  for (const auto& [off, len] : pieces) {
    packed.slice(at, at + len).copy_from(grad.slice(off, off + len), s);
    at += len;
  }
  group.all_reduce(packed, comm::ReduceOp::kSum, s, label);
  at = 0;
  for (const auto& [off, len] : pieces) {
    grad.slice(off, off + len).copy_from(packed.slice(at, at + len), s);
    at += len;
  }
}

void TensorParallel::sum_partial_grads(const ParamStore& params, const GradView& g, const Stream& s) const {
  sum_pieces(pieces(params, g, Pieces::kTpSum), g.grad, tp_, s, "tp partial gradients");
  if (kv_group_)
    sum_pieces(pieces(params, g, Pieces::kKvSum), g.grad, *kv_group_, s, "tp shared kv gradients");
}

double TensorParallel::norm_contribution(const ParamStore& params, const GradView& g, const Stream& s) const {
  // Three sums of squares in one buffer, read back once: everything, whole entries, replicated kv rows.
  Tensor sums = Tensor::zeros({3}, DType::kF32, s);
  Tensor all = sums.slice(0, 1), whole = sums.slice(1, 2), kv = sums.slice(2, 3);
  ops::sum_squares(g.grad, all, /*accumulate=*/false, s);
  for (const auto& [off, len] : pieces(params, g, Pieces::kWhole))
    ops::sum_squares(g.grad.slice(off, off + len), whole, /*accumulate=*/true, s);
  for (const auto& [off, len] : pieces(params, g, Pieces::kKvSum))
    ops::sum_squares(g.grad.slice(off, off + len), kv, /*accumulate=*/true, s);
  const std::vector<double> v = sums.to_vector<double>();
  const double split = std::max(0.0, v[0] - v[1] - v[2]);
  return split + v[1] / size() + v[2] / kv_replicas_;
}

}  // namespace primus::parallel
