#include "parallel/expert_dispatch.h"

#include "core/error.h"

namespace primus::parallel {

namespace {
// A host i32 vector as a tensor on `s`'s device.
Tensor index_tensor(const std::vector<int32_t>& v, const Stream& s) {
  Tensor t = Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
  return s.device.is_cpu() ? t : t.to(s);
}

std::vector<int64_t> times(const std::vector<int64_t>& rows, int64_t d) {
  std::vector<int64_t> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) out[i] = rows[i] * d;
  return out;
}

Stream comm_side(const comm::Communicator& ep, const Stream& s) {
  return ep.device_type() == DeviceType::kCPU ? Stream::cpu() : s;
}
}  // namespace

ExpertDispatch expert_dispatch_plan(const std::vector<int64_t>& rows, comm::Communicator& ep,
                                    const Stream& s) {
  const int P = ep.size();
  const int64_t E = static_cast<int64_t>(rows.size());
  PRIMUS_CHECK(E % P == 0, "expert dispatch: {} experts over {} expert-parallel ranks", E, P);
  const int64_t El = E / P;
  ExpertDispatch p;
  p.send_rows.assign(P, 0);
  for (int j = 0; j < P; ++j)
    for (int64_t e = 0; e < El; ++e) p.send_rows[j] += rows[j * El + e];
  for (int64_t r : p.send_rows) p.sent_rows += r;

  // Block sizes: chunk j of `mine` (my rows for peer j's experts) goes to peer j.
  const Stream cs = comm_side(ep, s);
  Tensor mine = Tensor::from_vector(rows, {E});
  if (!cs.device.is_cpu()) mine = mine.to(cs);
  Tensor theirs = Tensor::empty({E}, DType::kI64, cs);
  ep.all_to_all(mine, theirs, cs, "expert block sizes");
  const std::vector<int64_t> from = theirs.to_vector<int64_t>();  // [peer][local expert]
  for (int64_t r : from) PRIMUS_CHECK(r >= 0, "expert dispatch: a peer sent a negative block size {}", r);

  p.recv_rows.assign(P, 0);
  p.local_rows.assign(El, 0);
  std::vector<int64_t> block_start(static_cast<size_t>(E));  // first received row of (peer, local expert)
  int64_t at = 0;
  for (int i = 0; i < P; ++i)
    for (int64_t e = 0; e < El; ++e) {
      const int64_t n = from[i * El + e];
      block_start[i * El + e] = at;
      at += n;
      p.recv_rows[i] += n;
      p.local_rows[e] += n;
    }
  p.recv_total = at;

  // The sort: output row r (local-expert-major) takes received row row_src[r] (one slot per row: k = 1).
  std::vector<int32_t> row_src(static_cast<size_t>(at)), slot_row(static_cast<size_t>(at));
  std::vector<int32_t> counts(static_cast<size_t>(El)), offsets(static_cast<size_t>(El + 1), 0);
  int64_t out = 0;
  for (int64_t e = 0; e < El; ++e) {
    offsets[e] = static_cast<int32_t>(out);
    counts[e] = static_cast<int32_t>(p.local_rows[e]);
    for (int i = 0; i < P; ++i)
      for (int64_t j = 0; j < from[i * El + e]; ++j) {
        const int64_t src = block_start[i * El + e] + j;
        row_src[out] = static_cast<int32_t>(src);
        slot_row[src] = static_cast<int32_t>(out);
        ++out;
      }
  }
  offsets[El] = static_cast<int32_t>(out);
  ops::MoePermutePlan& q = p.sort;
  q.num_tokens = at;
  q.topk = 1;
  q.num_experts = El;
  q.num_rows = at;
  q.capacity = 0;
  q.counts = index_tensor(counts, s);
  q.offsets = index_tensor(offsets, s);
  q.row_src = index_tensor(row_src, s);
  q.slot_row = index_tensor(slot_row, s);
  return p;
}

void expert_dispatch(const ExpertDispatch& p, const Tensor& x, Tensor& x_local, comm::Communicator& ep,
                     const Stream& s, const char* label) {
  const int64_t d = x.size(1);
  PRIMUS_CHECK(x.size(0) >= p.sent_rows && x_local.size(0) == p.recv_total && x_local.size(1) == d,
               "expert dispatch '{}': {} rows to send from {}, {} to receive into {}", label, p.sent_rows,
               x.describe(), p.recv_total, x_local.describe());
  Tensor recv = Tensor::empty({p.recv_total, d}, x.dtype(), s);
  ep.all_to_all_v(x.slice(0, p.sent_rows), times(p.send_rows, d), recv, times(p.recv_rows, d), s, label);
  if (p.recv_total > 0) ops::moe_permute(recv, p.sort, x_local, s);
}

void expert_combine(const ExpertDispatch& p, const Tensor& y_local, Tensor& y, comm::Communicator& ep,
                    const Stream& s, const char* label) {
  const int64_t d = y_local.size(1);
  PRIMUS_CHECK(y_local.size(0) == p.recv_total && y.size(0) >= p.sent_rows && y.size(1) == d,
               "expert combine '{}': {} rows to return from {}, {} to receive into {}", label, p.recv_total,
               y_local.describe(), p.sent_rows, y.describe());
  Tensor back = Tensor::empty({p.recv_total, d}, y_local.dtype(), s);
  if (p.recv_total > 0) ops::moe_permute_backward(y_local, p.sort, back, s);
  Tensor dst = y.slice(0, p.sent_rows);
  ep.all_to_all_v(back, times(p.recv_rows, d), dst, times(p.send_rows, d), s, label);
}

}  // namespace primus::parallel
