#include "comm/host_communicator.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace primus::comm {

namespace {

template <typename T, typename Acc, typename Load, typename Store>
void reduce_typed(ReduceOp op, const std::vector<const void*>& srcs, void* dst, int64_t count, int divisor,
                  Load load, Store store) {
  const int n = static_cast<int>(srcs.size());
  T* out = static_cast<T*>(dst);
#pragma omp parallel for schedule(static) if (count > 65536)
  for (int64_t i = 0; i < count; ++i) {
    Acc acc = load(static_cast<const T*>(srcs[0])[i]);
    for (int k = 1; k < n; ++k) {
      Acc v = load(static_cast<const T*>(srcs[k])[i]);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          acc = acc + v;
          break;
        case ReduceOp::kMax:
          acc = v > acc ? v : acc;
          break;
        case ReduceOp::kMin:
          acc = v < acc ? v : acc;
          break;
      }
    }
    if (op == ReduceOp::kAvg) acc = acc / static_cast<Acc>(divisor);
    out[i] = store(acc);
  }
}

}  // namespace

void reduce_in_order(DType dt, ReduceOp op, const std::vector<const void*>& srcs, void* dst, int64_t count,
                     int divisor) {
  auto same = [](auto v) { return v; };
  switch (dt) {
    case DType::kF32:
      reduce_typed<float, float>(op, srcs, dst, count, divisor, same, same);
      return;
    case DType::kF64:
      reduce_typed<double, double>(op, srcs, dst, count, divisor, same, same);
      return;
    case DType::kI32:
      reduce_typed<int32_t, int32_t>(op, srcs, dst, count, divisor, same, same);
      return;
    case DType::kI64:
      reduce_typed<int64_t, int64_t>(op, srcs, dst, count, divisor, same, same);
      return;
    case DType::kBF16:
      // Accumulate in f32 and round once: what a single process summing bf16 tensors into an f32 buffer and
      // casting the result back computes.
      reduce_typed<bf16_t, float>(
          op, srcs, dst, count, divisor, [](bf16_t v) { return bf16_to_float(v); },
          [](float v) { return float_to_bf16(v); });
      return;
    default:
      PRIMUS_FAIL("reduce_in_order: unsupported dtype {}", dtype_name(dt));
  }
}

void HostCommunicator::reduce_scatter_v(const char* in, const std::vector<int64_t>& counts, char* out,
                                        DType dt, ReduceOp op) {
  const int n = size(), r = rank();
  const size_t es = dtype_size(dt);
  std::vector<int64_t> offsets(n + 1, 0);
  for (int j = 0; j < n; ++j) offsets[j + 1] = offsets[j] + counts[j];
  const size_t mine = static_cast<size_t>(counts[r]) * es;
  // One receive buffer per peer: the sum must see the chunks in rank order, not in arrival order.
  std::vector<char> recv(mine * static_cast<size_t>(n - 1));
  std::vector<const void*> srcs(n);
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n, from = (r - s + n) % n;
    char* slot = recv.data() + mine * static_cast<size_t>(s - 1);
    exchange(to, in + offsets[to] * es, static_cast<size_t>(counts[to]) * es, from, slot, mine);
    srcs[from] = slot;
  }
  srcs[r] = in + offsets[r] * es;
  reduce_in_order(dt, op, srcs, out, counts[r], n);
}

void HostCommunicator::all_gather_v(const char* mine, const std::vector<int64_t>& counts, char* out,
                                    DType dt) {
  const int n = size(), r = rank();
  const size_t es = dtype_size(dt);
  std::vector<int64_t> offsets(n + 1, 0);
  for (int j = 0; j < n; ++j) offsets[j + 1] = offsets[j] + counts[j];
  const size_t my_bytes = static_cast<size_t>(counts[r]) * es;
  if (out + offsets[r] * es != mine) std::memmove(out + offsets[r] * es, mine, my_bytes);
  const char* src = out + offsets[r] * es;
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n, from = (r - s + n) % n;
    exchange(to, src, my_bytes, from, out + offsets[from] * es, static_cast<size_t>(counts[from]) * es);
  }
}

void HostCommunicator::do_all_reduce(const Tensor& t, ReduceOp op, const Stream&) {
  const int n = size();
  if (n == 1) {
    if (op == ReduceOp::kAvg) reduce_in_order(t.dtype(), op, {t.data_ptr()}, t.data_ptr(), t.numel(), 1);
    return;
  }
  const int64_t count = t.numel();
  std::vector<int64_t> counts(n, count / n);
  for (int j = 0; j < count % n; ++j) counts[j] += 1;
  const size_t es = dtype_size(t.dtype());
  std::vector<char> mine(static_cast<size_t>(counts[rank()]) * es);
  char* base = static_cast<char*>(t.data_ptr());
  reduce_scatter_v(base, counts, mine.data(), t.dtype(), op);
  all_gather_v(mine.data(), counts, base, t.dtype());
}

void HostCommunicator::do_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, const Stream&) {
  std::vector<int64_t> counts(size(), out.numel());
  if (size() == 1) {
    reduce_in_order(in.dtype(), op, {in.data_ptr()}, out.data_ptr(), out.numel(), 1);
    return;
  }
  reduce_scatter_v(static_cast<const char*>(in.data_ptr()), counts, static_cast<char*>(out.data_ptr()),
                   in.dtype(), op);
}

void HostCommunicator::do_all_gather(const Tensor& in, const Tensor& out, const Stream&) {
  std::vector<int64_t> counts(size(), in.numel());
  all_gather_v(static_cast<const char*>(in.data_ptr()), counts, static_cast<char*>(out.data_ptr()),
               in.dtype());
}

void HostCommunicator::do_all_to_all_v(const Tensor& in, const std::vector<int64_t>& send_counts,
                                       const Tensor& out, const std::vector<int64_t>& recv_counts,
                                       const Stream&) {
  const int n = size(), r = rank();
  const size_t es = dtype_size(in.dtype());
  std::vector<int64_t> so(n + 1, 0), ro(n + 1, 0);
  for (int j = 0; j < n; ++j) {
    so[j + 1] = so[j] + send_counts[j];
    ro[j + 1] = ro[j] + recv_counts[j];
  }
  const char* src = static_cast<const char*>(in.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  std::memmove(dst + ro[r] * es, src + so[r] * es,
               static_cast<size_t>(std::min(send_counts[r], recv_counts[r])) * es);
  if (send_counts[r] != recv_counts[r])
    fail(fmt::format("rank sends {} elements to itself but expects {}", send_counts[r], recv_counts[r]));
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n, from = (r - s + n) % n;
    exchange(to, src + so[to] * es, static_cast<size_t>(send_counts[to]) * es, from, dst + ro[from] * es,
             static_cast<size_t>(recv_counts[from]) * es);
  }
}

void HostCommunicator::do_broadcast(const Tensor& t, int root, const Stream&) {
  const int n = size();
  const int vr = (rank() - root + n) % n;  // rank relative to the root
  const size_t bytes = t.nbytes();
  // Binomial tree: in the round of step m, ranks below m (relative to the root) send to rank + m.
  bool have = vr == 0;
  for (int m = 1; m < n; m <<= 1) {
    if (!have && vr < 2 * m && vr >= m) {
      exchange(-1, nullptr, 0, (vr - m + root) % n, t.data_ptr(), bytes);
      have = true;
    } else if (have && vr < m && vr + m < n) {
      exchange((vr + m + root) % n, t.data_ptr(), bytes, -1, nullptr, 0);
    }
  }
}

void HostCommunicator::do_send(const Tensor& t, int peer, const Stream&) {
  exchange(peer, t.data_ptr(), t.nbytes(), -1, nullptr, 0);
}

void HostCommunicator::do_recv(const Tensor& t, int peer, const Stream&) {
  exchange(-1, nullptr, 0, peer, t.data_ptr(), t.nbytes());
}

void HostCommunicator::do_barrier() {
  const int n = size(), r = rank();
  char out = 1, in = 0;
  for (int k = 1; k < n; k <<= 1) exchange((r + k) % n, &out, 1, (r - k + n) % n, &in, 1);
}

std::vector<std::pair<int, int>> HostCommunicator::gather_pairs(int a, int b) {
  const int n = size();
  std::vector<int32_t> mine = {a, b};
  std::vector<int32_t> all(2 * static_cast<size_t>(n));
  std::vector<int64_t> counts(n, 2);
  all_gather_v(reinterpret_cast<const char*>(mine.data()), counts, reinterpret_cast<char*>(all.data()),
               DType::kI32);
  std::vector<std::pair<int, int>> out(n);
  for (int i = 0; i < n; ++i) out[i] = {all[2 * i], all[2 * i + 1]};
  return out;
}

}  // namespace primus::comm
