// cuBLASLt plumbing: handles, workspaces, plan cache, heuristic and tuned algorithms. See gemm_lt.h.
#include "ops/cuda/gemm_lt.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/cuda_check.h"
#include "core/error.h"
#include "core/log.h"

namespace primus::detail {
void throw_cublaslt_error(cublasStatus_t st, const char* expr, const char* file, int line,
                          const std::string& context) {
  const char* base = std::strrchr(file, '/');
  std::string msg = fmt::format("cuBLASLt error {} ({}) in {}", cublasLtGetStatusName(st),
                                cublasLtGetStatusString(st), expr);
  if (!context.empty()) msg += " for " + context;
  throw Error(ErrorKind::kRuntime, msg, fmt::format("{}:{}", base ? base + 1 : file, line));
}
}  // namespace primus::detail

namespace primus::ops::cuda::lt {

namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kFP8E4M3:
      return CUDA_R_8F_E4M3;
    case DType::kFP8E5M2:
      return CUDA_R_8F_E5M2;
    default:
      break;
  }
  PRIMUS_FAIL("cuBLASLt GEMM: unsupported dtype {}", dtype_name(t));
}

// Largest power of two (capped at 256) dividing the address: cuBLASLt picks vectorised kernels by it.
uint16_t alignment_of(const void* p) {
  if (!p) return 256;
  uintptr_t u = reinterpret_cast<uintptr_t>(p);
  uintptr_t low = u & (~u + 1);
  return static_cast<uint16_t>(low >= 256 ? 256 : low);
}

// SMs the GEMMs should leave to a concurrent stream (0 = all SMs); see set_sm_count_target. It is set on a
// plan's descriptor at launch and never changes the plan's algorithm: the persistent kernels size their grid
// by it, with the same tile and summation order, so results do not depend on it. (Asking the heuristic again
// under the target picked other kernels and changed results: docs/performance.md, 07:12Z.)
std::atomic<int> g_sm_count_target{0};

struct PlanKey {
  Problem p;
  uint16_t align[5] = {0, 0, 0, 0, 0};  // a, b, c, d, bias/bgrad
  int device = 0;
  bool operator==(const PlanKey& o) const {
    return p == o.p && device == o.device && std::memcmp(align, o.align, sizeof(align)) == 0;
  }
};

size_t hash_mix(size_t h, uint64_t v) {
  return h ^ (std::hash<uint64_t>()(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
}

struct ProblemHash {
  size_t operator()(const Problem& p) const {
    size_t h = 0;
    h = hash_mix(h, static_cast<uint64_t>(p.m));
    h = hash_mix(h, static_cast<uint64_t>(p.n));
    h = hash_mix(h, static_cast<uint64_t>(p.k));
    h = hash_mix(h, (uint64_t(p.trans_a) << 1) | uint64_t(p.trans_b) | (uint64_t(p.epilogue) << 2) |
                        (uint64_t(p.a_type) << 8) | (uint64_t(p.b_type) << 16) | (uint64_t(p.c_type) << 24));
    // Mixed in only for FP8 problems, so that every other problem hashes as it did before they existed.
    if (p.a_scale != ScaleMode::kNone || p.b_scale != ScaleMode::kNone || p.fast_accum)
      h = hash_mix(h, uint64_t(p.a_scale) | (uint64_t(p.b_scale) << 8) | (uint64_t(p.fast_accum) << 16));
    return h;
  }
};
struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    size_t h = ProblemHash()(k.p);
    for (uint16_t a : k.align) h = hash_mix(h, a);
    return hash_mix(h, static_cast<uint64_t>(k.device));
  }
};

// Descriptors of one problem in cuBLASLt's column-major view (la = our b, lb = our a), plus its algorithm.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr, ld = nullptr;
  PlanInfo info;
  bool verified = false;         // ran once successfully (a tuned algo that fails on first use falls back)
  int32_t launch_sm_target = 0;  // SM_COUNT_TARGET now set on desc by launch() (0 = unset)
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    // Destruction at process exit may come after the CUDA runtime is gone: statuses are ignored on purpose.
    if (desc) cublasLtMatmulDescDestroy(desc);
    for (auto* l : {la, lb, lc, ld})
      if (l) cublasLtMatrixLayoutDestroy(l);
  }
};

struct State {
  std::mutex mu;
  std::map<int, cublasLtHandle_t> handles;
  std::map<std::pair<int, void*>, void*> workspaces;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans;
  std::unordered_map<Problem, cublasLtMatmulAlgo_t, ProblemHash> tuned;
};

State& state() {
  static State* s = new State();  // never destroyed: plans may be used from other static destructors
  return *s;
}

class DeviceGuard {
 public:
  explicit DeviceGuard(int dev) {
    PRIMUS_CUDA_CHECK(cudaGetDevice(&prev_));
    if (prev_ != dev) PRIMUS_CUDA_CHECK(cudaSetDevice(dev));
    dev_ = dev;
  }
  ~DeviceGuard() {
    if (prev_ != dev_) cudaSetDevice(prev_);
  }

 private:
  int prev_ = 0, dev_ = 0;
};

cublasLtHandle_t handle_locked(State& st, int dev) {
  auto it = st.handles.find(dev);
  if (it != st.handles.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  PRIMUS_CUBLASLT_CHECK(cublasLtCreate(&h));
  st.handles[dev] = h;
  return h;
}

void* workspace_locked(State& st, const Stream& s) {
  auto key = std::make_pair(s.device.index, s.handle);
  auto it = st.workspaces.find(key);
  if (it != st.workspaces.end()) return it->second;
  void* p = nullptr;
  // Plain cudaMalloc: the workspace lives as long as the process and must not depend on a stream's pool.
  PRIMUS_CUDA_CHECK(cudaMalloc(&p, kWorkspaceBytes));
  st.workspaces[key] = p;
  return p;
}

PlanKey make_key(const Problem& p, const Operands& o, int device) {
  PlanKey k;
  k.p = p;
  k.device = device;
  k.align[0] = alignment_of(o.a);
  k.align[1] = alignment_of(o.b);
  k.align[2] = alignment_of(o.c ? o.c : o.d);
  k.align[3] = alignment_of(o.d);
  k.align[4] = p.epilogue == Epilogue::kBias    ? alignment_of(o.bias)
               : p.epilogue == Epilogue::kBgrad ? alignment_of(o.bgrad)
                                                : 256;
  return k;
}

int32_t lt_scale_mode(ScaleMode m) {
  switch (m) {
    case ScaleMode::kScalar:
      return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    case ScaleMode::kOuterVec:
      return CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    case ScaleMode::kVec128:
      return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case ScaleMode::kBlk128x128:
      return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    case ScaleMode::kNone:
      break;
  }
  PRIMUS_FAIL("cuBLASLt GEMM: no cuBLASLt scale mode for '{}'", scale_mode_name(m));
}

// The per-call pointers that live on the matmul descriptor: the epilogue's vector and the FP8 scales (our b's
// are cuBLASLt's A scales, our a's its B scales). Nothing is set for a problem that has neither.
void set_call_pointers(Plan& plan, const Problem& p, const Operands& o) {
  if (p.epilogue != Epilogue::kNone) {
    const void* ptr = p.epilogue == Epilogue::kBias ? o.bias : static_cast<const void*>(o.bgrad);
    PRIMUS_CUBLASLT_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr, sizeof(ptr)));
  }
  if (p.b_scale != ScaleMode::kNone)
    PRIMUS_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                         &o.b_scale, sizeof(o.b_scale)));
  if (p.a_scale != ScaleMode::kNone)
    PRIMUS_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                         &o.a_scale, sizeof(o.a_scale)));
}

void build_descriptors(Plan& plan, const Problem& p) {
  const cublasOperation_t op_la = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our b
  const cublasOperation_t op_lb = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B is our a
  PRIMUS_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  PRIMUS_CUBLASLT_CHECK(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_la, sizeof(op_la)));
  PRIMUS_CUBLASLT_CHECK(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_lb, sizeof(op_lb)));
  if (p.epilogue != Epilogue::kNone) {
    cublasLtEpilogue_t epi =
        p.epilogue == Epilogue::kBias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_BGRADB;
    PRIMUS_CUBLASLT_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    int32_t bias_type = cuda_type(p.c_type);
    PRIMUS_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                         &bias_type, sizeof(bias_type)));
  }
  // FP8: the scale modes (our b is cuBLASLt's A, our a its B) and fast accumulation. Untouched otherwise.
  if (p.b_scale != ScaleMode::kNone) {
    const int32_t mode = lt_scale_mode(p.b_scale);
    PRIMUS_CUBLASLT_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
  }
  if (p.a_scale != ScaleMode::kNone) {
    const int32_t mode = lt_scale_mode(p.a_scale);
    PRIMUS_CUBLASLT_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
  }
  if (p.fast_accum) {
    const int8_t fast = 1;
    PRIMUS_CUBLASLT_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  }
  // Stored (pre-op) shapes in column-major terms: a row-major [R, C] buffer is a column-major [C, R] one, ld
  // = C.
  const uint64_t la_rows = p.trans_b ? p.k : p.n, la_cols = p.trans_b ? p.n : p.k;
  const uint64_t lb_rows = p.trans_a ? p.m : p.k, lb_cols = p.trans_a ? p.k : p.m;
  PRIMUS_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&plan.la, cuda_type(p.b_type), la_rows, la_cols, la_rows));
  PRIMUS_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&plan.lb, cuda_type(p.a_type), lb_rows, lb_cols, lb_rows));
  PRIMUS_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&plan.lc, cuda_type(p.c_type), p.n, p.m, p.n));
  PRIMUS_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&plan.ld, cuda_type(p.c_type), p.n, p.m, p.n));
}

std::vector<cublasLtMatmulHeuristicResult_t> query_heuristic(cublasLtHandle_t h, Plan& plan,
                                                             const PlanKey& key, int count) {
  cublasLtMatmulPreference_t pref = nullptr;
  PRIMUS_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, cublasStatus_t (*)(cublasLtMatmulPreference_t)> guard(
      pref, cublasLtMatmulPreferenceDestroy);
  uint64_t ws = kWorkspaceBytes;
  PRIMUS_CUBLASLT_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  // Our a is cuBLASLt's B and our b its A.
  const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  const uint32_t aligns[4] = {key.align[1], key.align[0], key.align[2], key.align[3]};
  for (int i = 0; i < 4; ++i)
    PRIMUS_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &aligns[i], sizeof(uint32_t)));
  std::vector<cublasLtMatmulHeuristicResult_t> res(static_cast<size_t>(count));
  int got = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, plan.desc, plan.la, plan.lb, plan.lc, plan.ld, pref,
                                                     count, res.data(), &got);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED)
    got = 0;  // "no heuristic for this configuration": reported by the caller
  else if (st != CUBLAS_STATUS_SUCCESS)
    detail::throw_cublaslt_error(st, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__, key.p.str());
  res.resize(static_cast<size_t>(got));
  std::erase_if(res, [](const auto& r) { return r.state != CUBLAS_STATUS_SUCCESS; });
  return res;
}

bool check_algo(cublasLtHandle_t h, Plan& plan, const cublasLtMatmulAlgo_t& algo, size_t* ws) {
  cublasLtMatmulHeuristicResult_t r{};
  cublasStatus_t st = cublasLtMatmulAlgoCheck(h, plan.desc, plan.la, plan.lb, plan.lc, plan.ld, &algo, &r);
  if (st != CUBLAS_STATUS_SUCCESS || r.workspaceSize > kWorkspaceBytes) return false;
  if (ws) *ws = r.workspaceSize;
  return true;
}

[[noreturn]] void throw_no_algorithm(const PlanKey& key) {
  throw Error(
      ErrorKind::kRuntime,
      fmt::format("cuBLASLt has no algorithm for GEMM {} (operand alignment a={} b={} c={} d={} bytes)",
                  key.p.str(), key.align[0], key.align[1], key.align[2], key.align[3]),
      {}, "check the dtypes and leading dimensions; an unusual epilogue/dtype pairing may be unsupported");
}

// Leaves plan.info.supported = false when the heuristic offers nothing (remembered, so the query is not
// repeated).
void choose_heuristic(cublasLtHandle_t h, Plan& plan, const PlanKey& key) {
  auto res = query_heuristic(h, plan, key, 1);
  if (res.empty()) {
    plan.info.supported = false;
    plan.info.tuned = false;
    plan.info.description = "none";
    return;
  }
  plan.info.supported = true;
  plan.info.algo = res[0].algo;
  plan.info.workspace_bytes = res[0].workspaceSize;
  plan.info.tuned = false;
  plan.info.description = algo_description(res[0].algo);
}

// The algorithm's minimum pointer alignments (cuBLASLt's A is our b, its B our a) against the operands'.
bool alignment_ok(const cublasLtMatmulAlgo_t& algo, const PlanKey& key) {
  const cublasLtMatmulAlgoCapAttributes_t caps[4] = {
      CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_A_BYTES, CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_C_BYTES, CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_D_BYTES};
  const uint16_t have[4] = {key.align[1], key.align[0], key.align[2], key.align[3]};
  for (int i = 0; i < 4; ++i) {
    uint32_t need = 256;  // unknown: assume the worst
    size_t written = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, caps[i], &need, sizeof(need), &written) !=
        CUBLAS_STATUS_SUCCESS)
      need = 256;
    if (need > have[i]) return false;
  }
  return true;
}

Plan& plan_locked(State& st, const PlanKey& key, const Operands& o, cublasLtHandle_t h) {
  auto it = st.plans.find(key);
  if (it != st.plans.end()) return *it->second;
  auto plan = std::make_unique<Plan>();
  build_descriptors(*plan, key.p);
  set_call_pointers(*plan, key.p, o);  // the heuristic reads the pointer's alignment
  auto tuned = st.tuned.find(key.p);
  size_t ws = 0;
  // AlgoCheck sees descriptors, not pointers: the algorithm's own minimum alignments are compared with these
  // operands' so that a tuned kernel never meets a pointer it cannot load from.
  if (tuned != st.tuned.end() && alignment_ok(tuned->second, key) &&
      check_algo(h, *plan, tuned->second, &ws)) {
    plan->info.algo = tuned->second;
    plan->info.workspace_bytes = ws;
    plan->info.tuned = true;
    plan->info.description = algo_description(tuned->second);
  } else {
    if (tuned != st.tuned.end())
      log::warn(
          "gemm: tuned algorithm for {} not usable here (operand alignment a={} b={} c={} d={}, or "
          "cuBLASLt's check); "
          "using the heuristic",
          key.p.str(), key.align[0], key.align[1], key.align[2], key.align[3]);
    choose_heuristic(h, *plan, key);
  }
  Plan& ref = *plan;
  st.plans.emplace(key, std::move(plan));
  return ref;
}

cublasStatus_t launch(cublasLtHandle_t h, Plan& plan, const Operands& o, const cublasLtMatmulAlgo_t& algo,
                      void* ws, const Stream& s) {
  const int32_t target = g_sm_count_target.load(std::memory_order_relaxed);
  if (target != plan.launch_sm_target) {
    PRIMUS_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET,
                                                         &target, sizeof(target)));
    plan.launch_sm_target = target;
  }
  const void* c = o.c ? o.c : o.d;
  return cublasLtMatmul(h, plan.desc, &o.alpha, o.b, plan.la, o.a, plan.lb, &o.beta, c, plan.lc, o.d, plan.ld,
                        &algo, ws, kWorkspaceBytes, cuda_stream(s));
}

void check_operands(const Problem& p, const Operands& o, const Stream& s) {
  PRIMUS_CHECK(s.device.is_cuda(), "cuBLASLt GEMM {} on a CPU stream", p.str());
  PRIMUS_CHECK(p.m > 0 && p.n > 0 && p.k > 0, "cuBLASLt GEMM {}: every dimension must be positive", p.str());
  PRIMUS_CHECK(o.a && o.b && o.d, "cuBLASLt GEMM {}: null operand", p.str());
  PRIMUS_CHECK(o.beta == 0.0f || o.c || o.d, "cuBLASLt GEMM {}: beta != 0 needs C", p.str());
  PRIMUS_CHECK(p.epilogue != Epilogue::kBias || o.bias, "cuBLASLt GEMM {}: bias epilogue without a bias",
               p.str());
  PRIMUS_CHECK(p.epilogue != Epilogue::kBgrad || o.bgrad, "cuBLASLt GEMM {}: bgrad epilogue without output",
               p.str());
  PRIMUS_CHECK(p.a_scale == ScaleMode::kNone || o.a_scale, "cuBLASLt GEMM {}: a's scale mode without a_scale",
               p.str());
  PRIMUS_CHECK(p.b_scale == ScaleMode::kNone || o.b_scale, "cuBLASLt GEMM {}: b's scale mode without b_scale",
               p.str());
}

}  // namespace

const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::kNone:
      return "none";
    case Epilogue::kBias:
      return "bias";
    case Epilogue::kBgrad:
      return "bgrad";
  }
  return "?";
}

Epilogue epilogue_from_name(const std::string& name) {
  if (name == "none") return Epilogue::kNone;
  if (name == "bias") return Epilogue::kBias;
  if (name == "bgrad") return Epilogue::kBgrad;
  throw ConfigError(fmt::format("unknown GEMM epilogue '{}' (expected none, bias or bgrad)", name));
}

const char* scale_mode_name(ScaleMode m) {
  switch (m) {
    case ScaleMode::kNone:
      return "none";
    case ScaleMode::kScalar:
      return "scalar";
    case ScaleMode::kOuterVec:
      return "outer_vec";
    case ScaleMode::kVec128:
      return "vec128";
    case ScaleMode::kBlk128x128:
      return "blk128x128";
  }
  return "?";
}

std::string Problem::str() const {
  std::string scales;
  if (a_scale != ScaleMode::kNone || b_scale != ScaleMode::kNone || fast_accum)
    scales = fmt::format(" scale={}*{}{}", scale_mode_name(a_scale), scale_mode_name(b_scale),
                         fast_accum ? " fast_accum" : "");
  return fmt::format("{}x{}x{} a={} b={} {}*{}->{}{}{}", m, n, k, trans_a ? 'T' : 'N', trans_b ? 'T' : 'N',
                     dtype_name(a_type), dtype_name(b_type), dtype_name(c_type),
                     epilogue == Epilogue::kNone ? "" : std::string(" ") + epilogue_name(epilogue), scales);
}

double Problem::min_bytes(bool reads_c) const {
  double bytes = double(m) * k * dtype_size(a_type) + double(k) * n * dtype_size(b_type) +
                 double(m) * n * dtype_size(c_type) * (reads_c ? 2 : 1);
  return bytes;
}

bool try_matmul(const Problem& p, const Operands& o, const Stream& s) {
  check_operands(p, o, s);
  State& st = state();
  PlanKey key = make_key(p, o, s.device.index);
  std::lock_guard<std::mutex> lock(st.mu);
  DeviceGuard guard(s.device.index);
  cublasLtHandle_t h = handle_locked(st, s.device.index);
  void* ws = workspace_locked(st, s);
  Plan& plan = plan_locked(st, key, o, h);
  if (!plan.info.supported) return false;
  set_call_pointers(plan, p, o);
  cublasStatus_t rc = launch(h, plan, o, plan.info.algo, ws, s);
  if (rc != CUBLAS_STATUS_SUCCESS && plan.info.tuned && !plan.verified) {
    log::warn("gemm: tuned algorithm for {} failed ({}); falling back to the heuristic", p.str(),
              cublasLtGetStatusName(rc));
    choose_heuristic(h, plan, key);
    if (!plan.info.supported) throw_no_algorithm(key);
    rc = launch(h, plan, o, plan.info.algo, ws, s);
  }
  if (rc != CUBLAS_STATUS_SUCCESS)
    detail::throw_cublaslt_error(rc, "cublasLtMatmul", __FILE__, __LINE__,
                                 p.str() + " [" + plan.info.description + "]");
  plan.verified = true;
  return true;
}

int set_sm_count_target(int sms) {
  return g_sm_count_target.exchange(sms > 0 ? sms : 0, std::memory_order_relaxed);
}

void matmul(const Problem& p, const Operands& o, const Stream& s) {
  if (!try_matmul(p, o, s)) throw_no_algorithm(make_key(p, o, s.device.index));
}

void matmul_with_algo(const Problem& p, const Operands& o, const cublasLtMatmulAlgo_t& algo,
                      const Stream& s) {
  check_operands(p, o, s);
  State& st = state();
  PlanKey key = make_key(p, o, s.device.index);
  std::lock_guard<std::mutex> lock(st.mu);
  DeviceGuard guard(s.device.index);
  cublasLtHandle_t h = handle_locked(st, s.device.index);
  void* ws = workspace_locked(st, s);
  Plan& plan = plan_locked(st, key, o, h);
  set_call_pointers(plan, p, o);
  // The plan's descriptors serve any algorithm; an unsupported plan (no heuristic result) still has them.
  cublasStatus_t rc = launch(h, plan, o, algo, ws, s);
  if (rc != CUBLAS_STATUS_SUCCESS)
    detail::throw_cublaslt_error(rc, "cublasLtMatmul", __FILE__, __LINE__,
                                 p.str() + " [" + algo_description(algo) + "]");
}

PlanInfo plan_info(const Problem& p, const Operands& o, const Stream& s) {
  check_operands(p, o, s);
  State& st = state();
  PlanKey key = make_key(p, o, s.device.index);
  std::lock_guard<std::mutex> lock(st.mu);
  DeviceGuard guard(s.device.index);
  cublasLtHandle_t h = handle_locked(st, s.device.index);
  return plan_locked(st, key, o, h).info;
}

std::vector<cublasLtMatmulHeuristicResult_t> heuristic_candidates(const Problem& p, const Operands& o,
                                                                  int count, const Stream& s) {
  check_operands(p, o, s);
  State& st = state();
  PlanKey key = make_key(p, o, s.device.index);
  std::lock_guard<std::mutex> lock(st.mu);
  DeviceGuard guard(s.device.index);
  cublasLtHandle_t h = handle_locked(st, s.device.index);
  // A scratch plan: the cached one may hold a tuned algorithm, and the query must not disturb it.
  Plan plan;
  build_descriptors(plan, p);
  set_call_pointers(plan, p, o);
  return query_heuristic(h, plan, key, count);
}

std::vector<cublasLtMatmulHeuristicResult_t> candidates_by_algo_id(const Problem& p, const Operands& o,
                                                                   const Stream& s) {
  check_operands(p, o, s);
  State& st = state();
  PlanKey key = make_key(p, o, s.device.index);
  std::lock_guard<std::mutex> lock(st.mu);
  DeviceGuard guard(s.device.index);
  cublasLtHandle_t h = handle_locked(st, s.device.index);
  Plan plan;
  build_descriptors(plan, p);
  set_call_pointers(plan, p, o);
  std::vector<int> ids(256);
  int n_ids = 0;
  if (cublasLtMatmulAlgoGetIds(h, CUBLAS_COMPUTE_32F, CUDA_R_32F, cuda_type(p.b_type), cuda_type(p.a_type),
                               cuda_type(p.c_type), cuda_type(p.c_type), static_cast<int>(ids.size()),
                               ids.data(), &n_ids) != CUBLAS_STATUS_SUCCESS)
    return {};
  cublasLtMatmulPreference_t pref = nullptr;
  PRIMUS_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, cublasStatus_t (*)(cublasLtMatmulPreference_t)>
      guard_pref(pref, cublasLtMatmulPreferenceDestroy);
  uint64_t ws = kWorkspaceBytes;
  uint32_t mode = CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID;
  PRIMUS_CUBLASLT_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  PRIMUS_CUBLASLT_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_SEARCH_MODE, &mode, sizeof(mode)));
  const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  const uint32_t aligns[4] = {key.align[1], key.align[0], key.align[2], key.align[3]};
  for (int i = 0; i < 4; ++i)
    PRIMUS_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &aligns[i], sizeof(uint32_t)));
  std::vector<cublasLtMatmulHeuristicResult_t> out;
  for (int i = 0; i < n_ids; ++i) {
    // Best configuration cuBLASLt finds for this one algorithm: candidates the top-K list (at most 8 on
    // Hopper in practice) never shows. Any refusal just means "no candidate from this id".
    cublasLtMatmulHeuristicResult_t r{};
    if (cublasLtMatmulAlgoInit(h, CUBLAS_COMPUTE_32F, CUDA_R_32F, cuda_type(p.b_type), cuda_type(p.a_type),
                               cuda_type(p.c_type), cuda_type(p.c_type), ids[i],
                               &r.algo) != CUBLAS_STATUS_SUCCESS)
      continue;
    int got = 0;
    if (cublasLtMatmulAlgoGetHeuristic(h, plan.desc, plan.la, plan.lb, plan.lc, plan.ld, pref, 1, &r, &got) !=
            CUBLAS_STATUS_SUCCESS ||
        got < 1 || r.state != CUBLAS_STATUS_SUCCESS)
      continue;
    out.push_back(r);
  }
  return out;
}

bool algo_usable(const Problem& p, const Operands& o, const cublasLtMatmulAlgo_t& algo, const Stream& s) {
  check_operands(p, o, s);
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  DeviceGuard guard(s.device.index);
  cublasLtHandle_t h = handle_locked(st, s.device.index);
  Plan plan;
  build_descriptors(plan, p);
  set_call_pointers(plan, p, o);
  return check_algo(h, plan, algo, nullptr);
}

std::string algo_description(const cublasLtMatmulAlgo_t& algo) {
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attr, auto zero) {
    decltype(zero) v = zero;
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS)
      return int64_t{-1};
    return static_cast<int64_t>(v);
  };
  return fmt::format("id={} tile={} stages={} splitk={} red={} swizzle={} custom={} inner={} cluster={}",
                     get(CUBLASLT_ALGO_CONFIG_ID, int32_t{0}), get(CUBLASLT_ALGO_CONFIG_TILE_ID, uint32_t{0}),
                     get(CUBLASLT_ALGO_CONFIG_STAGES_ID, uint32_t{0}),
                     get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, int32_t{0}),
                     get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, uint32_t{0}),
                     get(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, uint32_t{0}),
                     get(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, uint32_t{0}),
                     get(CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, uint16_t{0}),
                     get(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, uint16_t{0}));
}

std::string gpu_name(int device) {
  cudaDeviceProp prop;
  PRIMUS_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

size_t cublaslt_version() {
  return cublasLtGetVersion();
}

void install_tuned_algo(const Problem& p, const cublasLtMatmulAlgo_t& algo) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  st.tuned[p] = algo;
  std::erase_if(st.plans, [&](const auto& kv) { return kv.first.p == p; });
}

void remove_tuned_algo(const Problem& p) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  st.tuned.erase(p);
  std::erase_if(st.plans, [&](const auto& kv) { return kv.first.p == p; });
}

void clear_tuned_algos() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  st.tuned.clear();
  st.plans.clear();
}

size_t tuned_algo_count() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  return st.tuned.size();
}

}  // namespace primus::ops::cuda::lt
