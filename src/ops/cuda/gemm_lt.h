#pragma once
// The cuBLASLt layer under ops/cuda/gemm_cuda.cpp, the tuner (bench/gemm_tuning) and the GEMM benchmarks.
//
// Problems are described in the row-major terms of ops/gemm.h: c[M, N] = alpha * op(a) @ op(b) + beta * c_in,
// with op(a) [M, K] and op(b) [K, N]. The swap to cuBLASLt's column-major view happens once, inside
// gemm_lt_cuda.cpp: cuBLASLt computes c^T = op(b)^T op(a)^T, i.e. its "A" is our b and its "B" is our a, with
// m = N and n = M.
//
// Per device: one cuBLASLt handle; per (device, stream): one 32 MiB workspace (Hopper kernels want >= 32 MiB,
// and a workspace shared by two streams would race). Per (problem, operand alignment): a plan holding the
// matmul and layout descriptors and the chosen algorithm, built once, so that the hot path creates no
// descriptor. FP8 problems (ops/cuda/fp8_gemm_cuda.cpp) add a scale mode per operand and the
// fast-accumulation flag to the problem, and their scale pointers to the operands (docs/kernels/fp8.md, "FP8
// GEMM").
#include <cublasLt.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"

namespace primus::detail {
[[noreturn]] void throw_cublaslt_error(cublasStatus_t st, const char* expr, const char* file, int line,
                                       const std::string& context = {});
}  // namespace primus::detail

// Every cuBLASLt call goes through this: a failure names the call, file:line and cuBLASLt's status name and
// text.
#define PRIMUS_CUBLASLT_CHECK(expr)                                                     \
  do {                                                                                  \
    cublasStatus_t primus_lt_st_ = (expr);                                              \
    if (primus_lt_st_ != CUBLAS_STATUS_SUCCESS)                                         \
      ::primus::detail::throw_cublaslt_error(primus_lt_st_, #expr, __FILE__, __LINE__); \
  } while (0)

namespace primus::ops::cuda::lt {

// Epilogues, named in row-major terms.
enum class Epilogue : uint8_t {
  kNone = 0,
  kBias = 1,  // c[i, j] += bias[j] (bias length N, dtype = c's dtype); cuBLASLt EPILOGUE_BIAS
  kBgrad =
      2,  // also writes bgrad[i] = sum_k op(a)[i, k] (length M, f32 = c's dtype); cuBLASLt EPILOGUE_BGRADB
};
const char* epilogue_name(Epilogue e);  // "none", "bias", "bgrad"
Epilogue epilogue_from_name(const std::string& name);

// How cuBLASLt scales an FP8 operand, named per our (row-major) a and b; see ops/fp8.h for the layouts.
// kNone sets no scale attribute at all (the 16/32-bit GEMMs), so their descriptors are what they were before
// FP8 existed.
enum class ScaleMode : uint8_t {
  kNone = 0,
  kScalar = 1,      // one f32 for the operand: CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F
  kOuterVec = 2,    // one f32 per row of the operand (M for a, N for b): OUTER_VEC_32F
  kVec128 = 3,      // one f32 per 1 x 128 run along K, [ceil(K / 128), rows] rows fastest: VEC128_32F
  kBlk128x128 = 4,  // one f32 per 128 x 128 block, [ceil(rows / 128), ld] K-blocks fastest: BLK128x128_32F
};
const char* scale_mode_name(ScaleMode m);  // "none", "scalar", "outer_vec", "vec128", "blk128x128"

struct Problem {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  DType a_type = DType::kBF16, b_type = DType::kBF16;
  DType c_type = DType::kBF16;  // C and D (input and output) share it
  Epilogue epilogue = Epilogue::kNone;
  // FP8 only (a_type / b_type fp8e4m3 or fp8e5m2, trans_a = false, trans_b = true: Hopper's "TN"): how each
  // operand's dequantisation multipliers (Operands::a_scale / b_scale) are laid out, and
  // CUBLASLT_MATMUL_DESC_FAST_ACCUM (no periodic promotion of the tensor cores' partial sums to f32).
  ScaleMode a_scale = ScaleMode::kNone, b_scale = ScaleMode::kNone;
  bool fast_accum = false;

  bool operator==(const Problem& o) const = default;
  // "8192x6144x4096 a=N b=T bf16*bf16->bf16 bias"; FP8 problems add " scale=vec128*blk128x128[ fast_accum]"
  std::string str() const;
  double flops() const {
    return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  }
  // Fewest bytes the GEMM moves: a, b read once, c written once (and read once when beta != 0).
  double min_bytes(bool reads_c) const;
};

// Device pointers of one call. c may equal d (in-place accumulate) or be another buffer (out-of-place, e.g.
// the residual add: d = x w^T + 1 * residual).
struct Operands {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;  // may be nullptr when beta == 0
  void* d = nullptr;
  const void* bias = nullptr;  // Epilogue::kBias
  void* bgrad = nullptr;       // Epilogue::kBgrad (overwritten, not accumulated)
  // f32 dequantisation multipliers of our a and b (Problem::a_scale / b_scale != kNone). cuBLASLt's A is our
  // b, so b_scale goes to CUBLASLT_MATMUL_DESC_A_SCALE_POINTER and a_scale to B_SCALE_POINTER.
  const void* a_scale = nullptr;
  const void* b_scale = nullptr;
  float alpha = 1.0f;
  float beta = 0.0f;
};

// Which algorithm a plan runs and where it came from.
struct PlanInfo {
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;
  bool tuned = false;     // from the tuning table rather than the heuristic
  bool supported = true;  // false: cuBLASLt offered no algorithm
  std::string description;
};

constexpr size_t kWorkspaceBytes = 32u << 20;

// Runs the problem with the cached plan for its (problem, alignment, device) key. Throws primus::Error naming
// the problem when cuBLASLt offers no algorithm for it.
void matmul(const Problem& p, const Operands& ops, const Stream& s);
// GEMMs launched from now on target `sms` SMs (cuBLASLt's SM_COUNT_TARGET: its persistent kernels size their
// grid by it), leaving the rest to work on another stream; 0 restores all SMs. Process-wide. Each plan keeps
// its algorithm (heuristic or tuned), so results do not change with the target (gemm_lt_cuda.cpp). Returns
// the target it replaces.
int set_sm_count_target(int sms);
// As matmul(), but returns false (running nothing) when cuBLASLt has no algorithm for the problem.
bool try_matmul(const Problem& p, const Operands& ops, const Stream& s);
// Runs with an explicit algorithm (tuner, benchmarks). The algorithm must fit in kWorkspaceBytes.
void matmul_with_algo(const Problem& p, const Operands& ops, const cublasLtMatmulAlgo_t& algo,
                      const Stream& s);
// The plan matmul() would use for these operands (building it if needed).
PlanInfo plan_info(const Problem& p, const Operands& ops, const Stream& s);

// Up to `count` heuristic candidates, best first (index 0 is what an untuned plan runs).
std::vector<cublasLtMatmulHeuristicResult_t> heuristic_candidates(const Problem& p, const Operands& ops,
                                                                  int count, const Stream& s);
// For every algorithm id cuBLASLt has for these dtypes, the best configuration it finds for the problem
// (CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID): widens the tuner's search beyond the top-K list. May be empty.
std::vector<cublasLtMatmulHeuristicResult_t> candidates_by_algo_id(const Problem& p, const Operands& ops,
                                                                   const Stream& s);
// True if cuBLASLt accepts `algo` for the problem (cublasLtMatmulAlgoCheck) within kWorkspaceBytes.
bool algo_usable(const Problem& p, const Operands& ops, const cublasLtMatmulAlgo_t& algo, const Stream& s);
// "id=21 tile=128x256x64 stages=... splitk=1 swizzle=1 cluster=2x1x1 ws=0.0MiB" (for reports and tuning
// files).
std::string algo_description(const cublasLtMatmulAlgo_t& algo);

// Identity under which tuned algorithms are valid: the GPU's name and the cuBLASLt runtime version.
std::string gpu_name(int device);
size_t cublaslt_version();

// The tuning table: algorithms to prefer over the heuristic, keyed by problem (for this process's GPU and
// cuBLASLt, which the loader checks). Installing replaces any entry for the same problem and drops cached
// plans.
void install_tuned_algo(const Problem& p, const cublasLtMatmulAlgo_t& algo);
void remove_tuned_algo(const Problem& p);
void clear_tuned_algos();
size_t tuned_algo_count();

}  // namespace primus::ops::cuda::lt

namespace primus::ops::cuda {
// How linear_backward_weight computes dbias: kKernel (the default, also for kAuto) runs the plain GEMM and
// then the deterministic column-sum kernel (gemm_bias_grad.h); kEpilogue uses cuBLASLt's BGRADB epilogue into
// a scratch vector that is then added, and throws when cuBLASLt has no algorithm for it. Env
// PRIMUS_GEMM_DBIAS=epilogue|kernel sets the default.
enum class DbiasPath { kAuto, kEpilogue, kKernel };
void set_dbias_path(DbiasPath p);
DbiasPath last_dbias_path();  // the path the last call with a dbias took (tests and benchmarks report it)
}  // namespace primus::ops::cuda
