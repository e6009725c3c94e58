#pragma once
// primus_gpu_tests: every op family on the GPU against its CPU reference (the truth), fresh random inputs
// each run, outputs poisoned with NaN before each GPU call, relative error ||gpu - ref|| / ||ref|| against a
// per-dtype tolerance. NaN never passes. Each family registers its cases from its own file with
// PRIMUS_GPU_TEST.
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace primus::gputest {

// What a row of the table is. Only checked cases count as tests in the summary; timing rows, information
// rows and skips are listed (and counted) apart, so a run cannot look bigger than what it verified.
enum class RowKind { kChecked, kTiming, kInfo, kSkipped };

struct CaseResult {
  RowKind kind = RowKind::kChecked;
  std::string family;
  std::string name;    // e.g. "rmsnorm_fwd R=127 D=33"
  double rel_err = 0;  // ||gpu - ref|| / ||ref|| (NaN/Inf anywhere => +inf)
  double tol = 0;
  double gpu_ms = 0;          // optional timing of the GPU call (0 = not timed)
  double gbps_or_tflops = 0;  // optional napkin rate (bandwidth or TFLOP/s); 0 = none
  std::string rate_unit;      // "GB/s" or "TFLOP/s"
  std::string note;
  bool pass() const;  // timing, information and skipped rows always pass
};

struct Context {
  Stream stream;        // the GPU compute stream
  std::mt19937_64 rng;  // seeded per run (seed printed in the table header)
  bool quick = false;   // --quick: skip the largest model-size cases
  std::vector<CaseResult> results;

  // Random CPU tensor (f32 or f64 or bf16) with N(0, scale^2) entries / i32 uniform in [0, hi).
  Tensor randn_cpu(const Shape& shape, DType dtype, double scale = 1.0);
  Tensor randint_cpu(const Shape& shape, int32_t hi);
  // GPU copy of a CPU tensor converted to `dtype` (bf16 rounding happens on the host).
  Tensor to_gpu(const Tensor& cpu, DType dtype);
  // A GPU tensor filled with NaN (floating) or 0x7fffffff (i32) so that unwritten outputs are caught.
  Tensor poisoned(const Shape& shape, DType dtype);
  // CPU f32 copy of any tensor (bf16 / f32 / f64, CPU or GPU).
  Tensor to_cpu_f32(const Tensor& t);
  // Records ||gpu - ref|| / ||ref|| (both converted to f64 on the host). Returns the relative error.
  double check(const std::string& family, const std::string& name, const Tensor& gpu, const Tensor& ref,
               double tol, const std::string& note = {});
  // Records a case whose error the caller computed (a scalar check, a pass/fail as 0 / +inf, a skip).
  void record(const std::string& family, const std::string& name, double rel_err, double tol,
              const std::string& note = {});
  // A row that checks nothing: a measurement worth printing, a skipped case (`why`), or a plain fact.
  void timing(const std::string& family, const std::string& name, double gpu_ms, double rate = 0,
              const std::string& rate_unit = {}, const std::string& note = {});
  void skip(const std::string& family, const std::string& name, const std::string& why);
  void info(const std::string& family, const std::string& name, const std::string& note);
  // Times fn (already warmed up once by the caller or not) with CUDA events: median of `iters` runs, in ms.
  double time_ms(const std::function<void()>& fn, int warmup = 3, int iters = 10);
};

// Per-dtype tolerances (design.md §6): f32 1e-5; bf16 1e-2.
constexpr double kTolF32 = 1e-5;
constexpr double kTolBF16 = 1e-2;

using CaseFn = std::function<void(Context&)>;
int register_family(const char* family, CaseFn fn);

}  // namespace primus::gputest

#define PRIMUS_GPU_TEST_CONCAT2(a, b) a##b
#define PRIMUS_GPU_TEST_CONCAT(a, b) PRIMUS_GPU_TEST_CONCAT2(a, b)
// PRIMUS_GPU_TEST(norm) { ... uses ctx ... }
#define PRIMUS_GPU_TEST(family)                                                                \
  static void PRIMUS_GPU_TEST_CONCAT(gpu_cases_, family)(::primus::gputest::Context & ctx);    \
  static int PRIMUS_GPU_TEST_CONCAT(gpu_reg_, family) =                                        \
      ::primus::gputest::register_family(#family, PRIMUS_GPU_TEST_CONCAT(gpu_cases_, family)); \
  static void PRIMUS_GPU_TEST_CONCAT(gpu_cases_, family)(::primus::gputest::Context & ctx)
