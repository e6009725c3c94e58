// primus_gpu_tests [--seed N] [--quick] [family ...]
// Runs every registered op family (or the named ones) on GPU 0, prints one table, exits 1 on any failure.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "bench/event_timing.h"
#include "core/cuda_check.h"
#include "core/device.h"
#include "gpu/gpu_test.h"

namespace primus::gputest {

namespace {
std::vector<std::pair<std::string, CaseFn>>& registry() {
  static std::vector<std::pair<std::string, CaseFn>> r;
  return r;
}
}  // namespace

int register_family(const char* family, CaseFn fn) {
  registry().emplace_back(family, std::move(fn));
  return 0;
}

bool CaseResult::pass() const {
  return kind != RowKind::kChecked || (std::isfinite(rel_err) && rel_err <= tol);
}

Tensor Context::randn_cpu(const Shape& shape, DType dtype, double scale) {
  Tensor t = Tensor::empty(shape, DType::kF64);
  std::normal_distribution<double> nd(0.0, scale);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = nd(rng);
  return dtype == DType::kF64 ? t : cpu_cast(t, dtype);
}

Tensor Context::randint_cpu(const Shape& shape, int32_t hi) {
  Tensor t = Tensor::empty(shape, DType::kI32);
  std::uniform_int_distribution<int32_t> ud(0, hi - 1);
  int32_t* p = t.data<int32_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = ud(rng);
  return t;
}

Tensor Context::to_gpu(const Tensor& cpu, DType dtype) {
  Tensor host = cpu.dtype() == dtype ? cpu : cpu_cast(cpu, dtype);
  return host.to(stream);
}

Tensor Context::poisoned(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, stream);
  // 0xFF bytes are NaN in f32/f64/bf16/f16 and -1 in integers: any element the op fails to write stands out.
  device_memset(t.data_ptr(), 0xFF, t.nbytes(), stream);
  return t;
}

Tensor Context::to_cpu_f32(const Tensor& t) {
  Tensor host = t.device().is_cpu() ? t : t.to(Stream::cpu());
  return host.dtype() == DType::kF32 ? host : cpu_cast(host, DType::kF32);
}

double Context::check(const std::string& family, const std::string& name, const Tensor& gpu,
                      const Tensor& ref, double tol, const std::string& note) {
  stream_sync(stream);
  CaseResult r;
  r.family = family;
  r.name = name;
  r.tol = tol;
  r.note = note;
  if (gpu.numel() != ref.numel()) {
    r.rel_err = INFINITY;
    r.note = fmt::format("size mismatch: gpu {} vs ref {}", gpu.describe(), ref.describe());
  } else {
    Tensor g = gpu.device().is_cpu() ? gpu : gpu.to(Stream::cpu());
    std::vector<double> a = g.to_vector<double>(), b = ref.to_vector<double>();
    double num = 0, den = 0;
    bool finite = true;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!std::isfinite(a[i])) finite = false;
      double d = a[i] - b[i];
      num += d * d;
      den += b[i] * b[i];
    }
    r.rel_err = !finite ? INFINITY : (den > 0 ? std::sqrt(num / den) : std::sqrt(num));
  }
  results.push_back(r);
  return r.rel_err;
}

void Context::record(const std::string& family, const std::string& name, double rel_err, double tol,
                     const std::string& note) {
  CaseResult r;
  r.family = family;
  r.name = name;
  r.rel_err = rel_err;
  r.tol = tol;
  r.note = note;
  results.push_back(r);
}

void Context::timing(const std::string& family, const std::string& name, double gpu_ms, double rate,
                     const std::string& rate_unit, const std::string& note) {
  CaseResult r;
  r.kind = RowKind::kTiming;
  r.family = family;
  r.name = name;
  r.gpu_ms = gpu_ms;
  r.gbps_or_tflops = rate;
  r.rate_unit = rate_unit;
  r.note = note;
  results.push_back(r);
}

void Context::skip(const std::string& family, const std::string& name, const std::string& why) {
  CaseResult r;
  r.kind = RowKind::kSkipped;
  r.family = family;
  r.name = name;
  r.note = "skipped: " + why;
  results.push_back(r);
}

void Context::info(const std::string& family, const std::string& name, const std::string& note) {
  CaseResult r;
  r.kind = RowKind::kInfo;
  r.family = family;
  r.name = name;
  r.note = note;
  results.push_back(r);
}

double Context::time_ms(const std::function<void()>& fn, int warmup, int iters) {
  return bench::time_runs([&](int) { fn(); }, warmup, iters, stream).median_ms;
}

}  // namespace primus::gputest

int main(int argc, char** argv) {
  using namespace primus;
  using namespace primus::gputest;
  uint64_t seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  bool quick = false;
  std::set<std::string> only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
    } else {
      only.insert(argv[i]);
    }
  }
  if (!cuda_available()) {
    fmt::print(stderr, "primus_gpu_tests: no GPU visible; nothing to test\n");
    return 2;
  }
  Context ctx{cuda_compute_stream(0), std::mt19937_64(seed), quick, {}};
  cudaDeviceProp prop;
  PRIMUS_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  fmt::print("primus_gpu_tests on {} (seed {})\n", prop.name, seed);
  int crashed = 0;
  for (auto& [family, fn] : registry()) {
    if (!only.empty() && !only.count(family)) continue;
    try {
      fn(ctx);
    } catch (const std::exception& e) {
      ++crashed;
      CaseResult r;
      r.family = family;
      r.name = "(exception)";
      r.rel_err = INFINITY;
      r.note = e.what();
      ctx.results.push_back(r);
    }
  }
  int failed = 0;
  std::map<RowKind, int> rows;
  fmt::print("\n{:<12} {:<48} {:>10} {:>8} {:>9} {:>12}  {}\n", "family", "case", "rel_err", "tol", "ms",
             "rate", "result");
  for (const auto& r : ctx.results) {
    ++rows[r.kind];
    const bool checked = r.kind == RowKind::kChecked;
    const bool ok = r.pass();
    failed += !ok;
    std::string rate = r.gbps_or_tflops > 0 ? fmt::format("{:.1f} {}", r.gbps_or_tflops, r.rate_unit) : "";
    std::string ms = r.gpu_ms > 0 ? fmt::format("{:.3f}", r.gpu_ms) : "";
    const char* result = !checked ? (r.kind == RowKind::kTiming ? "timing"
                                     : r.kind == RowKind::kInfo ? "info"
                                                                : "skipped")
                                  : (ok ? "ok" : "FAIL");
    fmt::print("{:<12} {:<48} {:>10} {:>8} {:>9} {:>12}  {}{}\n", r.family, r.name,
               checked ? fmt::format("{:.2e}", r.rel_err) : "", checked ? fmt::format("{:.0e}", r.tol) : "",
               ms, rate, result, r.note.empty() ? "" : "  (" + r.note + ")");
  }
  // Only checked cases are counted as tests; the other rows are reported apart.
  fmt::print(
      "\n{} checked cases, {} failed, {} families crashed; {} timing, {} info, {} skipped rows (seed {})\n",
      rows[RowKind::kChecked], failed, crashed, rows[RowKind::kTiming], rows[RowKind::kInfo],
      rows[RowKind::kSkipped], seed);
  return failed || crashed ? 1 : 0;
}
