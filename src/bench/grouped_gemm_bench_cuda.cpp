// Grouped GEMM benchmark, GPU side: random operands, a sampled f64 check of every (load, op, path) before it
// is timed, CUDA-event medians, and a dense cuBLASLt GEMM of the same FLOPs for comparison. See
// grouped_gemm_bench.h.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "bench/event_timing.h"
#include "bench/gemm_timing.h"
#include "bench/grouped_gemm_bench.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "core/log.h"
#include "ops/cuda/grouped_gemm_cuda.h"

namespace primus::bench {

namespace {

using ops::cuda::GroupedGemmPath;

// Bound on the sampled check's relative error: bf16 outputs (8-bit mantissa) of f32-accumulated products.
constexpr double kCheckTol = 1e-2;

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// `count` elements of a device matrix starting at p, `stride` elements apart, as floats.
std::vector<double> fetch(const void* p, int64_t count, int64_t stride, DType t, const Stream& s) {
  const size_t es = dtype_size(t);
  std::vector<uint8_t> raw(static_cast<size_t>(count) * es);
  PRIMUS_CUDA_CHECK(
      cudaMemcpy2DAsync(raw.data(), es, p, stride * es, es, count, cudaMemcpyDeviceToHost, cuda_stream(s)));
  PRIMUS_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(s)));
  std::vector<double> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    if (t == DType::kF32) {
      float f;
      std::memcpy(&f, raw.data() + i * 4, 4);
      out[i] = f;
    } else {
      uint16_t b;
      std::memcpy(&b, raw.data() + i * 2, 2);
      out[i] = bf16_to_float(bf16_t{b});
    }
  }
  return out;
}

const char* at(const Tensor& t, int64_t elem) {
  return static_cast<const char*>(t.data_ptr()) + elem * static_cast<int64_t>(dtype_size(t.dtype()));
}

struct Operands {
  Tensor x, w, dy, y, dx, dw;
};

// Checks sampled outputs of `op` against f64 dot products on the host: for three non-empty experts (first,
// middle, last), entries at random (row, column) / (out, in) positions. Returns ||got - ref|| / ||ref||.
double sampled_check(const std::string& op, const Operands& o, const std::vector<int64_t>& counts,
                     std::mt19937_64& rng, const Stream& s) {
  const int64_t n = o.w.size(1), k = o.w.size(2);
  std::vector<int64_t> first(counts.size());
  int64_t row = 0;
  std::vector<int64_t> busy;
  for (size_t e = 0; e < counts.size(); ++e) {
    first[e] = row;
    row += counts[e];
    if (counts[e] > 0) busy.push_back(static_cast<int64_t>(e));
  }
  if (busy.empty()) return 0;
  const int64_t picks[3] = {busy.front(), busy[busy.size() / 2], busy.back()};
  double num = 0, den = 0;
  bool finite = true;
  for (int64_t e : picks) {
    for (int sample = 0; sample < 8; ++sample) {
      const int64_t r = first[e] + static_cast<int64_t>(rng() % static_cast<uint64_t>(counts[e]));
      double got = 0, ref = 0;
      if (op == "fwd") {  // y[r, j] = x[r, :] . w[e, j, :]
        const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
        const auto xr = fetch(at(o.x, r * k), k, 1, DType::kBF16, s);
        const auto wj = fetch(at(o.w, (e * n + j) * k), k, 1, DType::kBF16, s);
        for (int64_t i = 0; i < k; ++i) ref += xr[i] * wj[i];
        got = fetch(at(o.y, r * n + j), 1, 1, DType::kBF16, s)[0];
      } else if (op == "dgrad") {  // dx[r, i] = dy[r, :] . w[e, :, i]
        const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(k));
        const auto dyr = fetch(at(o.dy, r * n), n, 1, DType::kBF16, s);
        const auto wi = fetch(at(o.w, e * n * k + i), n, k, DType::kBF16, s);
        for (int64_t j = 0; j < n; ++j) ref += dyr[j] * wi[j];
        got = fetch(at(o.dx, r * k + i), 1, 1, DType::kBF16, s)[0];
      } else {  // dw[e, j, i] = dy[rows of e, j] . x[rows of e, i] (overwrite)
        const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
        const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(k));
        const auto dyj = fetch(at(o.dy, first[e] * n + j), counts[e], n, DType::kBF16, s);
        const auto xi = fetch(at(o.x, first[e] * k + i), counts[e], k, DType::kBF16, s);
        for (int64_t t = 0; t < counts[e]; ++t) ref += dyj[t] * xi[t];
        got = fetch(at(o.dw, (e * n + j) * k + i), 1, 1, DType::kF32, s)[0];
      }
      finite = finite && std::isfinite(got);
      num += (got - ref) * (got - ref);
      den += ref * ref;
    }
  }
  if (!finite) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

void run_op(const std::string& op, Operands& o, const std::vector<int64_t>& counts, bool accumulate,
            const Stream& s) {
  if (op == "fwd") {
    ops::cuda::grouped_gemm_forward(o.x, o.w, counts, o.y, s);
  } else if (op == "dgrad") {
    ops::cuda::grouped_gemm_backward_input(o.dy, o.w, counts, o.dx, s);
  } else {
    ops::cuda::grouped_gemm_backward_weight(o.dy, o.x, counts, o.dw, s, accumulate);
  }
}

// A dense cuBLASLt GEMM with the op's layout and the same FLOPs (all tokens against expert 0's matrix).
double dense_ms(const std::string& op, Operands& o, int warmup, int iters, const Stream& s) {
  const int64_t t = o.x.size(0), n = o.w.size(1), k = o.w.size(2);
  lt::Problem p;
  lt::Operands d;
  if (op == "fwd") {
    p.m = t, p.n = n, p.k = k, p.trans_b = true;
    d.a = o.x.data_ptr(), d.b = o.w.data_ptr(), d.c = d.d = o.y.data_ptr();
  } else if (op == "dgrad") {
    p.m = t, p.n = k, p.k = n;
    d.a = o.dy.data_ptr(), d.b = o.w.data_ptr(), d.c = d.d = o.dx.data_ptr();
  } else {
    p.m = n, p.n = k, p.k = t, p.trans_a = true, p.c_type = DType::kF32;
    d.a = o.dy.data_ptr(), d.b = o.x.data_ptr(), d.c = d.d = o.dw.data_ptr();
    d.beta = 1.0f;
  }
  return time_runs([&](int) { lt::matmul(p, d, s); }, warmup, iters, s).median_ms;
}

}  // namespace

std::vector<GroupedGemmBenchRow> run_grouped_gemm_benchmark_cuda(const GroupedGemmBenchOptions& opt) {
  PRIMUS_CHECK(cuda_available(), "benchmark grouped-gemm needs a GPU, and none is visible");
  if (opt.warmup < 0 || opt.iters < 1)
    throw ConfigError(fmt::format("benchmark grouped-gemm: --warmup {} / --iters {} (need >= 0 / >= 1)",
                                  opt.warmup, opt.iters));
  std::vector<GroupedGemmShape> shapes = grouped_gemm_anchor_shapes();
  if (opt.experts > 0 || opt.tokens_per_expert > 0 || opt.k > 0 || opt.n > 0) {
    if (opt.experts <= 0 || opt.tokens_per_expert <= 0 || opt.k <= 0 || opt.n <= 0)
      throw ConfigError(
          fmt::format("benchmark grouped-gemm: --experts --tokens-per-expert --K --N must all be positive "
                      "(got {} {} {} {})",
                      opt.experts, opt.tokens_per_expert, opt.k, opt.n));
    shapes = {{"custom", opt.experts, opt.tokens_per_expert, opt.k, opt.n}};
  }
  std::vector<std::string> paths =
      opt.paths == "all" ? std::vector<std::string>{"auto", "grouped", "batched", "loop", "streams"}
                         : split_list(opt.paths);
  for (const auto& p : paths) ops::cuda::grouped_gemm_path_from_name(p);  // throws on an unknown name
  std::vector<std::string> loads =
      opt.loads == "both" ? std::vector<std::string>{"equal", "uneven"} : split_list(opt.loads);
  const std::vector<std::string> op_list = split_list(opt.ops);
  for (const auto& op : op_list)
    if (op != "fwd" && op != "dgrad" && op != "wgrad")
      throw ConfigError(fmt::format("benchmark grouped-gemm: --ops '{}' (expected fwd, dgrad, wgrad)", op));

  const Stream s = cuda_compute_stream(opt.device);
  log::info("grouped-gemm benchmark on {} (cuBLASLt {})", lt::gpu_name(opt.device), lt::cublaslt_version());
  std::mt19937_64 rng(opt.seed);
  std::vector<GroupedGemmBenchRow> rows;
  for (const auto& shape : shapes) {
    const int64_t e = shape.experts, t = e * shape.tokens_per_expert, n = shape.n, k = shape.k;
    Operands o;
    o.x = Tensor::empty({t, k}, DType::kBF16, s);
    o.w = Tensor::empty({e, n, k}, DType::kBF16, s);
    o.dy = Tensor::empty({t, n}, DType::kBF16, s);
    o.y = Tensor::empty({t, n}, DType::kBF16, s);
    o.dx = Tensor::empty({t, k}, DType::kBF16, s);
    o.dw = Tensor::empty({e, n, k}, DType::kF32, s);
    fill_random(o.x.data_ptr(), o.x.numel(), DType::kBF16, rng(), s);
    fill_random(o.w.data_ptr(), o.w.numel(), DType::kBF16, rng(), s);
    fill_random(o.dy.data_ptr(), o.dy.numel(), DType::kBF16, rng(), s);
    const double flops = 2.0 * static_cast<double>(t) * n * k;
    for (const auto& op : op_list) {
      const double dense = flops / (dense_ms(op, o, opt.warmup, opt.iters, s) * 1e-3) / 1e12;
      for (const auto& load : loads) {
        const std::vector<int64_t> counts = grouped_gemm_counts(shape, load, opt.seed);
        const bool equal =
            std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
        for (const auto& path : paths) {
          if (path == "batched" && !equal) continue;  // strided-batched needs equal counts
          ops::cuda::set_grouped_gemm_path(ops::cuda::grouped_gemm_path_from_name(path));
          GroupedGemmBenchRow r;
          r.shape = shape;
          r.load = load;
          r.op = op;
          r.path = path;
          // Poison the output, run once (wgrad overwriting), check samples, then time.
          device_memset(op == "fwd"     ? o.y.data_ptr()
                        : op == "dgrad" ? o.dx.data_ptr()
                                        : o.dw.data_ptr(),
                        0xff,
                        op == "fwd"     ? o.y.nbytes()
                        : op == "dgrad" ? o.dx.nbytes()
                                        : o.dw.nbytes(),
                        s);
          run_op(op, o, counts, /*accumulate=*/false, s);
          r.path_ran = ops::cuda::grouped_gemm_path_name(ops::cuda::last_grouped_gemm_path());
          r.check_rel_err = sampled_check(op, o, counts, rng, s);
          PRIMUS_CHECK(
              r.check_rel_err <= kCheckTol,
              "benchmark grouped-gemm: {} {} {} load, path {}: sampled check error {:.3g} > {} (wrong "
              "results are not timed)",
              shape.name, op, load, path, r.check_rel_err, kCheckTol);
          r.ms =
              time_runs([&](int) { run_op(op, o, counts, /*accumulate=*/true, s); }, opt.warmup, opt.iters, s)
                  .median_ms;
          r.tflops = flops / (r.ms * 1e-3) / 1e12;
          r.dense_tflops = dense;
          log::info("{} {} {} {}: {:.3f} ms {:.0f} TFLOP/s (dense {:.0f})", shape.name, load, op, r.path_ran,
                    r.ms, r.tflops, dense);
          rows.push_back(r);
        }
      }
    }
    ops::cuda::set_grouped_gemm_path(GroupedGemmPath::kAuto);
  }
  return rows;
}

}  // namespace primus::bench
