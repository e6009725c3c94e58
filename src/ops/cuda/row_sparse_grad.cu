// The row-sparse embedding gradient on the GPU (ops/row_sparse_grad.h): slot bookkeeping, densification, and
// AdamW over a span of the table with the gradient read through the slot map.
//
// Slot assignment (launch_row_sparse_assign): the backward's token pass marks rows without a slot (-1 -> -2);
// one block of 1024 threads then walks slot_of in row order, 32 rows per warp step (one coalesced load and a
// ballot), and gives the marked rows consecutive slots after g.count in ascending row order: the CPU
// reference's assignment, with no host sync. Running out of slots cannot throw in a kernel: the block records
// it in a pinned, host-mapped word, gives no slot past the capacity, and the next call on the host throws.
//
// AdamW (adamw_step_sparse / _split_sparse): the kernels of adam_kernels.cuh that optimizer.cu runs, with the
// same vector widths for the state arrays; only the gradient source differs (SparseGradSource): element e =
// first + i of the table reads row e / D's slot, zero without one or past V x D. The division costs one
// multiply-shift per thread (RowDiv), not a 64-bit divide per element, since these kernels are bound by
// memory traffic.
#include "ops/cuda/adam_kernels.cuh"
#include "ops/cuda/adam_math.cuh"
#include "ops/cuda/kernel_utils.cuh"

#include <algorithm>
#include <bit>
#include <initializer_list>
#include <type_traits>

#include "ops/cuda/row_sparse_grad_cuda.h"

namespace primus::ops::cuda {
namespace {

using detail::bf16;
using detail::load_vec;
using detail::store_vec;
using detail::Vec;

// ---------------------------------------------------------------------------------------------------------------
// The gradient of a table element read through the slot map

// e -> e / d. For e < 2^31 and d < 2^31: q = (e * magic) >> shift with magic = ceil(2^shift / d),
// shift = 31 + ceil(log2 d), exact for every such e (the rounding error stays below 1 / d); shift 0 means
// d >= 2^31 and a plain division.
struct RowDiv {
  int64_t d;
  uint64_t magic;
  int shift;
};

RowDiv make_row_div(int64_t d) {
  RowDiv q{d, 0, 0};
  if (d < (int64_t{1} << 31)) {
    const auto ud = static_cast<uint64_t>(d);
    q.shift = 31 + std::bit_width(ud - 1);
    q.magic = ((uint64_t{1} << q.shift) + ud - 1) / ud;
  }
  return q;
}

__device__ __forceinline__ int64_t row_index(int64_t e, const RowDiv& q) {
  if (q.shift != 0 && e < (int64_t{1} << 31))
    return static_cast<int64_t>((static_cast<uint64_t>(e) * q.magic) >> q.shift);
  return e / q.d;
}

struct SparseView {
  const float* rows;     // [C, D]
  const int32_t* slots;  // slot_of [V]
  int64_t vocab;
  RowDiv div;
};

__device__ __forceinline__ int32_t slot_at(const SparseView& g, int64_t r) {
  return r < g.vocab ? __ldg(g.slots + r) : -1;
}

// The gradient of table elements [e0, e0 + N). kVecRow: the N elements lie in one row at a column that is a
// multiple of N and rows is 16-byte aligned (D % N == 0, e0 % N == 0), so the slot's elements are one load.
template <int N, bool kVecRow>
__device__ __forceinline__ Vec<float, N> sparse_grad(const SparseView& g, int64_t e0) {
  const int64_t d = g.div.d;
  int64_t r = row_index(e0, g.div);
  int64_t c = e0 - r * d;
  int32_t slot = slot_at(g, r);
  Vec<float, N> out;
  if constexpr (kVecRow) {
    if (slot >= 0) {
      out = load_vec<float, N>(g.rows + static_cast<int64_t>(slot) * d + c);
    } else {
#pragma unroll
      for (int k = 0; k < N; ++k) out.v[k] = 0.f;
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      out.v[k] = slot >= 0 ? __ldg(g.rows + static_cast<int64_t>(slot) * d + c) : 0.f;
      if (k + 1 < N && ++c == d) {  // the next element starts row r + 1
        c = 0;
        slot = slot_at(g, ++r);
      }
    }
  }
  return out;
}

// The gradient source of the AdamW kernels (adam_kernels.cuh): span element i is table element first + i.
template <bool kVecRow>
struct SparseGradSource {
  SparseView g;
  int64_t first;
  template <int N>
  __device__ __forceinline__ Vec<float, N> load(int64_t i0) const {
    return sparse_grad<N, kVecRow>(g, first + i0);
  }
  __device__ __forceinline__ float at(int64_t i) const { return sparse_grad<1, false>(g, first + i).v[0]; }
};

// ---------------------------------------------------------------------------------------------------------------
// Densification and clearing

template <int N, bool kVecRow>
__global__ void to_dense_kernel(SparseView g, float* __restrict__ dense, int64_t n) {
  const int64_t i0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  if (i0 >= n) return;
  if (i0 + N <= n) {
    store_vec<float, N>(dense + i0, sparse_grad<N, kVecRow>(g, i0));
  } else {
    for (int64_t i = i0; i < n; ++i) dense[i] = sparse_grad<1, false>(g, i).v[0];
  }
}

// Frees the slots in use and zeroes their rows, with the count read here on the device (the caller may be a
// background stream that must not wait for the host). Grid-stride: the grid is sized for the capacity, the
// work for the count. Rows of slots [0, count) are the prefix rows[0, count * d) of the [C, D] buffer.
__global__ void clear_kernel(float* __restrict__ rows, int32_t* __restrict__ slot_of,
                             const int32_t* __restrict__ row_of, const int32_t* __restrict__ count, int64_t d,
                             int64_t capacity, int64_t vocab, bool vec) {
  const int64_t c = *count;
  const int64_t used = c < 0 ? 0 : detail::min64(c, capacity);
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = tid; k < used; k += stride) {
    const int32_t r = row_of[k];
    if (r >= 0 && r < vocab) slot_of[r] = -1;
  }
  const int64_t len = used * d;
  int64_t done = 0;
  if (vec) {
    const Vec<float, 4> zero{};
    const int64_t quads = len / 4;
    for (int64_t q = tid; q < quads; q += stride) store_vec<float, 4>(rows + 4 * q, zero);
    done = quads * 4;
  }
  for (int64_t i = done + tid; i < len; i += stride) rows[i] = 0.f;
}

// row_sparse_reserve's marks: rows outside [0, vocab) are skipped (the caller's list is built on the host
// from checked token ids). Several threads may mark one row: they all store -2.
__global__ void mark_rows_kernel(const int32_t* __restrict__ rows, int64_t n, int32_t* __restrict__ slot_of,
                                 int64_t vocab) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int32_t r = rows[i];
  if (r >= 0 && r < vocab && slot_of[r] == -1) slot_of[r] = -2;
}

// launch_row_sparse_assign's block: 32 warps; warp w owns rows [tile + 1024 w, tile + 1024 (w + 1)) of each
// tile of 32768 rows and reads them 32 at a time (lane l: row + l), so every load is coalesced and a warp's
// marked rows come out of a ballot in row order. Pass 1 counts them per warp (lane k keeps step k's ballot);
// the warp totals are scanned in warp order; pass 2 hands out the slots.
constexpr int kAssignThreads = 1024;
constexpr int kAssignWarps = kAssignThreads / 32;
constexpr int64_t kAssignTile = int64_t{kAssignThreads} * 32;

__device__ __forceinline__ int warp_sum_int(int x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__global__ void __launch_bounds__(kAssignThreads)
    assign_kernel(int32_t* __restrict__ slot_of, int32_t* __restrict__ row_of, int32_t* __restrict__ count,
                  int64_t vocab, int64_t capacity, int* word) {
  __shared__ int warp_totals[kAssignWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t start = *count;  // nothing else writes count before this block's end
  int64_t base = start;          // the first slot of the current tile
  for (int64_t tile = 0; tile < vocab; tile += kAssignTile) {
    const int64_t seg = tile + int64_t{warp} * 1024;
    uint32_t my_mask = 0;
    int total = 0;
    int32_t vals[32];
#pragma unroll
    for (int k = 0; k < 32; ++k) {  // all loads first: one memory latency per tile, not 32
      const int64_t r = seg + k * 32 + lane;
      vals[k] = r < vocab ? slot_of[r] : -1;
    }
#pragma unroll
    for (int k = 0; k < 32; ++k) {
      const uint32_t b = __ballot_sync(0xffffffffu, vals[k] == -2);
      if (lane == k) my_mask = b;
      total += __popc(b);
    }
    if (lane == 0) warp_totals[warp] = total;
    __syncthreads();
    const int t = warp_totals[lane];
    const int before = warp_sum_int(lane < warp ? t : 0);
    const int tile_total = warp_sum_int(t);
    __syncthreads();  // warp_totals is rewritten by the next tile
    int64_t next = base + before;
#pragma unroll 4
    for (int k = 0; k < 32; ++k) {
      const uint32_t b = __shfl_sync(0xffffffffu, my_mask, k);
      if ((b >> lane) & 1u) {
        const int64_t slot = next + __popc(b & ((1u << lane) - 1u));
        const int64_t r = seg + k * 32 + lane;
        if (slot < capacity) {
          slot_of[r] = static_cast<int32_t>(slot);
          row_of[slot] = static_cast<int32_t>(r);
        } else {
          slot_of[r] = -1;  // no slot: the scatter skips the row
        }
      }
      next += __popc(b);
    }
    base += tile_total;
  }
  if (threadIdx.x == 0) {
    if (base > capacity) {
      atomicExch_system(word + 1, static_cast<int>(detail::min64(base, 0x7fffffff)));
      atomicExch_system(word + 2, static_cast<int>(capacity));
      atomicExch_system(word, 1);
      *count = static_cast<int32_t>(capacity);
    } else {
      *count = static_cast<int32_t>(base);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Host helpers

// The pinned, host-mapped overflow word {flag, rows wanted, capacity}: written by assign_kernel, read by the
// host without a sync (as embedding.cu's bad-id word).
int* overflow_word() {
  static int* host = detail::mapped_words(4);
  return host;
}

int* overflow_word_device() {
  return detail::mapped_words_device(overflow_word());
}

SparseView sparse_view(const RowSparseGrad& g) {
  return SparseView{g.rows.data<float>(), g.slot_of.data<int32_t>(), g.vocab(), make_row_div(g.dim())};
}

// kVecRow for a span starting at table element `first`, read N = 4 at a time.
bool vec_rows(const RowSparseGrad& g, int64_t first) {
  return g.dim() % 4 == 0 && first % 4 == 0 && detail::aligned16(g.rows.data_ptr());
}

bool aligned8(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 7u) == 0;
}

dim3 elementwise_grid(const char* op, int64_t n, int per_thread, int block) {
  const int64_t grid = ceil_div<int64_t>(ceil_div<int64_t>(n, per_thread), block);
  PRIMUS_CHECK(grid < (int64_t{1} << 31), "{}: too large ({} elements)", op, n);
  return dim3(static_cast<unsigned>(grid));
}

void check_adam_params(const char* op, const AdamWParams& p, int64_t first) {
  PRIMUS_CHECK(first >= 0, "{}: first must be >= 0, got {}", op, first);
  PRIMUS_CHECK(p.step >= 1, "{}: step is 1-based, got {}", op, p.step);
  PRIMUS_CHECK(p.beta1 >= 0.0f && p.beta1 < 1.0f && p.beta2 >= 0.0f && p.beta2 < 1.0f,
               "{}: betas must be in [0, 1), got {} and {}", op, p.beta1, p.beta2);
}

}  // namespace

namespace detail {

void check_row_sparse_grad(const char* op, const RowSparseGrad& g) {
  PRIMUS_CHECK(g.defined(), "{}: the row-sparse gradient is not allocated", op);
  check_cuda_tensor(op, "g.rows", g.rows, DType::kF32);
  check_cuda_tensor(op, "g.slot_of", g.slot_of, DType::kI32);
  check_cuda_tensor(op, "g.row_of", g.row_of, DType::kI32);
  check_cuda_tensor(op, "g.count", g.count, DType::kI32);
  for (const Tensor* t : {&g.slot_of, &g.row_of, &g.count}) check_same_cuda_device(op, g.rows, *t);
  PRIMUS_CHECK(g.rows.ndim() == 2, "{}: g.rows must be [C, D], got {}", op, g.rows.describe());
  PRIMUS_CHECK(g.slot_of.ndim() == 1 && g.vocab() >= 1 && g.vocab() < (int64_t{1} << 31) - 1,
               "{}: g.slot_of must be [V] with 1 <= V < 2^31 - 1, got {}", op, g.slot_of.describe());
  PRIMUS_CHECK(g.row_of.ndim() == 1 && g.row_of.numel() == g.capacity(),
               "{}: g.row_of must be [{}] (one per slot), got {}", op, g.capacity(), g.row_of.describe());
  PRIMUS_CHECK(g.count.numel() == 1, "{}: g.count must be i32[1], got {}", op, g.count.describe());
  PRIMUS_CHECK(g.capacity() >= 1 && g.capacity() <= g.vocab() && g.dim() >= 1,
               "{}: need 1 <= capacity <= V and D >= 1, got C {}, V {}, D {}", op, g.capacity(), g.vocab(),
               g.dim());
}

void raise_row_sparse_overflow(const char* op) {
  volatile int* w = overflow_word();
  if (w[0] == 0) return;
  const int wanted = w[1], capacity = w[2];
  w[0] = 0;
  PRIMUS_FAIL(
      "{}: an earlier embedding_backward_sparse needed {} slots (distinct table rows this step), more than "
      "the "
      "row-sparse gradient's capacity of {}: the rows past the capacity got no slot and their gradient was "
      "dropped (the capacity must cover every distinct token of a step)",
      op, wanted, capacity);
}

void launch_row_sparse_assign(RowSparseGrad& g, const Stream& s) {
  assign_kernel<<<1, kAssignThreads, 0, cuda_stream(s)>>>(g.slot_of.data<int32_t>(), g.row_of.data<int32_t>(),
                                                          g.count.data<int32_t>(), g.vocab(), g.capacity(),
                                                          overflow_word_device());
  PRIMUS_CUDA_CHECK_LAUNCH();
}

}  // namespace detail

RowSparseGrad row_sparse_grad(int64_t vocab, int64_t dim, int64_t capacity, const Stream& s) {
  constexpr const char* op = "row_sparse_grad";
  PRIMUS_CHECK(s.device.is_cuda(), "{}: needs a CUDA stream", op);
  PRIMUS_CHECK(vocab >= 1 && dim >= 1 && capacity >= 1 && capacity <= vocab,
               "{}: need vocab, dim >= 1 and 1 <= capacity <= vocab, got V {}, D {}, C {}", op, vocab, dim,
               capacity);
  PRIMUS_CHECK(vocab < (int64_t{1} << 31) - 1, "{}: vocab {} too large for i32 slots", op, vocab);
  detail::raise_row_sparse_overflow(op);
  RowSparseGrad g;
  g.rows = Tensor::zeros({capacity, dim}, DType::kF32, s);
  g.slot_of = Tensor::empty({vocab}, DType::kI32, s);
  PRIMUS_CUDA_CHECK(cudaMemsetAsync(g.slot_of.data_ptr(), 0xff, g.slot_of.nbytes(), cuda_stream(s)));  // -1
  g.row_of = Tensor::zeros({capacity}, DType::kI32, s);
  g.count = Tensor::zeros({1}, DType::kI32, s);
  return g;
}

void row_sparse_reserve(const Tensor& rows, RowSparseGrad& g, const Stream& s) {
  constexpr const char* op = "row_sparse_reserve";
  detail::check_row_sparse_grad(op, g);
  detail::check_cuda_tensor(op, "rows", rows, DType::kI32);
  detail::check_same_cuda_device(op, rows, g.rows);
  detail::raise_row_sparse_overflow(op);
  const int64_t n = rows.numel();
  if (n == 0) return;
  PRIMUS_CHECK(n < (int64_t{1} << 31), "{}: {} rows, too many", op, n);
  cudaStream_t cs = cuda_stream(s);
  // Mark (-1 -> -2) the listed rows that have no slot, as the backward's token pass does; then the same
  // assignment.
  mark_rows_kernel<<<static_cast<unsigned>(ceil_div<int64_t>(n, 256)), 256, 0, cs>>>(
      rows.data<int32_t>(), n, g.slot_of.data<int32_t>(), g.vocab());
  PRIMUS_CUDA_CHECK_LAUNCH();
  detail::launch_row_sparse_assign(g, s);
}

void row_sparse_clear(RowSparseGrad& g, const Stream& s) {
  constexpr const char* op = "row_sparse_clear";
  detail::check_row_sparse_grad(op, g);
  detail::raise_row_sparse_overflow(op);
  const int64_t d = g.dim(), cap = g.capacity();
  constexpr int kBlock = 256;
  const bool vec = detail::aligned16(g.rows.data_ptr());
  // Enough threads for the largest count, at most a few waves: the kernel strides over what is in use.
  const int64_t want = ceil_div<int64_t>(std::max(ceil_div<int64_t>(cap * d, vec ? 4 : 1), cap), kBlock);
  const auto grid = static_cast<unsigned>(std::clamp<int64_t>(want, 1, int64_t{detail::sm_count()} * 8));
  cudaStream_t cs = cuda_stream(s);
  clear_kernel<<<grid, kBlock, 0, cs>>>(g.rows.data<float>(), g.slot_of.data<int32_t>(),
                                        g.row_of.data<int32_t>(), g.count.data<int32_t>(), d, cap, g.vocab(),
                                        vec);
  PRIMUS_CUDA_CHECK_LAUNCH();
  // After the kernel (stream order), which read the count.
  PRIMUS_CUDA_CHECK(cudaMemsetAsync(g.count.data_ptr(), 0, sizeof(int32_t), cs));
}

void row_sparse_to_dense(const RowSparseGrad& g, Tensor& dense, const Stream& s) {
  constexpr const char* op = "row_sparse_to_dense";
  detail::check_row_sparse_grad(op, g);
  detail::raise_row_sparse_overflow(op);
  detail::check_cuda_tensor(op, "dense", dense, DType::kF32);
  detail::check_same_cuda_device(op, g.rows, dense);
  const int64_t n = g.vocab() * g.dim();
  PRIMUS_CHECK(dense.numel() == n && dense.ndim() == 2 && dense.size(1) == g.dim(),
               "{}: dense must be [{}, {}], got {}", op, g.vocab(), g.dim(), dense.describe());
  PRIMUS_CHECK(!detail::overlaps(dense, g.rows) && !detail::overlaps(dense, g.slot_of),
               "{}: dense must not overlap the gradient's buffers", op);
  const bool vec = detail::aligned16(dense.data_ptr());
  const bool vec_row = vec && vec_rows(g, 0);
  constexpr int kBlock = 256;
  const dim3 grid = elementwise_grid(op, n, vec ? 4 : 1, kBlock);
  cudaStream_t cs = cuda_stream(s);
  const SparseView view = sparse_view(g);
  float* out = dense.data<float>();
  if (vec_row) {
    to_dense_kernel<4, true><<<grid, kBlock, 0, cs>>>(view, out, n);
  } else if (vec) {
    to_dense_kernel<4, false><<<grid, kBlock, 0, cs>>>(view, out, n);
  } else {
    to_dense_kernel<1, false><<<grid, kBlock, 0, cs>>>(view, out, n);
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
}

void adamw_step_sparse(Tensor& master, const RowSparseGrad& g, int64_t first, Tensor& m, Tensor& v,
                       const AdamWParams& p, Tensor* param_copy, const Stream& s) {
  constexpr const char* op = "adamw_step_sparse";
  detail::check_row_sparse_grad(op, g);
  detail::raise_row_sparse_overflow(op);
  detail::check_cuda_tensor(op, "master", master, DType::kF32);
  detail::check_cuda_tensor(op, "m", m, m.dtype());
  detail::check_cuda_tensor(op, "v", v, v.dtype());
  const int64_t n = master.numel();
  for (const Tensor* t : std::initializer_list<const Tensor*>{&m, &v}) {
    detail::check_same_cuda_device(op, master, *t);
    PRIMUS_CHECK(t->numel() == n, "{}: {} must have {} elements like master", op, t->describe(), n);
  }
  detail::check_same_cuda_device(op, master, g.rows);
  PRIMUS_CHECK(!detail::overlaps(master, m) && !detail::overlaps(master, v) && !detail::overlaps(m, v),
               "{}: master, m and v must not overlap", op);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&master, &m, &v})
    PRIMUS_CHECK(!detail::overlaps(*t, g.rows) && !detail::overlaps(*t, g.slot_of),
                 "{}: {} must not overlap the gradient's buffers", op, t->describe());
  check_adam_params(op, p, first);
  const bool write_copy = detail::adamw_writes_copy(op, master, param_copy, {&m, &v, &g.rows});
  if (n == 0) return;
  const detail::AdamCoeffs c = detail::adam_coeffs(p);
  bool vec = detail::aligned16(master.data_ptr()) && detail::moments_aligned4(m, v);
  if (write_copy)
    vec = vec &&
          (reinterpret_cast<uintptr_t>(param_copy->data_ptr()) % (4 * dtype_size(param_copy->dtype())) == 0);
  const bool vec_row = vec && vec_rows(g, first);
  constexpr int kBlock = 256;
  const dim3 grid = elementwise_grid(op, n, vec ? 4 : 1, kBlock);
  cudaStream_t cs = cuda_stream(s);
  float* w = master.data<float>();
  const SparseView view = sparse_view(g);
  detail::with_moments(op, m, v, [&]<typename MM, typename MV>(MM* mp, MV* vp) {
    auto run = [&]<int N, bool kVecRow>() {
      const SparseGradSource<kVecRow> src{view, first};
      if (!write_copy) {
        detail::adamw_kernel<N, void><<<grid, kBlock, 0, cs>>>(w, src, mp, vp, nullptr, n, c);
      } else if (param_copy->dtype() == DType::kBF16) {
        detail::adamw_kernel<N, bf16>
            <<<grid, kBlock, 0, cs>>>(w, src, mp, vp, static_cast<bf16*>(param_copy->data_ptr()), n, c);
      } else {
        detail::adamw_kernel<N, float>
            <<<grid, kBlock, 0, cs>>>(w, src, mp, vp, param_copy->data<float>(), n, c);
      }
      PRIMUS_CUDA_CHECK_LAUNCH();
    };
    if (vec_row) {
      run.template operator()<4, true>();
    } else if (vec) {
      run.template operator()<4, false>();
    } else {
      run.template operator()<1, false>();
    }
  });
}

void adamw_step_split_sparse(Tensor& hi, Tensor& rem, const RowSparseGrad& g, int64_t first, Tensor& m,
                             Tensor& v, const AdamWParams& p, const Stream& s) {
  constexpr const char* op = "adamw_step_split_sparse";
  detail::check_row_sparse_grad(op, g);
  detail::raise_row_sparse_overflow(op);
  detail::check_cuda_tensor(op, "hi", hi, DType::kBF16);
  detail::check_cuda_tensor(op, "rem", rem, DType::kI16);
  detail::check_cuda_tensor(op, "m", m, m.dtype());
  detail::check_cuda_tensor(op, "v", v, v.dtype());
  const int64_t n = hi.numel();
  for (const Tensor* t : std::initializer_list<const Tensor*>{&rem, &m, &v}) {
    detail::check_same_cuda_device(op, hi, *t);
    PRIMUS_CHECK(t->numel() == n, "{}: {} must have {} elements like hi", op, t->describe(), n);
  }
  detail::check_same_cuda_device(op, hi, g.rows);
  const Tensor* all[6] = {&hi, &rem, &m, &v, &g.rows, &g.slot_of};
  for (int a = 0; a < 4; ++a)
    for (int b = a + 1; b < 6; ++b)
      PRIMUS_CHECK(!detail::overlaps(*all[a], *all[b]),
                   "{}: hi, rem, m, v and the gradient must not overlap ({} and {})", op, all[a]->describe(),
                   all[b]->describe());
  check_adam_params(op, p, first);
  if (n == 0) return;
  const detail::AdamCoeffs c = detail::adam_coeffs(p);
  const bool vec = aligned8(hi.data_ptr()) && aligned8(rem.data_ptr()) && detail::moments_aligned4(m, v);
  const bool vec_row = vec && vec_rows(g, first);
  constexpr int kBlock = 256;
  const dim3 grid = elementwise_grid(op, n, vec ? 4 : 1, kBlock);
  cudaStream_t cs = cuda_stream(s);
  auto* h = static_cast<uint16_t*>(hi.data_ptr());
  int16_t* r = rem.data<int16_t>();
  const SparseView view = sparse_view(g);
  detail::with_moments(op, m, v, [&]<typename MM, typename MV>(MM* mp, MV* vp) {
    if (vec_row) {
      detail::adamw_split_kernel<4>
          <<<grid, kBlock, 0, cs>>>(h, r, SparseGradSource<true>{view, first}, mp, vp, n, c);
    } else if (vec) {
      detail::adamw_split_kernel<4>
          <<<grid, kBlock, 0, cs>>>(h, r, SparseGradSource<false>{view, first}, mp, vp, n, c);
    } else {
      detail::adamw_split_kernel<1>
          <<<grid, kBlock, 0, cs>>>(h, r, SparseGradSource<false>{view, first}, mp, vp, n, c);
    }
    PRIMUS_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace primus::ops::cuda
