// Token embedding: a bf16 row gather forward, and a deterministic f32 scatter-add backward.
//
// Backward without float atomics: the (token, position) pairs are radix-sorted by token (CUB's sort is
// stable, so equal tokens keep ascending positions), which makes every token's rows one contiguous run. The
// sorted positions are cut into fixed chunks of kChunk. Stage 1 sums each run inside a chunk in position
// order; a run that lies wholly in the chunk is added to its dtable row right there (no other block touches
// that row), and a run that crosses a chunk boundary leaves its piece in a scratch slot (head piece: the run
// started in an earlier chunk; tail piece: it goes on in the next one). Stage 2 lets the chunk where a
// crossing run starts add up its pieces in chunk order and add them to the row. Every sum has a fixed order,
// so the result is bitwise reproducible.
//
// Out-of-range ids: the kernels cannot throw, so they record the id in a small pinned, host-mapped word and
// skip it (forward writes NaN to that row). The next embedding call on the host sees the word and throws.
//
// Vocabulary-sharded tables (rows [vocab_begin, vocab_begin + V) of vocab_total): ids in [0, vocab_total)
// that another shard holds look up a zero row, and in the backward they sort last with the out-of-range ids
// (key V), where no block reads their dout rows.
//
// Row-sparse gradients (ops/row_sparse_grad.h): embedding_backward_sparse runs the same sort and the same two
// scatter stages with the destination row of table row k at slot_of[k] (the slots are handed out before the
// scatter, by row_sparse_grad.cu), so every slot row is summed in the dense order: bitwise the dense row. The
// updated lookups read their gradient row through the slot map the same way. A null slot map is the dense op.
#include "ops/cuda/adam_kernels.cuh"
#include "ops/cuda/adam_math.cuh"
#include "ops/cuda/kernel_utils.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <bit>
#include <mutex>

#include "ops/cuda/embedding_cuda.h"
#include "ops/cuda/row_sparse_grad_cuda.h"

namespace primus::ops::cuda {
namespace {

using detail::bf16;
using detail::load_vec;
using detail::store_vec;
using detail::Vec;

constexpr int kChunk = 32;   // sorted positions per stage-1 block
constexpr int kBlock = 128;  // threads per block; each owns E columns

// ---------------------------------------------------------------------------------------------------------------
// Kernels

__device__ __forceinline__ void report_bad_id(int* flag, int id) {
  atomicExch_system(flag + 1, id);
  atomicExch_system(flag, 1);
}

template <int E>
__global__ void embedding_fwd_kernel(const int32_t* __restrict__ tokens, const bf16* __restrict__ table,
                                     bf16* __restrict__ out, int64_t total, int64_t d, int64_t v,
                                     int64_t vocab_begin, int64_t vocab_total, int* flag) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx * E >= total) return;
  const int64_t n = (idx * E) / d, c = (idx * E) % d;
  const int32_t t = __ldg(tokens + n);
  const int64_t row = static_cast<int64_t>(t) - vocab_begin;
  Vec<bf16, E> r;
  if (row >= 0 && row < v) {
    r = load_vec<bf16, E>(table + row * d + c);
  } else if (t >= 0 && t < vocab_total) {  // another shard's id
#pragma unroll
    for (int e = 0; e < E; ++e) r.v[e] = __float2bfloat16_rn(0.f);
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) r.v[e] = __float2bfloat16_rn(__int_as_float(0x7fc00000));
    if (c == 0) report_bad_id(flag, t);
  }
  store_vec<bf16, E>(out + idx * E, r);
}

// The rows adamw_step would write to the bf16 copy (adamw_step_split to hi, with kSplit: the master is read
// as (hi, rem) pairs), computed on the fly (adam_math.cuh: the same element update), one element per thread.
// kSlots false: grad is [V, D] (slot_of null); true: grad is a row-sparse gradient's rows, row t at
// slot_of[t] (none: zero). A template flag, not a null test, so the dense kernel's code stays as it was.
// MM, MV: the moments' element types (float, or bf16 for the precision-aware optimizer's state).
template <bool kSplit, bool kSlots, typename MM, typename MV>
__global__ void embedding_fwd_updated_kernel(const int32_t* __restrict__ tokens,
                                             const float* __restrict__ master,
                                             const uint16_t* __restrict__ hi, const int16_t* __restrict__ rem,
                                             const float* __restrict__ grad,
                                             const int32_t* __restrict__ slot_of, const MM* __restrict__ m,
                                             const MV* __restrict__ v, bf16* __restrict__ out, int64_t total,
                                             int64_t d, int64_t vocab, detail::AdamCoeffs c, int* flag) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int64_t n = idx / d, col = idx % d;
  const int32_t t = __ldg(tokens + n);
  if (t >= 0 && t < vocab) {
    const int64_t i = static_cast<int64_t>(t) * d + col;
    float w = kSplit ? detail::join_master(hi[i], rem[i]) : master[i];
    float mi = detail::to_f32(m[i]), vi = detail::to_f32(v[i]);
    float g;
    if constexpr (kSlots) {
      const int32_t slot = slot_of[t];
      g = slot >= 0 ? grad[static_cast<int64_t>(slot) * d + col] : 0.f;
    } else {
      g = grad[i];
    }
    detail::adam_update(w, g, mi, vi, c);
    out[idx] = detail::compute_bf16(w);
  } else {
    out[idx] = __float2bfloat16_rn(__int_as_float(0x7fc00000));
    if (col == 0) report_bad_id(flag, t);
  }
}

// keys = the id's row of this table (out-of-range ids and other shards' ids become v, which sorts last and is
// skipped), vals = position. kMark (mark = a row-sparse gradient's slot_of; null without): a row without a
// slot (-1) is marked -2 for the slot assignment; threads of equal ids all write the same -2.
template <bool kMark>
__global__ void embedding_sort_prep_kernel(const int32_t* __restrict__ tokens, int64_t n, int64_t v,
                                           int64_t vocab_begin, int64_t vocab_total,
                                           uint32_t* __restrict__ keys, uint32_t* __restrict__ vals,
                                           int* flag, int32_t* mark) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int32_t t = tokens[i];
  const bool ok = t >= 0 && t < vocab_total;
  if (!ok) report_bad_id(flag, t);
  const int64_t row = static_cast<int64_t>(t) - vocab_begin;
  const bool mine = ok && row >= 0 && row < v;
  keys[i] = mine ? static_cast<uint32_t>(row) : static_cast<uint32_t>(v);
  vals[i] = static_cast<uint32_t>(i);
  if (kMark && mine && mark[row] == -1) mark[row] = -2;
}

template <int E>
__device__ __forceinline__ void add_f32(float* dst, const float (&acc)[E]) {
  if constexpr (E % 4 == 0) {
#pragma unroll
    for (int q = 0; q < E / 4; ++q) {
      Vec<float, 4> o = load_vec<float, 4>(dst + 4 * q);
#pragma unroll
      for (int e = 0; e < 4; ++e) o.v[e] += acc[4 * q + e];
      store_vec<float, 4>(dst + 4 * q, o);
    }
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) dst[e] += acc[e];
  }
}

template <int E>
__device__ __forceinline__ void store_f32(float* dst, const float (&acc)[E]) {
  if constexpr (E % 4 == 0) {
#pragma unroll
    for (int q = 0; q < E / 4; ++q) {
      Vec<float, 4> o;
#pragma unroll
      for (int e = 0; e < 4; ++e) o.v[e] = acc[4 * q + e];
      store_vec<float, 4>(dst + 4 * q, o);
    }
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) dst[e] = acc[e];
  }
}

// The destination row of table row k: k itself (dense), or its slot in a row-sparse gradient (-1 when the
// slots ran out: the row is skipped, the error already recorded). The scatter kernels take kSlots as a
// template flag (slot_of null when false), so that the dense kernels' code and registers stay as they were.
template <bool kSlots>
__device__ __forceinline__ int64_t dest_row(const int32_t* slot_of, uint32_t k) {
  if constexpr (kSlots) {
    return slot_of[k];
  } else {
    return static_cast<int64_t>(k);
  }
}

// Stage 1: block (chunk, column slice). scratch is [chunks, 2, d]: slot 0 = head piece, slot 1 = tail piece.
// slot_of: null (dtable is [V, D]) or a row-sparse gradient's slot map (dtable is its rows), see dest_row.
template <int E, bool kSlots>
__global__ void __launch_bounds__(kBlock, 8)
    embedding_bwd_chunk_kernel(const uint32_t* __restrict__ keys, const uint32_t* __restrict__ vals,
                               const bf16* __restrict__ dout, float* dtable, float* __restrict__ scratch,
                               int64_t n, int64_t d, uint32_t v, const int32_t* __restrict__ slot_of) {
  __shared__ uint32_t sk[kChunk], sv[kChunk];
  __shared__ uint32_t key_before, key_after;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * kChunk;
  const int len = static_cast<int>(detail::min64(kChunk, n - start));
  if (threadIdx.x < len) {
    sk[threadIdx.x] = keys[start + threadIdx.x];
    sv[threadIdx.x] = vals[start + threadIdx.x];
  }
  if (threadIdx.x == 0) {
    key_before = start > 0 ? keys[start - 1] : 0xffffffffu;
    key_after = start + len < n ? keys[start + len] : 0xffffffffu;
  }
  __syncthreads();
  // Keys >= v (skipped ids) sort last: the chunk's rows to add are a prefix, whose dout rows alone are read.
  int valid = len;
  while (valid > 0 && sk[valid - 1] >= v) --valid;
  if (valid == 0) return;
  const int64_t col = (static_cast<int64_t>(blockIdx.y) * kBlock + threadIdx.x) * E;
  if (col >= d) return;

  float acc[E];
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] = 0.f;
  int run_start = 0;
  auto flush = [&](uint32_t k, int rs, int re) {
    if (k >= v) return;
    const bool starts_before = rs == 0 && key_before == k;
    const bool goes_on = re == len && key_after == k;
    if (!starts_before && !goes_on) {
      const int64_t row = dest_row<kSlots>(slot_of, k);
      if (!kSlots || row >= 0) add_f32<E>(dtable + row * d + col, acc);
    } else {
      const int slot = starts_before ? 0 : 1;
      store_f32<E>(scratch + (static_cast<int64_t>(blockIdx.x) * 2 + slot) * d + col, acc);
    }
  };
  // Rows are loaded a few at a time ahead of the (data-dependent) run bookkeeping, to keep loads in flight.
  constexpr int kAhead = E == 8 ? 4 : 8;
  for (int j0 = 0; j0 < valid; j0 += kAhead) {
    Vec<bf16, E> rows[kAhead];
#pragma unroll
    for (int u = 0; u < kAhead; ++u)
      if (j0 + u < valid) rows[u] = load_vec<bf16, E>(dout + static_cast<int64_t>(sv[j0 + u]) * d + col);
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int j = j0 + u;
      if (j >= valid) break;
      if (j > 0 && sk[j] != sk[j - 1]) {
        flush(sk[j - 1], run_start, j);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[e] = 0.f;
        run_start = j;
      }
#pragma unroll
      for (int e = 0; e < E; ++e) acc[e] += __bfloat162float(rows[u].v[e]);
    }
  }
  flush(sk[valid - 1], run_start, valid);  // goes on into the next chunk only when valid == len
}

// Stage 2: the chunk where a boundary-crossing run starts adds its tail piece and the head pieces of the
// following chunks, in chunk order, to the dtable row.
template <int E, bool kSlots>
__global__ void __launch_bounds__(kBlock)
    embedding_bwd_merge_kernel(const uint32_t* __restrict__ keys, float* dtable,
                               const float* __restrict__ scratch, int64_t n, int64_t d, uint32_t v,
                               const int32_t* __restrict__ slot_of) {
  const int64_t c = blockIdx.x;
  const int64_t start = c * kChunk, end = detail::min64(n, start + kChunk);
  if (end >= n) return;
  const uint32_t k = keys[end - 1];
  if (k >= v || keys[end] != k) return;                               // the last run stops in this chunk
  if (start > 0 && keys[start] == k && keys[start - 1] == k) return;  // it started in an earlier chunk
  const int64_t col = (static_cast<int64_t>(blockIdx.y) * kBlock + threadIdx.x) * E;
  if (col >= d) return;
  float acc[E];
  auto add_piece = [&](int64_t chunk, int slot) {
    const float* p = scratch + (chunk * 2 + slot) * d + col;
    if constexpr (E % 4 == 0) {
#pragma unroll
      for (int q = 0; q < E / 4; ++q) {
        const Vec<float, 4> o = load_vec<float, 4>(p + 4 * q);
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[4 * q + e] += o.v[e];
      }
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e) acc[e] += p[e];
    }
  };
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] = 0.f;
  add_piece(c, 1);
  for (int64_t c2 = c + 1;; ++c2) {
    add_piece(c2, 0);
    const int64_t e2 = detail::min64(n, (c2 + 1) * kChunk);
    if (e2 >= n || keys[e2 - 1] != k || keys[e2] != k) break;  // the run ends in chunk c2
  }
  const int64_t row = dest_row<kSlots>(slot_of, k);
  if (!kSlots || row >= 0) add_f32<E>(dtable + row * d + col, acc);
}

// ---------------------------------------------------------------------------------------------------------------
// Launchers

// The pinned, host-mapped error word {flag, id}: written by the kernels, read by the host without a sync.
int* error_word() {
  static int* host = detail::mapped_words(2);
  return host;
}

int* error_word_device() {
  return detail::mapped_words_device(error_word());
}

// Throws if an earlier embedding kernel met an out-of-range id (and clears the word so the error is reported
// once).
void raise_pending_error(const char* op, int64_t v) {
  volatile int* w = error_word();
  if (w[0] == 0) return;
  const int id = w[1];
  w[0] = 0;
  PRIMUS_FAIL(
      "{}: an earlier embedding call met token id {} outside [0, {}) (the row was skipped / set to NaN)", op,
      id, v);
}

bool vec_ok(int64_t d, std::initializer_list<const void*> ptrs) {
  if (d % 8 != 0) return false;
  for (const void* p : ptrs)
    if (!detail::aligned16(p)) return false;
  return true;
}

}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out, const Stream& s,
                       int64_t vocab_begin, int64_t vocab_total) {
  constexpr const char* op = "embedding_forward";
  detail::check_cuda_tensor(op, "tokens", tokens, DType::kI32);
  detail::check_cuda_tensor(op, "table", table, DType::kBF16);
  detail::check_cuda_tensor(op, "out", out, DType::kBF16);
  detail::check_same_cuda_device(op, tokens, table);
  detail::check_same_cuda_device(op, tokens, out);
  PRIMUS_CHECK(table.ndim() == 2, "{}: table must be [V, D], got {}", op, table.describe());
  const int64_t v = table.size(0), d = table.size(1), n = tokens.numel();
  PRIMUS_CHECK(out.numel() == n * d && out.size(-1) == d, "{}: out must be [{}, {}], got {}", op, n, d,
               out.describe());
  const int64_t vt = embedding_vocab_total(op, v, vocab_begin, vocab_total);
  raise_pending_error(op, vt);
  const int64_t total = n * d;
  if (total == 0) return;
  const bool vec = vec_ok(d, {table.data_ptr(), out.data_ptr()});
  const int64_t grid = ceil_div<int64_t>(total / (vec ? 8 : 1), 256);
  PRIMUS_CHECK(grid < (int64_t{1} << 31), "{}: too large ({} elements)", op, total);
  const auto* tp = tokens.data<int32_t>();
  const auto* tab = static_cast<const bf16*>(table.data_ptr());
  auto* o = static_cast<bf16*>(out.data_ptr());
  if (vec) {
    embedding_fwd_kernel<8><<<static_cast<unsigned>(grid), 256, 0, cuda_stream(s)>>>(
        tp, tab, o, total, d, v, vocab_begin, vt, error_word_device());
  } else {
    embedding_fwd_kernel<1><<<static_cast<unsigned>(grid), 256, 0, cuda_stream(s)>>>(
        tp, tab, o, total, d, v, vocab_begin, vt, error_word_device());
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
}

namespace {

// Shared by the updated lookups: `master` (f32) or `hi` + `rem` (bf16, i16) is the [V, D] master table; the
// gradient is `grad` [V, D] or, with `sparse`, a row-sparse gradient of the table (grad unused).
void launch_forward_updated(const char* op, const Tensor& tokens, const Tensor* master, const Tensor* hi,
                            const Tensor* rem, const Tensor* grad, const RowSparseGrad* sparse,
                            const Tensor& m, const Tensor& v, const AdamWParams& p, Tensor& out,
                            const Stream& s) {
  const Tensor& table = master ? *master : *hi;
  detail::check_cuda_tensor(op, "tokens", tokens, DType::kI32);
  if (master) {
    detail::check_cuda_tensor(op, "master", *master, DType::kF32);
  } else {
    detail::check_cuda_tensor(op, "hi", *hi, DType::kBF16);
    detail::check_cuda_tensor(op, "rem", *rem, DType::kI16);
    detail::check_same_cuda_device(op, *hi, *rem);
    PRIMUS_CHECK(rem->shape() == hi->shape(), "{}: rem must have hi's shape {}, got {}", op,
                 shape_str(hi->shape()), rem->describe());
  }
  detail::check_cuda_tensor(op, "out", out, DType::kBF16);
  PRIMUS_CHECK(table.ndim() == 2, "{}: the master table must be [V, D], got {}", op, table.describe());
  const int64_t vocab = table.size(0), d = table.size(1), n = tokens.numel();
  auto check_full = [&](const Tensor& t) {
    detail::check_cuda_tensor(op, "grad/m/v", t, &t == grad ? DType::kF32 : t.dtype());
    detail::check_same_cuda_device(op, table, t);
    PRIMUS_CHECK(t.numel() == vocab * d, "{}: {} must have {} x {} elements like the master table", op,
                 t.describe(), vocab, d);
  };
  if (sparse) {
    detail::check_row_sparse_grad(op, *sparse);
    detail::check_same_cuda_device(op, table, sparse->rows);
    PRIMUS_CHECK(sparse->vocab() == vocab && sparse->dim() == d,
                 "{}: the row-sparse gradient is of a [{}, {}] table, the master table is [{}, {}]", op,
                 sparse->vocab(), sparse->dim(), vocab, d);
  } else {
    check_full(*grad);
  }
  check_full(m);
  check_full(v);
  detail::check_same_cuda_device(op, tokens, table);
  detail::check_same_cuda_device(op, tokens, out);
  PRIMUS_CHECK(out.numel() == n * d && out.size(-1) == d, "{}: out must be [{}, {}], got {}", op, n, d,
               out.describe());
  PRIMUS_CHECK(p.step >= 1, "{}: step is 1-based, got {}", op, p.step);
  raise_pending_error(op, vocab);
  if (sparse) detail::raise_row_sparse_overflow(op);
  const int64_t total = n * d;
  if (total == 0) return;
  const int64_t grid = ceil_div<int64_t>(total, 256);
  PRIMUS_CHECK(grid < (int64_t{1} << 31), "{}: too large ({} elements)", op, total);
  const auto g = static_cast<unsigned>(grid);
  auto* o = static_cast<bf16*>(out.data_ptr());
  const detail::AdamCoeffs c = detail::adam_coeffs(p);
  const float* gp = sparse ? sparse->rows.data<float>() : grad->data<float>();
  const int32_t* slot = sparse ? sparse->slot_of.data<int32_t>() : nullptr;
  detail::with_moments(op, m, v, [&]<typename MM, typename MV>(MM* mp, MV* vp) {
    auto run = [&]<bool kSlots>() {
      if (master) {
        embedding_fwd_updated_kernel<false, kSlots, MM, MV>
            <<<g, 256, 0, cuda_stream(s)>>>(tokens.data<int32_t>(), master->data<float>(), nullptr, nullptr,
                                            gp, slot, mp, vp, o, total, d, vocab, c, error_word_device());
      } else {
        embedding_fwd_updated_kernel<true, kSlots, MM, MV><<<g, 256, 0, cuda_stream(s)>>>(
            tokens.data<int32_t>(), nullptr, static_cast<const uint16_t*>(hi->data_ptr()),
            rem->data<int16_t>(), gp, slot, mp, vp, o, total, d, vocab, c, error_word_device());
      }
      PRIMUS_CUDA_CHECK_LAUNCH();
    };
    if (sparse) {
      run.template operator()<true>();
    } else {
      run.template operator()<false>();
    }
  });
}

// The backward's device work, dense (dtable [V, D], sparse null) or into a row-sparse gradient (dtable = its
// rows): the token pass (sort keys; with sparse, rows without a slot marked), the slot assignment, the sort,
// and the two scatter stages with the destination rows through the slot map. The caller checked the inputs.
void launch_backward(const char* op, const Tensor& tokens, const Tensor& dout, float* dtable,
                     RowSparseGrad* sparse, int64_t v, int64_t d, int64_t vocab_begin, int64_t vt,
                     const Stream& s) {
  const int64_t n = tokens.numel();
  cudaStream_t cs = cuda_stream(s);
  int32_t* slot = sparse ? sparse->slot_of.data<int32_t>() : nullptr;

  Tensor keys = Tensor::empty({2, n}, DType::kI32, s), vals = Tensor::empty({2, n}, DType::kI32, s);
  auto* k_in = reinterpret_cast<uint32_t*>(keys.data<int32_t>());
  auto* k_out = k_in + n;
  auto* v_in = reinterpret_cast<uint32_t*>(vals.data<int32_t>());
  auto* v_out = v_in + n;
  const auto prep_grid = static_cast<unsigned>(ceil_div<int64_t>(n, 256));
  if (slot) {
    embedding_sort_prep_kernel<true><<<prep_grid, 256, 0, cs>>>(tokens.data<int32_t>(), n, v, vocab_begin, vt,
                                                                k_in, v_in, error_word_device(), slot);
  } else {
    embedding_sort_prep_kernel<false><<<prep_grid, 256, 0, cs>>>(
        tokens.data<int32_t>(), n, v, vocab_begin, vt, k_in, v_in, error_word_device(), nullptr);
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
  // Slots before the scatter: every row this call adds to has its slot when the first block runs.
  if (sparse) detail::launch_row_sparse_assign(*sparse, s);
  // Keys are in [0, v]: sort only the bits that can be set.
  const int end_bit = std::bit_width(static_cast<uint32_t>(v));
  size_t temp_bytes = 0;
  PRIMUS_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, k_in, k_out, v_in, v_out, n, 0, end_bit, cs));
  Tensor temp = Tensor::empty({static_cast<int64_t>(std::max<size_t>(temp_bytes, 1))}, DType::kU8, s);
  PRIMUS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, k_in, k_out, v_in, v_out, n,
                                                    0, end_bit, cs));

  const bool vec = vec_ok(d, {dout.data_ptr(), dtable});
  const int e = vec ? 8 : 1;
  const int64_t chunks = ceil_div<int64_t>(n, kChunk);
  const int64_t col_blocks = ceil_div<int64_t>(d, int64_t{kBlock} * e);
  PRIMUS_CHECK(chunks < (int64_t{1} << 31) && col_blocks < 65536, "{}: too large (N={}, D={})", op, n, d);
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(col_blocks));
  Tensor scratch = Tensor::empty({chunks, 2, d}, DType::kF32, s);
  const auto* dp = static_cast<const bf16*>(dout.data_ptr());
  const auto uv = static_cast<uint32_t>(v);
  auto run = [&]<int E, bool kSlots>() {
    embedding_bwd_chunk_kernel<E, kSlots>
        <<<grid, kBlock, 0, cs>>>(k_out, v_out, dp, dtable, scratch.data<float>(), n, d, uv, slot);
    PRIMUS_CUDA_CHECK_LAUNCH();
    embedding_bwd_merge_kernel<E, kSlots>
        <<<grid, kBlock, 0, cs>>>(k_out, dtable, scratch.data<float>(), n, d, uv, slot);
    PRIMUS_CUDA_CHECK_LAUNCH();
  };
  if (vec && slot) {
    run.template operator()<8, true>();
  } else if (vec) {
    run.template operator()<8, false>();
  } else if (slot) {
    run.template operator()<1, true>();
  } else {
    run.template operator()<1, false>();
  }
}

}  // namespace

void embedding_forward_updated(const Tensor& tokens, const Tensor& master, const Tensor& grad,
                               const Tensor& m, const Tensor& v, const AdamWParams& p, Tensor& out,
                               const Stream& s) {
  launch_forward_updated("embedding_forward_updated", tokens, &master, nullptr, nullptr, &grad, nullptr, m, v,
                         p, out, s);
}

void embedding_forward_updated_split(const Tensor& tokens, const Tensor& hi, const Tensor& rem,
                                     const Tensor& grad, const Tensor& m, const Tensor& v,
                                     const AdamWParams& p, Tensor& out, const Stream& s) {
  launch_forward_updated("embedding_forward_updated_split", tokens, nullptr, &hi, &rem, &grad, nullptr, m, v,
                         p, out, s);
}

void embedding_forward_updated_sparse(const Tensor& tokens, const Tensor& master, const RowSparseGrad& g,
                                      const Tensor& m, const Tensor& v, const AdamWParams& p, Tensor& out,
                                      const Stream& s) {
  launch_forward_updated("embedding_forward_updated_sparse", tokens, &master, nullptr, nullptr, nullptr, &g,
                         m, v, p, out, s);
}

void embedding_forward_updated_split_sparse(const Tensor& tokens, const Tensor& hi, const Tensor& rem,
                                            const RowSparseGrad& g, const Tensor& m, const Tensor& v,
                                            const AdamWParams& p, Tensor& out, const Stream& s) {
  launch_forward_updated("embedding_forward_updated_split_sparse", tokens, nullptr, &hi, &rem, nullptr, &g, m,
                         v, p, out, s);
}

void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable, const Stream& s,
                        int64_t vocab_begin, int64_t vocab_total) {
  constexpr const char* op = "embedding_backward";
  detail::check_cuda_tensor(op, "tokens", tokens, DType::kI32);
  detail::check_cuda_tensor(op, "dout", dout, DType::kBF16);
  detail::check_cuda_tensor(op, "dtable", dtable, DType::kF32);
  detail::check_same_cuda_device(op, tokens, dout);
  detail::check_same_cuda_device(op, tokens, dtable);
  PRIMUS_CHECK(dtable.ndim() == 2, "{}: dtable must be [V, D], got {}", op, dtable.describe());
  const int64_t v = dtable.size(0), d = dtable.size(1), n = tokens.numel();
  PRIMUS_CHECK(dout.numel() == n * d && dout.size(-1) == d, "{}: dout must be [{}, {}], got {}", op, n, d,
               dout.describe());
  PRIMUS_CHECK(v < (int64_t{1} << 31) - 1 && n < (int64_t{1} << 31), "{}: V ({}) or N ({}) too large", op, v,
               n);
  const int64_t vt = embedding_vocab_total(op, v, vocab_begin, vocab_total);
  raise_pending_error(op, vt);
  if (n == 0 || d == 0) return;
  launch_backward(op, tokens, dout, dtable.data<float>(), nullptr, v, d, vocab_begin, vt, s);
}

void embedding_backward_sparse(const Tensor& tokens, const Tensor& dout, RowSparseGrad& g, const Stream& s,
                               int64_t vocab_begin, int64_t vocab_total) {
  constexpr const char* op = "embedding_backward_sparse";
  detail::check_row_sparse_grad(op, g);
  detail::check_cuda_tensor(op, "tokens", tokens, DType::kI32);
  detail::check_cuda_tensor(op, "dout", dout, DType::kBF16);
  detail::check_same_cuda_device(op, tokens, dout);
  detail::check_same_cuda_device(op, tokens, g.rows);
  const int64_t v = g.vocab(), d = g.dim(), n = tokens.numel();
  PRIMUS_CHECK(dout.numel() == n * d && dout.size(-1) == d, "{}: dout must be [{}, {}], got {}", op, n, d,
               dout.describe());
  PRIMUS_CHECK(n < (int64_t{1} << 31), "{}: N ({}) too large", op, n);  // V: check_row_sparse_grad
  PRIMUS_CHECK(!detail::overlaps(dout, g.rows), "{}: dout must not overlap the gradient's rows", op);
  const int64_t vt = embedding_vocab_total(op, v, vocab_begin, vocab_total);
  raise_pending_error(op, vt);
  detail::raise_row_sparse_overflow(op);
  if (n == 0) return;
  launch_backward(op, tokens, dout, g.rows.data<float>(), &g, v, d, vocab_begin, vt, s);
}

}  // namespace primus::ops::cuda
