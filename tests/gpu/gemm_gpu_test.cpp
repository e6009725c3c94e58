// GPU tests of the gemm family (ops::cuda::gemm, linear_forward, linear_backward_input,
// linear_backward_weight, the tuned-algorithm path and the tuning file) against fp64 loops over the same
// bf16/f32-rounded inputs. Small odd sizes check every transpose, dtype and epilogue in full; model sizes
// (Llama-3.2-1B layer GEMMs at 16384 tokens, its lm head at one 4160-row chunk) check sampled output rows and
// are timed.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>

#include "bench/gemm_tuning.h"
#include "core/cuda_check.h"
#include "gpu/gpu_test.h"
#include "gpu/sampled_rows.h"
#include "ops/cuda/gemm_cuda.h"
#include "ops/cuda/gemm_lt.h"

namespace primus::gputest {
namespace {

namespace lt = ops::cuda::lt;
constexpr const char* kFam = "gemm";

// A random host matrix in `dtype` plus its exact values as floats (what the GPU reads), for the references.
struct Mat {
  Tensor cpu;            // dtype-typed CPU tensor (f16 stored as raw bits in a u16 tensor)
  std::vector<float> v;  // values after rounding to dtype
  int64_t rows = 0, cols = 0;
  DType dtype = DType::kBF16;
  double at(int64_t r, int64_t c) const { return v[static_cast<size_t>(r * cols + c)]; }
};

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// N(0, scale^2) by Box-Muller from a counter-based stream: parallel and fast enough for the 500M-element lm
// head.
Mat random_mat(Context& ctx, int64_t rows, int64_t cols, DType dtype, double scale = 1.0) {
  Mat m;
  m.rows = rows;
  m.cols = cols;
  m.dtype = dtype;
  const int64_t n = rows * cols;
  m.v.resize(static_cast<size_t>(n));
  const uint64_t seed = ctx.rng();
  m.cpu = Tensor::empty({rows, cols}, dtype == DType::kF16 ? DType::kU16 : dtype);
  void* raw = m.cpu.data_ptr();
  constexpr int64_t kBlock = 4096;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < (n + kBlock - 1) / kBlock; ++b) {
    uint64_t st = seed ^ (static_cast<uint64_t>(b) * 0xd1b54a32d192ed03ull);
    for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); i += 2) {
      const double u1 = (static_cast<double>(splitmix(st) >> 11) + 0.5) * 0x1.0p-53;
      const double u2 = static_cast<double>(splitmix(st) >> 11) * 0x1.0p-53;
      const double r = std::sqrt(-2.0 * std::log(u1)) * scale;
      const double z[2] = {r * std::cos(6.283185307179586 * u2), r * std::sin(6.283185307179586 * u2)};
      for (int j = 0; j < 2 && i + j < n; ++j) {
        const float f = static_cast<float>(z[j]);
        const int64_t idx = i + j;
        if (dtype == DType::kBF16) {
          bf16_t h = float_to_bf16(f);
          static_cast<bf16_t*>(raw)[idx] = h;
          m.v[idx] = bf16_to_float(h);
        } else if (dtype == DType::kF16) {
          __half h = __float2half_rn(f);
          std::memcpy(static_cast<uint16_t*>(raw) + idx, &h, 2);
          m.v[idx] = __half2float(h);
        } else {
          static_cast<float*>(raw)[idx] = f;
          m.v[idx] = f;
        }
      }
    }
  }
  return m;
}

// GPU copy of a Mat in its own dtype (f16 re-labelled from the u16 bits).
Tensor upload(Context& ctx, const Mat& m) {
  Tensor g = Tensor::empty({m.rows, m.cols}, m.dtype, ctx.stream);
  device_copy(g.data_ptr(), g.device(), m.cpu.data_ptr(), Device::cpu(), m.cpu.nbytes(), ctx.stream);
  return g;
}

// `count` distinct rows including the first and the last (edge tiles), the rest random.
std::vector<int64_t> sample_rows(Context& ctx, int64_t n, int count) {
  if (n <= count) return all_rows(n);
  std::vector<int64_t> r = {0, n - 1};
  std::uniform_int_distribution<int64_t> ud(1, n - 2);
  while (static_cast<int>(r.size()) < count) {
    int64_t x = ud(ctx.rng);
    if (std::find(r.begin(), r.end(), x) == r.end()) r.push_back(x);
  }
  std::sort(r.begin(), r.end());
  return r;
}

// ref[row, j] = alpha * sum_k op(a)[row, k] op(b)[k, j] (+ beta * c0[row, j]) (+ bias[j]) for the given rows.
struct RefTerms {
  const Mat* c0 = nullptr;  // added with beta
  double beta = 0;
  const Mat* bias = nullptr;
  double alpha = 1;
};
Tensor ref_gemm(const Mat& a, bool ta, const Mat& b, bool tb, const std::vector<int64_t>& rows,
                const RefTerms& t) {
  const int64_t k = ta ? a.rows : a.cols, n = tb ? b.rows : b.cols;
  std::vector<double> out(rows.size() * n, 0.0);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t ri = 0; ri < static_cast<int64_t>(rows.size()); ++ri) {
    const int64_t i = rows[ri];
    double* o = out.data() + ri * n;
    if (tb) {  // op(b)[kk, j] = b[j, kk]: dot products over contiguous rows of b
      std::vector<double> arow(k);
      for (int64_t kk = 0; kk < k; ++kk) arow[kk] = ta ? a.at(kk, i) : a.at(i, kk);
      for (int64_t j = 0; j < n; ++j) {
        const float* br = b.v.data() + j * b.cols;
        double s = 0;
        for (int64_t kk = 0; kk < k; ++kk) s += arow[kk] * br[kk];
        o[j] = s;
      }
    } else {  // op(b)[kk, :] is row kk of b: axpy over contiguous rows
      for (int64_t kk = 0; kk < k; ++kk) {
        const double aik = ta ? a.at(kk, i) : a.at(i, kk);
        const float* br = b.v.data() + kk * b.cols;
        for (int64_t j = 0; j < n; ++j) o[j] += aik * br[j];
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      o[j] *= t.alpha;
      if (t.c0) o[j] += t.beta * t.c0->at(i, j);
      if (t.bias) o[j] += t.bias->v[j];
    }
  }
  return Tensor::from_vector(out, {static_cast<int64_t>(rows.size()), n});
}

// f32 outputs of f32 inputs (CUDA-core SGEMM, no TF32): 1e-5. f32 outputs of bf16 inputs: the inputs are
// exact in the reference, so only the tensor cores' f32 accumulation errs, and it grows linearly with K (its
// additions do not round to nearest): measured 4.5e-6 at K = 4160 and 1.9e-5 at K = 16384 on the H100. 1e-4
// holds that to K ~ 80k while staying 100x under the bf16 tolerance.
constexpr double kTolF32FromBF16 = 1e-4;
double tol_for(DType out, DType in) {
  if (out != DType::kF32) return kTolBF16;
  return in == DType::kF32 ? kTolF32 : kTolF32FromBF16;
}

void set_rate(Context& ctx, double ms, double flops) {
  ctx.results.back().gpu_ms = ms;
  ctx.results.back().gbps_or_tflops = flops / (ms * 1e-3) / 1e12;
  ctx.results.back().rate_unit = "TFLOP/s";
}

void record(Context& ctx, const std::string& name, bool ok, const std::string& note) {
  CaseResult r;
  r.family = kFam;
  r.name = name;
  r.rel_err = ok ? 0.0 : INFINITY;
  r.tol = 0;
  r.note = note;
  ctx.results.push_back(r);
}

template <typename Fn>
bool throws_error(Fn&& fn) {
  try {
    fn();
  } catch (const Error&) {
    return true;
  }
  return false;
}

// ---- small shapes: every transpose, dtype pairing, alpha/beta form ----
void small_gemm_cases(Context& ctx) {
  const int64_t shapes[][3] = {{31, 33, 127}, {33, 127, 31}, {127, 1000, 33}, {1000, 31, 1000}};
  struct DT {
    DType in, out;
  };
  const DT dts[] = {{DType::kBF16, DType::kBF16}, {DType::kBF16, DType::kF32}, {DType::kF32, DType::kF32}};
  for (const auto& sh : shapes) {
    const int64_t m = sh[0], n = sh[1], k = sh[2];
    for (const DT& dt : dts) {
      for (int tr = 0; tr < 4; ++tr) {
        const bool ta = tr & 2, tb = tr & 1;
        Mat a = random_mat(ctx, ta ? k : m, ta ? m : k, dt.in);
        Mat b = random_mat(ctx, tb ? n : k, tb ? k : n, dt.in);
        Tensor ga = upload(ctx, a), gb = upload(ctx, b), gc = ctx.poisoned({m, n}, dt.out);
        ops::cuda::gemm(ga, ta, gb, tb, gc, 1.0f, 0.0f, ctx.stream, nullptr);
        ctx.check(kFam,
                  fmt::format("gemm {}x{}x{} {}{} {}->{}", m, n, k, ta ? 'T' : 'N', tb ? 'T' : 'N',
                              dtype_name(dt.in), dtype_name(dt.out)),
                  gather_rows(ctx, gc, all_rows(m)), ref_gemm(a, ta, b, tb, all_rows(m), {}),
                  tol_for(dt.out, dt.in));
      }
    }
  }
  // alpha/beta with a separate c_in, and beta = 1 in place (c starts from random values, never poisoned).
  for (DType out : {DType::kBF16, DType::kF32}) {
    const int64_t m = 127, n = 33, k = 1000;
    Mat a = random_mat(ctx, m, k, DType::kBF16), b = random_mat(ctx, n, k, DType::kBF16);
    Mat c0 = random_mat(ctx, m, n, out);
    Tensor ga = upload(ctx, a), gb = upload(ctx, b), gcin = upload(ctx, c0), gc = ctx.poisoned({m, n}, out);
    ops::cuda::gemm(ga, false, gb, true, gc, 0.5f, 0.75f, ctx.stream, &gcin);
    ctx.check(kFam, fmt::format("gemm alpha=.5 beta=.75 c_in bf16->{}", dtype_name(out)),
              gather_rows(ctx, gc, all_rows(m)),
              ref_gemm(a, false, b, true, all_rows(m), {&c0, 0.75, nullptr, 0.5}),
              tol_for(out, DType::kBF16));
    Tensor gacc = upload(ctx, c0);
    ops::cuda::gemm(ga, false, gb, true, gacc, 1.0f, 1.0f, ctx.stream, nullptr);
    ctx.check(kFam, fmt::format("gemm beta=1 in place bf16->{}", dtype_name(out)),
              gather_rows(ctx, gacc, all_rows(m)),
              ref_gemm(a, false, b, true, all_rows(m), {&c0, 1.0, nullptr, 1.0}), tol_for(out, DType::kBF16));
  }
  {  // f16 inputs
    const int64_t m = 33, n = 127, k = 1000;
    Mat a = random_mat(ctx, m, k, DType::kF16), b = random_mat(ctx, k, n, DType::kF16);
    Tensor ga = upload(ctx, a), gb = upload(ctx, b), gc = ctx.poisoned({m, n}, DType::kF16);
    ops::cuda::gemm(ga, false, gb, false, gc, 1.0f, 0.0f, ctx.stream, nullptr);
    ctx.check(kFam, "gemm 33x127x1000 NN f16->f16", gather_rows(ctx, gc, all_rows(m)),
              ref_gemm(a, false, b, false, all_rows(m), {}), kTolBF16);
  }
}

// ---- linear layer ops on small shapes (3-D activations, bias, residual, accumulate) ----
void small_linear_cases(Context& ctx) {
  const int64_t shapes[][3] = {{31, 33, 127}, {127, 1000, 33}, {1000, 127, 31}};  // tokens, in, out
  for (const auto& sh : shapes) {
    const int64_t t = sh[0], in = sh[1], outf = sh[2];
    Mat x = random_mat(ctx, t, in, DType::kBF16), w = random_mat(ctx, outf, in, DType::kBF16);
    Mat dy = random_mat(ctx, t, outf, DType::kBF16);
    Tensor gx = upload(ctx, x), gw = upload(ctx, w), gdy = upload(ctx, dy);
    const std::string tag = fmt::format("T={} in={} out={}", t, in, outf);
    for (DType yt : {DType::kBF16, DType::kF32}) {
      Mat bias = random_mat(ctx, 1, outf, yt), res = random_mat(ctx, t, outf, yt);
      Tensor gbias = upload(ctx, bias).view({outf}), gres = upload(ctx, res);
      for (int variant = 0; variant < 4; ++variant) {
        const bool with_bias = variant & 1, with_res = variant & 2;
        Tensor gy = ctx.poisoned({t, outf}, yt);
        ops::cuda::linear_forward(gx, gw, with_bias ? &gbias : nullptr, gy, ctx.stream,
                                  with_res ? &gres : nullptr);
        RefTerms rt{with_res ? &res : nullptr, 1.0, with_bias ? &bias : nullptr, 1.0};
        ctx.check(kFam,
                  fmt::format("linear_fwd {}{}{} ->{}", tag, with_bias ? " +bias" : "",
                              with_res ? " +res" : "", dtype_name(yt)),
                  gather_rows(ctx, gy, all_rows(t)), ref_gemm(x, false, w, true, all_rows(t), rt),
                  tol_for(yt, DType::kBF16));
      }
      // Residual aliasing the output (y += x w^T), as a caller may do.
      Tensor gy = upload(ctx, res);
      ops::cuda::linear_forward(gx, gw, &gbias, gy, ctx.stream, &gy);
      ctx.check(kFam, fmt::format("linear_fwd {} +bias +res(in place) ->{}", tag, dtype_name(yt)),
                gather_rows(ctx, gy, all_rows(t)),
                ref_gemm(x, false, w, true, all_rows(t), {&res, 1.0, &bias, 1.0}), tol_for(yt, DType::kBF16));
    }
    {  // 3-D activations [B, S, in] flatten to rows
      Tensor gy = ctx.poisoned({1, t, outf}, DType::kBF16);
      Tensor gx3 = gx.view({1, t, in});
      ops::cuda::linear_forward(gx3, gw, nullptr, gy, ctx.stream, nullptr);
      ctx.check(kFam, fmt::format("linear_fwd {} 3-D", tag),
                gather_rows(ctx, gy.view({t, outf}), all_rows(t)),
                ref_gemm(x, false, w, true, all_rows(t), {}), kTolBF16);
    }
    for (bool acc : {false, true}) {
      Mat dx0 = random_mat(ctx, t, in, DType::kBF16);
      Tensor gdx = acc ? upload(ctx, dx0) : ctx.poisoned({t, in}, DType::kBF16);
      ops::cuda::linear_backward_input(gdy, gw, gdx, acc, ctx.stream);
      ctx.check(kFam, fmt::format("linear_dgrad {}{}", tag, acc ? " accumulate" : ""),
                gather_rows(ctx, gdx, all_rows(t)),
                ref_gemm(dy, false, w, false, all_rows(t), {acc ? &dx0 : nullptr, 1.0, nullptr, 1.0}),
                kTolBF16);
    }
    for (auto path :
         {ops::cuda::DbiasPath::kAuto, ops::cuda::DbiasPath::kEpilogue, ops::cuda::DbiasPath::kKernel}) {
      Mat dw0 = random_mat(ctx, outf, in, DType::kF32), db0 = random_mat(ctx, 1, outf, DType::kF32);
      Tensor gdw = upload(ctx, dw0), gdb = upload(ctx, db0).view({outf});
      ops::cuda::set_dbias_path(path);
      const char* pname = path == ops::cuda::DbiasPath::kAuto       ? "auto"
                          : path == ops::cuda::DbiasPath::kEpilogue ? "epilogue"
                                                                    : "kernel";
      bool ran = true;
      std::string err;
      try {
        ops::cuda::linear_backward_weight(gdy, gx, gdw, &gdb, ctx.stream);
      } catch (const Error& e) {
        ran = false;
        err = e.what();
      }
      ops::cuda::set_dbias_path(ops::cuda::DbiasPath::kAuto);
      if (!ran) {
        // kEpilogue may legitimately be unsupported; report it without failing the family.
        record(ctx, fmt::format("linear_wgrad {} dbias={} (unsupported)", tag, pname),
               path == ops::cuda::DbiasPath::kEpilogue, err);
        continue;
      }
      const char* took =
          ops::cuda::last_dbias_path() == ops::cuda::DbiasPath::kEpilogue ? "epilogue" : "kernel";
      ctx.check(kFam, fmt::format("linear_wgrad {} dw += (dbias={} took {})", tag, pname, took),
                gather_rows(ctx, gdw, all_rows(outf)),
                ref_gemm(dy, true, x, false, all_rows(outf), {&dw0, 1.0, nullptr, 1.0}), kTolF32FromBF16);
      // dbias[j] = start + sum_t dy[t, j]: the gemm of a ones row with dy.
      Mat ones = random_mat(ctx, 1, t, DType::kF32);
      std::fill(ones.v.begin(), ones.v.end(), 1.0f);
      ctx.check(kFam, fmt::format("linear_wgrad {} dbias += (dbias={} took {})", tag, pname, took),
                gather_rows(ctx, gdb.view({1, outf}), {0}),
                ref_gemm(ones, false, dy, false, {0}, {&db0, 1.0, nullptr, 1.0}), kTolF32FromBF16);
    }
    {  // without dbias
      Mat dw0 = random_mat(ctx, outf, in, DType::kF32);
      Tensor gdw = upload(ctx, dw0);
      ops::cuda::linear_backward_weight(gdy, gx, gdw, nullptr, ctx.stream);
      ctx.check(kFam, fmt::format("linear_wgrad {} dw += (no dbias)", tag),
                gather_rows(ctx, gdw, all_rows(outf)),
                ref_gemm(dy, true, x, false, all_rows(outf), {&dw0, 1.0, nullptr, 1.0}), kTolF32FromBF16);
    }
    {  // accumulate = false (the step's first write): dw and dbias overwritten, poisoned (NaN) before
      Tensor gdw = ctx.poisoned({outf, in}, DType::kF32), gdb = ctx.poisoned({outf}, DType::kF32);
      ops::cuda::linear_backward_weight(gdy, gx, gdw, &gdb, ctx.stream, /*accumulate=*/false);
      ctx.check(kFam, fmt::format("linear_wgrad {} dw = (overwrite)", tag),
                gather_rows(ctx, gdw, all_rows(outf)), ref_gemm(dy, true, x, false, all_rows(outf), {}),
                kTolF32FromBF16);
      Mat ones = random_mat(ctx, 1, t, DType::kF32);
      std::fill(ones.v.begin(), ones.v.end(), 1.0f);
      ctx.check(kFam, fmt::format("linear_wgrad {} dbias = (overwrite)", tag),
                gather_rows(ctx, gdb.view({1, outf}), {0}), ref_gemm(ones, false, dy, false, {0}, {}),
                kTolF32FromBF16);
    }
  }
}

// ---- determinism, tuned path, tuning file, validation ----
void plumbing_cases(Context& ctx) {
  {  // the column-sum kernel is bitwise reproducible
    const int64_t t = 4099, n = 3072;
    Mat dy = random_mat(ctx, t, n, DType::kBF16), x = random_mat(ctx, t, 64, DType::kBF16);
    Tensor gdy = upload(ctx, dy), gx = upload(ctx, x);
    std::vector<float> runs[2];
    ops::cuda::set_dbias_path(ops::cuda::DbiasPath::kKernel);
    for (auto& r : runs) {
      Tensor gdw = Tensor::zeros({n, 64}, DType::kF32, ctx.stream),
             gdb = Tensor::zeros({n}, DType::kF32, ctx.stream);
      ops::cuda::linear_backward_weight(gdy, gx, gdw, &gdb, ctx.stream);
      stream_sync(ctx.stream);
      r = gdb.to_vector<float>();
    }
    ops::cuda::set_dbias_path(ops::cuda::DbiasPath::kAuto);
    record(ctx, "dbias kernel bitwise reproducible (4099x3072)",
           std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * 4) == 0, "");
  }
  {  // a tuned algorithm (the heuristic's second candidate) runs through the public path and stays correct
    const int64_t m = 1000, n = 1024, k = 512;
    Mat a = random_mat(ctx, m, k, DType::kBF16), b = random_mat(ctx, n, k, DType::kBF16);
    Tensor ga = upload(ctx, a), gb = upload(ctx, b), gc = ctx.poisoned({m, n}, DType::kBF16);
    lt::Problem p{m, n, k, false, true, DType::kBF16, DType::kBF16, DType::kBF16, lt::Epilogue::kNone};
    lt::Operands o;
    o.a = ga.data_ptr();
    o.b = gb.data_ptr();
    o.d = gc.data_ptr();
    auto cands = lt::heuristic_candidates(p, o, 8, ctx.stream);
    const size_t pick = cands.size() > 1 ? 1 : 0;
    lt::install_tuned_algo(p, cands[pick].algo);
    ops::cuda::gemm(ga, false, gb, true, gc, 1.0f, 0.0f, ctx.stream, nullptr);
    const lt::PlanInfo info = lt::plan_info(p, o, ctx.stream);
    auto align = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) & 255u; };
    ctx.check(kFam, fmt::format("gemm via tuned algo (candidate {} of {})", pick, cands.size()),
              gather_rows(ctx, gc, all_rows(m)), ref_gemm(a, false, b, true, all_rows(m), {}), kTolBF16,
              fmt::format("{}; pointer mod 256: a {} b {} c {}", info.tuned ? info.description : "NOT TUNED",
                          align(ga), align(gb), align(gc)));
    if (!info.tuned) ctx.results.back().rel_err = INFINITY;
    lt::clear_tuned_algos();
  }
  {  // tuning file: write, read back, install only this GPU's entries
    const std::string path =
        (std::filesystem::temp_directory_path() / "primus_gemm_tuning_test.json").string();
    bench::TuningFile f;
    bench::TuningEntry e;
    e.gpu = lt::gpu_name(ctx.stream.device.index);
    e.cublaslt_version = lt::cublaslt_version();
    e.key = {1000, 1024, 512, false, true, DType::kBF16, DType::kBF16, DType::kBF16, "none"};
    lt::Problem p{
        1000, 1024, 512, false, true, DType::kBF16, DType::kBF16, DType::kBF16, lt::Epilogue::kNone};
    Tensor ga = ctx.poisoned({1000, 512}, DType::kBF16), gb = ctx.poisoned({1024, 512}, DType::kBF16);
    Tensor gc = ctx.poisoned({1000, 1024}, DType::kBF16);
    lt::Operands o;
    o.a = ga.data_ptr();
    o.b = gb.data_ptr();
    o.d = gc.data_ptr();
    auto cands = lt::heuristic_candidates(p, o, 1, ctx.stream);
    std::memcpy(e.algo.data(), cands[0].algo.data, sizeof(cands[0].algo.data));
    f.upsert(e);
    bench::TuningEntry other = e;
    other.gpu = "Some Other GPU";
    f.upsert(other);
    bench::write_tuning_file(path, f);
    bench::TuningFile back = bench::read_tuning_file(path);
    const bool same =
        back.entries.size() == 2 && back.entries[0].algo == e.algo && back.entries[0].key == e.key;
    const int installed = bench::load_gemm_tuning(path, ctx.stream.device.index);
    const bool ok = same && installed == 1 && lt::tuned_algo_count() == 1;
    record(ctx, "tuning file round trip (1 of 2 entries for this GPU)", ok,
           fmt::format("read {} entries, installed {}", back.entries.size(), installed));
    lt::clear_tuned_algos();
    std::filesystem::remove(path);
  }
  {  // validation before touching the GPU
    Tensor a = ctx.poisoned({8, 16}, DType::kBF16), b = ctx.poisoned({12, 16}, DType::kBF16);
    Tensor c = ctx.poisoned({8, 12}, DType::kBF16), cpu = Tensor::empty({8, 16}, DType::kBF16);
    Tensor i32 = ctx.poisoned({8, 16}, DType::kI32), dw16 = ctx.poisoned({12, 16}, DType::kBF16);
    const bool ok =
        throws_error([&] { ops::cuda::gemm(a, false, b, false, c, 1, 0, ctx.stream, nullptr); }) &&
        throws_error([&] { ops::cuda::gemm(cpu, false, b, true, c, 1, 0, ctx.stream, nullptr); }) &&
        throws_error([&] { ops::cuda::gemm(i32, false, b, true, c, 1, 0, ctx.stream, nullptr); }) &&
        throws_error([&] { ops::cuda::linear_backward_weight(c, a, dw16, nullptr, ctx.stream); }) &&
        throws_error([&] { ops::cuda::linear_forward(a, b, &c, c, ctx.stream, nullptr); });
    record(ctx, "shape/dtype/device validation throws primus::Error", ok, "");
  }
}

// ---- model sizes: Llama-3.2-1B layer GEMMs at 16384 tokens and one lm-head chunk, sampled check + timing
// ----
void model_size_cases(Context& ctx) {
  struct Layer {
    const char* name;
    int64_t tokens, in, out;
    bool residual;
  };
  const Layer layers[] = {
      {"1B qkv", 16384, 2048, 3072, false},
      {"1B attn_out", 16384, 2048, 2048, true},
      {"1B gate_up", 16384, 2048, 16384, false},
      {"1B down", 16384, 8192, 2048, true},
      {"1B lm_head[4160]", 4160, 2048, 128256, false},
  };
  for (const Layer& L : layers) {
    Mat x = random_mat(ctx, L.tokens, L.in, DType::kBF16),
        w = random_mat(ctx, L.out, L.in, DType::kBF16, 0.02);
    Mat dy = random_mat(ctx, L.tokens, L.out, DType::kBF16);
    Tensor gx = upload(ctx, x), gw = upload(ctx, w), gdy = upload(ctx, dy);
    const double flops = 2.0 * L.tokens * L.in * L.out;
    const int samples = L.out > 100000 ? 12 : 24;
    const std::string shape = fmt::format("{}x{}x{}", L.tokens, L.out, L.in);
    {
      std::optional<Mat> res;
      Tensor gres;
      if (L.residual) {
        res = random_mat(ctx, L.tokens, L.out, DType::kBF16);
        gres = upload(ctx, *res);
      }
      Tensor gy = ctx.poisoned({L.tokens, L.out}, DType::kBF16);
      auto run = [&] {
        ops::cuda::linear_forward(gx, gw, nullptr, gy, ctx.stream, L.residual ? &gres : nullptr);
      };
      run();
      auto rows = sample_rows(ctx, L.tokens, samples);
      ctx.check(kFam, fmt::format("{} fwd {}{}", L.name, shape, L.residual ? " +res" : ""),
                gather_rows(ctx, gy, rows),
                ref_gemm(x, false, w, true, rows, {res ? &*res : nullptr, 1.0, nullptr, 1.0}), kTolBF16);
      set_rate(ctx, ctx.time_ms(run), flops);
    }
    {
      Tensor gdx = ctx.poisoned({L.tokens, L.in}, DType::kBF16);
      auto run = [&] { ops::cuda::linear_backward_input(gdy, gw, gdx, false, ctx.stream); };
      run();
      auto rows = sample_rows(ctx, L.tokens, samples);
      ctx.check(kFam, fmt::format("{} dgrad {}x{}x{}", L.name, L.tokens, L.in, L.out),
                gather_rows(ctx, gdx, rows), ref_gemm(dy, false, w, false, rows, {}), kTolBF16);
      set_rate(ctx, ctx.time_ms(run), flops);
    }
    {
      Mat dw0 = random_mat(ctx, L.out, L.in, DType::kF32, 0.1);
      Tensor gdw = upload(ctx, dw0);
      auto run = [&] { ops::cuda::linear_backward_weight(gdy, gx, gdw, nullptr, ctx.stream); };
      run();
      auto rows = sample_rows(ctx, L.out, samples);
      ctx.check(kFam, fmt::format("{} wgrad {}x{}x{} f32 +=", L.name, L.out, L.in, L.tokens),
                gather_rows(ctx, gdw, rows), ref_gemm(dy, true, x, false, rows, {&dw0, 1.0, nullptr, 1.0}),
                kTolF32FromBF16);
      set_rate(ctx, ctx.time_ms(run), flops);  // timing keeps accumulating into dw: fine, it is checked above
    }
    if (std::string(L.name) == "1B qkv") {
      // Qwen-2-style QKV bias: the cost of dbias by epilogue vs by the column-sum kernel on the same wgrad.
      for (auto path : {ops::cuda::DbiasPath::kEpilogue, ops::cuda::DbiasPath::kKernel}) {
        Mat dw0 = random_mat(ctx, L.out, L.in, DType::kF32, 0.1),
            db0 = random_mat(ctx, 1, L.out, DType::kF32);
        Tensor gdw = upload(ctx, dw0), gdb = upload(ctx, db0).view({L.out});
        ops::cuda::set_dbias_path(path);
        const char* pname = path == ops::cuda::DbiasPath::kEpilogue ? "epilogue" : "kernel";
        try {
          auto run = [&] { ops::cuda::linear_backward_weight(gdy, gx, gdw, &gdb, ctx.stream); };
          run();
          Mat ones = random_mat(ctx, 1, L.tokens, DType::kF32);
          std::fill(ones.v.begin(), ones.v.end(), 1.0f);
          ctx.check(kFam, fmt::format("{} wgrad+dbias({}) {}", L.name, pname, shape),
                    gather_rows(ctx, gdb.view({1, L.out}), {0}),
                    ref_gemm(ones, false, dy, false, {0}, {&db0, 1.0, nullptr, 1.0}), kTolF32FromBF16);
          set_rate(ctx, ctx.time_ms(run), flops);
        } catch (const Error& e) {
          record(ctx, fmt::format("{} wgrad+dbias({}) (unsupported)", L.name, pname),
                 path == ops::cuda::DbiasPath::kEpilogue, e.what());
        }
        ops::cuda::set_dbias_path(ops::cuda::DbiasPath::kAuto);
      }
    }
  }
}

}  // namespace
}  // namespace primus::gputest

PRIMUS_GPU_TEST(gemm) {
  using namespace primus::gputest;
  small_gemm_cases(ctx);
  small_linear_cases(ctx);
  plumbing_cases(ctx);
  if (!ctx.quick) model_size_cases(ctx);
}
