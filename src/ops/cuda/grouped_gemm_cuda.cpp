// CUDA grouped GEMM: the three ops of ops/grouped_gemm.h described once in cuBLAS's column-major terms
// (GroupedLaunch) and run by one of three paths (grouped_gemm_cuda.h): cuBLAS grouped-batched, cuBLAS
// strided-batched, or a loop of cuBLASLt calls.
//
// Row-major to column-major: a row-major [R, C] matrix is cuBLAS's [C, R] with leading dimension C, so
//   forward  y_e[m, N]  = x_e[m, K] w_e[N, K]^T   ->  y_e^T  = op_T(w_e) x_e^T      (m_cm = N, n_cm = m, k =
//   K) dgrad    dx_e[m, K] = dy_e[m, N] w_e[N, K]    ->  dx_e^T = w_e^T dy_e^T         (m_cm = K, n_cm = m, k
//   = N) wgrad    dw_e[N, K] = dy_e[m, N]^T x_e[m, K]  ->  dw_e^T = x_e^T op_T(dy_e^T)   (m_cm = K, n_cm = N,
//   k = m)
// where m is the expert's row count.
#include "ops/cuda/grouped_gemm_cuda.h"

#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "core/cuda_check.h"
#include "core/error.h"
#include "core/log.h"
#include "ops/cuda/gemm_lt.h"
#include "ops/cuda/grouped_gemm_pointers.h"

namespace primus::ops::cuda {

namespace {

#define PRIMUS_CUBLAS_CHECK(expr)                                                           \
  do {                                                                                      \
    cublasStatus_t primus_cublas_st_ = (expr);                                              \
    if (primus_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                         \
      throw ::primus::Error(                                                                \
          ::primus::ErrorKind::kRuntime,                                                    \
          fmt::format("cuBLAS error {} ({}) in {}", cublasGetStatusName(primus_cublas_st_), \
                      cublasGetStatusString(primus_cublas_st_), #expr),                     \
          fmt::format("{}:{}", "grouped_gemm_cuda.cpp", __LINE__));                         \
  } while (0)

std::atomic<GroupedGemmPath> g_path{GroupedGemmPath::kAuto};
std::atomic<GroupedGemmPath> g_last_path{GroupedGemmPath::kAuto};

GroupedGemmPath configured_path() {
  const GroupedGemmPath p = g_path.load();
  if (p != GroupedGemmPath::kAuto) return p;
  static const GroupedGemmPath from_env = [] {
    const char* e = std::getenv("PRIMUS_GROUPED_GEMM");
    return e && *e ? grouped_gemm_path_from_name(e) : GroupedGemmPath::kAuto;
  }();
  return from_env;
}

// One cuBLAS (not cuBLASLt) handle per device, used under a lock: the handle carries the stream, so two
// threads must not interleave cublasSetStream and the GEMM.
struct CublasHandles {
  std::mutex mu;
  std::map<int, cublasHandle_t> by_device;
};
CublasHandles& handles() {
  static CublasHandles* h = new CublasHandles;  // never destroyed: GEMMs may run during static teardown
  return *h;
}
cublasHandle_t handle_for(int device) {
  // Called with handles().mu held.
  auto& m = handles().by_device;
  auto it = m.find(device);
  if (it != m.end()) return it->second;
  cublasHandle_t h = nullptr;
  PRIMUS_CUBLAS_CHECK(cublasCreate(&h));
  m[device] = h;
  return h;
}

cudaDataType_t cuda_type(DType t) {
  return t == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
}

// One op over all experts, in cuBLAS's column-major terms. The size named by `var` (0: m, 1: n, 2: k) is each
// expert's row count.
struct GroupedLaunch {
  const char* op = "";
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int var = 1;
  int64_t lda = 0, ldb = 0, ldc = 0;
  PointerOperand a, b, c;
  DType ab_type = DType::kBF16, c_type = DType::kBF16;
  float beta = 0.0f;
};

struct Active {
  int32_t expert;
  int64_t row;
  int64_t count;
};

std::vector<Active> active_experts(std::span<const int64_t> counts) {
  std::vector<Active> a;
  int64_t row = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    if (counts[e] > 0) a.push_back({static_cast<int32_t>(e), row, counts[e]});
    row += counts[e];
  }
  return a;
}

const char* ptr_of(const PointerOperand& o, const Active& g) {
  return o.base + g.expert * o.expert_bytes + g.row * o.row_bytes;
}

void sizes_for(const GroupedLaunch& L, int64_t rows, int64_t& m, int64_t& n, int64_t& k) {
  m = L.var == 0 ? rows : L.m;
  n = L.var == 1 ? rows : L.n;
  k = L.var == 2 ? rows : L.k;
}

int as_int(const GroupedLaunch& L, int64_t v, const char* what) {
  PRIMUS_CHECK(v <= INT_MAX, "{}: {} = {} exceeds cuBLAS's 32-bit sizes", L.op, what, v);
  return static_cast<int>(v);
}

void run_lt_loop(const GroupedLaunch& L, const std::vector<Active>& act, const Stream& s) {
  for (const Active& g : act) {
    int64_t m, n, k;
    sizes_for(L, g.count, m, n, k);
    // gemm_lt.h is row-major: its problem is the transposed one, with a and b swapped.
    lt::Problem p;
    p.m = n;
    p.n = m;
    p.k = k;
    p.trans_a = L.trans_b;
    p.trans_b = L.trans_a;
    p.a_type = p.b_type = L.ab_type;
    p.c_type = L.c_type;
    lt::Operands o;
    o.a = ptr_of(L.b, g);
    o.b = ptr_of(L.a, g);
    o.c = o.d = const_cast<char*>(ptr_of(L.c, g));
    o.beta = L.beta;
    lt::matmul(p, o, s);
  }
}

// Side streams of one device for the `streams` path, with the fork event and one join event per stream,
// created once. Used under `mu`: the events are re-recorded by every call.
constexpr int kSideStreams = 4;
struct SideStreams {
  std::mutex mu;
  cudaEvent_t fork = nullptr;
  cudaStream_t stream[kSideStreams] = {};
  cudaEvent_t join[kSideStreams] = {};
};
SideStreams& side_streams(int device) {
  static std::mutex mu;
  static std::map<int, SideStreams*> by_device;  // never destroyed, like the cuBLAS handles
  std::lock_guard<std::mutex> lock(mu);
  SideStreams*& ss = by_device[device];
  if (!ss) {
    auto fresh = std::make_unique<SideStreams>();
    PRIMUS_CUDA_CHECK(cudaEventCreateWithFlags(&fresh->fork, cudaEventDisableTiming));
    for (int i = 0; i < kSideStreams; ++i) {
      PRIMUS_CUDA_CHECK(cudaStreamCreateWithFlags(&fresh->stream[i], cudaStreamNonBlocking));
      PRIMUS_CUDA_CHECK(cudaEventCreateWithFlags(&fresh->join[i], cudaEventDisableTiming));
    }
    ss = fresh.release();
  }
  return *ss;
}

// The loop spread round-robin over kSideStreams streams, so that the small GEMMs of many experts overlap
// (each alone fills only a few of the SMs); the caller's stream waits for all of them.
void run_lt_streams(const GroupedLaunch& L, const std::vector<Active>& act, const Stream& s) {
  SideStreams& ss = side_streams(s.device.index);
  std::lock_guard<std::mutex> lock(ss.mu);
  PRIMUS_CUDA_CHECK(cudaEventRecord(ss.fork, cuda_stream(s)));
  const int used = std::min<int>(kSideStreams, static_cast<int>(act.size()));
  std::vector<std::vector<Active>> share(static_cast<size_t>(used));
  // Largest experts first, each to the stream with the least work so far.
  std::vector<Active> order = act;
  std::stable_sort(order.begin(), order.end(),
                   [](const Active& a, const Active& b) { return a.count > b.count; });
  std::vector<int64_t> load(static_cast<size_t>(used), 0);
  for (const Active& g : order) {
    const size_t i = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    share[i].push_back(g);
    load[i] += g.count;
  }
  for (int i = 0; i < used; ++i) {
    PRIMUS_CUDA_CHECK(cudaStreamWaitEvent(ss.stream[i], ss.fork, 0));
    run_lt_loop(L, share[static_cast<size_t>(i)], Stream{s.device, ss.stream[i]});
    PRIMUS_CUDA_CHECK(cudaEventRecord(ss.join[i], ss.stream[i]));
    PRIMUS_CUDA_CHECK(cudaStreamWaitEvent(cuda_stream(s), ss.join[i], 0));
  }
}

// True when every expert has the same non-zero count, so that operand g sits at a fixed stride.
bool uniform(const std::vector<Active>& act, size_t experts) {
  if (act.size() != experts || act.empty()) return false;
  return std::all_of(act.begin(), act.end(), [&](const Active& g) { return g.count == act[0].count; });
}

void run_strided_batched(const GroupedLaunch& L, const std::vector<Active>& act, const Stream& s) {
  int64_t m, n, k;
  sizes_for(L, act[0].count, m, n, k);
  const size_t ab = dtype_size(L.ab_type), cb = dtype_size(L.c_type);
  // Stride between consecutive experts, in elements: the weight block, or `count` rows of a token matrix.
  auto stride = [&](const PointerOperand& o, size_t es) {
    return static_cast<long long>((o.expert_bytes + act[0].count * o.row_bytes) / static_cast<int64_t>(es));
  };
  const float alpha = 1.0f, beta = L.beta;
  std::lock_guard<std::mutex> lock(handles().mu);
  cublasHandle_t h = handle_for(s.device.index);
  PRIMUS_CUBLAS_CHECK(cublasSetStream(h, cuda_stream(s)));
  PRIMUS_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      h, L.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, L.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, as_int(L, m, "m"),
      as_int(L, n, "n"), as_int(L, k, "k"), &alpha, L.a.base, cuda_type(L.ab_type), as_int(L, L.lda, "lda"),
      stride(L.a, ab), L.b.base, cuda_type(L.ab_type), as_int(L, L.ldb, "ldb"), stride(L.b, ab), &beta,
      const_cast<char*>(L.c.base), cuda_type(L.c_type), as_int(L, L.ldc, "ldc"), stride(L.c, cb),
      static_cast<int>(act.size()), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// Returns false (having run nothing) when cuBLAS does not support the types in a grouped call.
bool run_cublas_grouped(const GroupedLaunch& L, std::vector<Active> act, const Stream& s) {
  PRIMUS_CHECK(static_cast<int>(act.size()) <= kMaxPointerGroups,
               "{}: {} non-empty experts exceed the grouped path's limit of {}", L.op, act.size(),
               kMaxPointerGroups);
  // Experts with equal counts form one cuBLAS group (one problem shape, group_size problems).
  std::stable_sort(act.begin(), act.end(),
                   [](const Active& x, const Active& y) { return x.count < y.count; });
  std::vector<int> gm, gn, gk, glda, gldb, gldc, gsize;
  for (size_t i = 0; i < act.size(); ++i) {
    if (i > 0 && act[i].count == act[i - 1].count) {
      ++gsize.back();
      continue;
    }
    int64_t m, n, k;
    sizes_for(L, act[i].count, m, n, k);
    gm.push_back(as_int(L, m, "m"));
    gn.push_back(as_int(L, n, "n"));
    gk.push_back(as_int(L, k, "k"));
    glda.push_back(as_int(L, L.lda, "lda"));
    gldb.push_back(as_int(L, L.ldb, "ldb"));
    gldc.push_back(as_int(L, L.ldc, "ldc"));
    gsize.push_back(1);
  }
  const size_t groups = gsize.size();
  std::vector<cublasOperation_t> ta(groups, L.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  std::vector<cublasOperation_t> tb(groups, L.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  std::vector<float> alpha(groups, 1.0f), beta(groups, L.beta);

  const int count = static_cast<int>(act.size());
  auto params = std::make_unique<PointerParams>();
  params->op[0] = L.a;
  params->op[1] = L.b;
  params->op[2] = L.c;
  params->count = count;
  for (int g = 0; g < count; ++g) {
    params->expert[g] = act[g].expert;
    params->row[g] = act[g].row;
  }
  // Freed in stream order after the GEMM (the allocator is stream-ordered).
  Tensor ptrs = Tensor::empty({3 * static_cast<int64_t>(count)}, DType::kI64, s);
  const void** dp = static_cast<const void**>(ptrs.data_ptr());
  PRIMUS_CUDA_CHECK(launch_fill_group_pointers(*params, dp, cuda_stream(s)));

  std::lock_guard<std::mutex> lock(handles().mu);
  cublasHandle_t h = handle_for(s.device.index);
  PRIMUS_CUBLAS_CHECK(cublasSetStream(h, cuda_stream(s)));
  const cublasStatus_t st = cublasGemmGroupedBatchedEx(
      h, ta.data(), tb.data(), gm.data(), gn.data(), gk.data(), alpha.data(), dp, cuda_type(L.ab_type),
      glda.data(), dp + count, cuda_type(L.ab_type), gldb.data(), beta.data(),
      const_cast<void* const*>(reinterpret_cast<const void* const*>(dp + 2 * count)), cuda_type(L.c_type),
      gldc.data(), static_cast<int>(groups), gsize.data(), CUBLAS_COMPUTE_32F);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) return false;
  PRIMUS_CUBLAS_CHECK(st);
  return true;
}

// The measured choice (docs/kernels/grouped_gemm.md, H100 2026-11-25). Strided-batched when every expert has
// the same rows. Otherwise the mean rows per expert over ALL experts (tokens x k / E, a property of the model
// and batch) decides: below 512 (Qwen3-30B-A3B: 128 experts of ~256 rows) cuBLAS's grouped kernel (an sm80
// warp-MMA kernel, ~270 TFLOP/s, but one launch; the f32-output wgrad, which the grouped call does not take,
// loops on one stream) -- in a training step this beat the per-expert Hopper GEMMs, whose 128 launches per
// call make the host the limit: 72.0 ms per Qwen3-4L step vs 84-87 ms with the loop or side streams. The mean
// over the *active* experts, used before, flipped layers to the side streams whenever routing left experts
// empty (77.8 ms median, steps up to 109 ms). From 512 rows up the per-expert cuBLASLt GEMMs (650-750
// TFLOP/s) win by 2-2.7x: on one stream for a few experts (Mixtral's 8: 73.8 ms per 2L step vs 75.5 with
// side streams), spread over side streams for more (DeepSeek-V3's 32 per EP rank, measured per call only).
// Equal counts on a few experts with many rows (Mixtral's 8 x 4096) also take the loop: there the per-expert
// Hopper GEMMs beat cuBLAS's strided-batched kernel in the forward and input gradient (683 vs 669, 733 vs
// 686, 732 vs 648 TFLOP/s), while with more experts (DeepSeek-V3's 32 x 1024) strided-batched wins (753 vs
// 718).
GroupedGemmPath auto_path(const std::vector<Active>& act, std::span<const int64_t> counts, bool equal) {
  if (equal) {
    const bool few_large = act.size() <= 8 && act.front().count >= 2048;
    return few_large ? GroupedGemmPath::kLtLoop : GroupedGemmPath::kStridedBatched;
  }
  int64_t rows = 0;
  for (const Active& a : act) rows += a.count;
  const int64_t mean = rows / static_cast<int64_t>(counts.size());
  if (mean < 512) return GroupedGemmPath::kCublasGrouped;
  return act.size() <= 8 ? GroupedGemmPath::kLtLoop : GroupedGemmPath::kLtStreams;
}

void run(const GroupedLaunch& L, std::span<const int64_t> counts, const Stream& s) {
  const std::vector<Active> act = active_experts(counts);
  if (act.empty()) return;
  GroupedGemmPath path = configured_path();
  const bool equal = uniform(act, counts.size());
  if (path == GroupedGemmPath::kAuto) path = auto_path(act, counts, equal);
  switch (path) {
    case GroupedGemmPath::kStridedBatched:
      PRIMUS_CHECK(
          equal, "{}: the strided-batched grouped GEMM needs the same non-zero token count for every expert",
          L.op);
      run_strided_batched(L, act, s);
      break;
    case GroupedGemmPath::kCublasGrouped:
      if (!run_cublas_grouped(L, act, s)) {
        static std::once_flag warned;
        std::call_once(warned, [&] {
          log::warn("{}: cublasGemmGroupedBatchedEx does not support {} x {} -> {}; looping over cuBLASLt",
                    L.op, dtype_name(L.ab_type), dtype_name(L.ab_type), dtype_name(L.c_type));
        });
        path = GroupedGemmPath::kLtLoop;
        run_lt_loop(L, act, s);
      }
      break;
    case GroupedGemmPath::kLtStreams:
      run_lt_streams(L, act, s);
      break;
    default:
      path = GroupedGemmPath::kLtLoop;
      run_lt_loop(L, act, s);
      break;
  }
  g_last_path.store(path);
}

void check_gpu(const char* op, const char* name, const Tensor& t, DType dtype, const Stream& s) {
  PRIMUS_CHECK(t.device() == s.device, "{}: {} is on {} but the stream is on {}", op, name, t.device().str(),
               s.device.str());
  PRIMUS_CHECK(t.dtype() == dtype, "{}: {} must be {} on the GPU, got {}", op, name, dtype_name(dtype),
               t.describe());
}

PointerOperand weights(const Tensor& w) {
  return {static_cast<const char*>(w.data_ptr()),
          static_cast<int64_t>(w.size(1) * w.size(2) * dtype_size(w.dtype())), 0};
}
PointerOperand tokens(const Tensor& t) {
  return {static_cast<const char*>(t.data_ptr()), 0, static_cast<int64_t>(t.size(1) * dtype_size(t.dtype()))};
}

// Zeros the rows of a [rows, cols] output from `from` on (padding rows past the experts' rows).
void zero_rows_from(Tensor& t, int64_t from, const Stream& s) {
  if (from >= t.size(0) || t.size(1) == 0) return;
  const size_t row_bytes = static_cast<size_t>(t.size(1)) * dtype_size(t.dtype());
  device_memset(static_cast<char*>(t.data_ptr()) + from * row_bytes, 0, (t.size(0) - from) * row_bytes, s);
}

int64_t total_of(std::span<const int64_t> counts) {
  int64_t t = 0;
  for (int64_t c : counts) t += c;
  return t;
}

}  // namespace

void set_grouped_gemm_path(GroupedGemmPath p) {
  g_path.store(p);
}
GroupedGemmPath last_grouped_gemm_path() {
  return g_last_path.load();
}
const char* grouped_gemm_path_name(GroupedGemmPath p) {
  switch (p) {
    case GroupedGemmPath::kAuto:
      return "auto";
    case GroupedGemmPath::kCublasGrouped:
      return "grouped";
    case GroupedGemmPath::kStridedBatched:
      return "batched";
    case GroupedGemmPath::kLtLoop:
      return "loop";
    case GroupedGemmPath::kLtStreams:
      return "streams";
  }
  return "?";
}
GroupedGemmPath grouped_gemm_path_from_name(const std::string& name) {
  for (GroupedGemmPath p :
       {GroupedGemmPath::kAuto, GroupedGemmPath::kCublasGrouped, GroupedGemmPath::kStridedBatched,
        GroupedGemmPath::kLtLoop, GroupedGemmPath::kLtStreams})
    if (name == grouped_gemm_path_name(p)) return p;
  throw ConfigError(fmt::format(
      "grouped GEMM path '{}' (PRIMUS_GROUPED_GEMM): expected auto, grouped, batched, loop or streams",
      name));
}

void grouped_gemm_forward(const Tensor& x, const Tensor& w, std::span<const int64_t> counts, Tensor& y,
                          const Stream& s) {
  constexpr const char* op = "grouped_gemm_forward";
  check_gpu(op, "x", x, DType::kBF16, s);
  check_gpu(op, "w", w, DType::kBF16, s);
  check_gpu(op, "y", y, DType::kBF16, s);
  const int64_t n_out = w.size(1), k = w.size(2), total = total_of(counts);
  zero_rows_from(y, total, s);
  if (total == 0 || n_out == 0) return;
  if (k == 0) {  // an empty product
    zero_rows_from(y, 0, s);
    return;
  }
  GroupedLaunch L;
  L.op = op;
  L.trans_a = true;
  L.m = n_out;
  L.k = k;
  L.var = 1;
  L.lda = k;
  L.ldb = k;
  L.ldc = n_out;
  L.a = weights(w);
  L.b = tokens(x);
  L.c = tokens(y);
  run(L, counts, s);
}

void grouped_gemm_backward_input(const Tensor& dy, const Tensor& w, std::span<const int64_t> counts,
                                 Tensor& dx, const Stream& s) {
  constexpr const char* op = "grouped_gemm_backward_input";
  check_gpu(op, "dy", dy, DType::kBF16, s);
  check_gpu(op, "w", w, DType::kBF16, s);
  check_gpu(op, "dx", dx, DType::kBF16, s);
  const int64_t n_out = w.size(1), k = w.size(2), total = total_of(counts);
  zero_rows_from(dx, total, s);
  if (total == 0 || k == 0) return;
  if (n_out == 0) {
    zero_rows_from(dx, 0, s);
    return;
  }
  GroupedLaunch L;
  L.op = op;
  L.m = k;
  L.k = n_out;
  L.var = 1;
  L.lda = k;
  L.ldb = n_out;
  L.ldc = k;
  L.a = weights(w);
  L.b = tokens(dy);
  L.c = tokens(dx);
  run(L, counts, s);
}

void grouped_gemm_backward_weight(const Tensor& dy, const Tensor& x, std::span<const int64_t> counts,
                                  Tensor& dw, const Stream& s, bool accumulate) {
  constexpr const char* op = "grouped_gemm_backward_weight";
  check_gpu(op, "dy", dy, DType::kBF16, s);
  check_gpu(op, "x", x, DType::kBF16, s);
  check_gpu(op, "dw", dw, DType::kF32, s);
  const int64_t n_out = dw.size(1), k = dw.size(2);
  if (n_out == 0 || k == 0) return;
  if (!accumulate) {
    // An expert without rows has a zero gradient; the GEMMs below overwrite every other expert's block.
    const size_t block = static_cast<size_t>(n_out * k) * sizeof(float);
    for (size_t e = 0; e < counts.size(); ++e)
      if (counts[e] == 0) device_memset(static_cast<char*>(dw.data_ptr()) + e * block, 0, block, s);
  }
  GroupedLaunch L;
  L.op = op;
  L.trans_b = true;
  L.m = k;
  L.n = n_out;
  L.var = 2;
  L.lda = k;
  L.ldb = n_out;
  L.ldc = k;
  L.a = tokens(x);
  L.b = tokens(dy);
  L.c = weights(dw);
  L.c_type = DType::kF32;
  L.beta = accumulate ? 1.0f : 0.0f;
  run(L, counts, s);
}

}  // namespace primus::ops::cuda
