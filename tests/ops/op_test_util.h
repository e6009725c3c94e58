#pragma once
// Shared helpers of the op tests: fresh random inputs every run from a printed seed, relative errors, and
// central finite differences in f64.
//
// The base seed changes per run (time-based) unless PRIMUS_TEST_SEED is set; each test derives its own stream
// from the base seed and its name, so `PRIMUS_TEST_SEED=<seed> primus_op_tests --gtest_filter=<test>`
// reproduces a failure. The seed is printed with every failure.
#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace primus::test {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

inline uint64_t base_seed() {
  static const uint64_t seed = []() -> uint64_t {
    if (const char* env = std::getenv("PRIMUS_TEST_SEED"))
      return static_cast<uint64_t>(std::strtoull(env, nullptr, 10));
    return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) % 1000000007ull;
  }();
  return seed;
}

// Prints the seed after every failed assertion, so a failure can be replayed.
class SeedPrinter : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::printf("[op-test] reproduce with PRIMUS_TEST_SEED=%llu\n",
                  static_cast<unsigned long long>(base_seed()));
  }
};
inline const bool kSeedPrinterInstalled = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new SeedPrinter);
  return true;
}();

class Rng {
 public:
  // Seeded from the base seed and the running test's full name.
  Rng() {
    (void)kSeedPrinterInstalled;  // odr-use, so the listener is installed in every test binary that uses Rng
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "none";
    gen_.seed(base_seed() ^ std::hash<std::string>{}(name));
  }
  double uniform(double lo = -1.0, double hi = 1.0) {
    return std::uniform_real_distribution<double>(lo, hi)(gen_);
  }
  int64_t integer(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen_); }
  std::mt19937_64& gen() { return gen_; }

 private:
  std::mt19937_64 gen_;
};

// A CPU tensor of uniform values in [lo, hi), stored in dtype (f32, f64 or bf16).
inline Tensor rand_tensor(Rng& rng, const Shape& shape, DType dtype, double lo = -1.0, double hi = 1.0) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& e : v) e = rng.uniform(lo, hi);
  return cpu_cast(Tensor::from_vector(v, shape), dtype);
}

inline Tensor tensor_of(const std::vector<double>& v, const Shape& shape, DType dtype) {
  return cpu_cast(Tensor::from_vector(v, shape), dtype);
}

inline Tensor filled(const Shape& shape, DType dtype, double value) {
  return tensor_of(std::vector<double>(static_cast<size_t>(shape_numel(shape)), value), shape, dtype);
}

inline std::vector<double> host(const Tensor& t) {
  return t.to_vector<double>();
}

inline Tensor clone(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  c.copy_from(t, Stream::cpu());
  return c;
}

// ||out - ref|| / ||ref|| (or ||out|| when ref is zero). NaN anywhere gives NaN, which fails every bound.
inline double rel_err(const std::vector<double>& out, const std::vector<double>& ref) {
  EXPECT_EQ(out.size(), ref.size());
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < out.size() && i < ref.size(); ++i) {
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

inline double rel_err(const Tensor& out, const std::vector<double>& ref) {
  return rel_err(host(out), ref);
}

// Tolerance of a forward comparison against an fp64 reference.
inline double fwd_tol(DType dt) {
  return dt == DType::kF64 ? 1e-12 : 1e-5;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// sum(t * w) for an f64 tensor t: the scalar loss of the gradient checks.
inline double weighted_sum(const Tensor& t, const std::vector<double>& w) {
  return dot(host(t), w);
}

// Compares an analytic gradient of `x` (f64, perturbed in place and restored) with central differences of the
// scalar loss L = sum(outputs() * weights); checks every coordinate when x is small, else `max_coords` random
// ones. The difference L(x + eps) - L(x - eps) is summed from the elementwise output differences, so outputs
// that a coordinate does not influence cancel exactly instead of adding roundoff (large tensors stay
// checkable at eps = 1e-6). Returns ||g_fd - g|| / ||g|| over the checked coordinates.
inline double fd_rel_error(Rng& rng, Tensor& x, const std::vector<double>& grad,
                           const std::function<std::vector<double>()>& outputs,
                           const std::vector<double>& weights, int max_coords = 80, double eps = 1e-6) {
  EXPECT_EQ(x.dtype(), DType::kF64);
  EXPECT_EQ(static_cast<int64_t>(grad.size()), x.numel());
  const int64_t n = x.numel();
  std::vector<int64_t> coords;
  if (n <= max_coords) {
    for (int64_t i = 0; i < n; ++i) coords.push_back(i);
  } else {
    for (int i = 0; i < max_coords; ++i) coords.push_back(rng.integer(0, n - 1));
  }
  double* p = x.data<double>();
  double num = 0.0, den = 0.0;
  for (int64_t i : coords) {
    const double saved = p[i];
    p[i] = saved + eps;
    const std::vector<double> plus = outputs();
    p[i] = saved - eps;
    const std::vector<double> minus = outputs();
    p[i] = saved;
    EXPECT_EQ(plus.size(), weights.size());
    double diff = 0.0;
    for (size_t k = 0; k < plus.size() && k < weights.size(); ++k) diff += (plus[k] - minus[k]) * weights[k];
    const double fd = diff / (2.0 * eps);
    num += (fd - grad[i]) * (fd - grad[i]);
    den += grad[i] * grad[i];
  }
  // A zero gradient must be matched by zero differences (to roundoff).
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

constexpr double kGradTol = 1e-6;

// Calls fn() with the OpenMP thread count set to `threads` and restores the previous count.
template <typename F>
auto with_threads(int threads, F&& fn) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  auto result = fn();
  omp_set_num_threads(saved);
  return result;
}

// The ops split work so that no result depends on the thread count: 1, 2 and 3 threads must agree bitwise.
// fn() runs the op(s) on fresh outputs and returns them.
template <typename F>
void expect_thread_count_invariant(F&& fn) {
  const std::vector<double> one = with_threads(1, fn);
  for (int threads : {2, 3}) EXPECT_EQ(with_threads(threads, fn), one) << threads << " threads";
}

inline const std::vector<DType>& float_types() {
  static const std::vector<DType> types{DType::kF32, DType::kF64};
  return types;
}

// EXPECT_THROW plus a check that the message names what it should.
#define EXPECT_PRIMUS_ERROR(stmt, substring)                                                      \
  do {                                                                                            \
    try {                                                                                         \
      stmt;                                                                                       \
      ADD_FAILURE() << "expected primus::Error containing \"" << (substring) << "\" from " #stmt; \
    } catch (const ::primus::Error& e) {                                                          \
      EXPECT_NE(std::string(e.what()).find(substring), std::string::npos)                         \
          << "message \"" << e.what() << "\" lacks \"" << (substring) << "\"";                    \
    }                                                                                             \
  } while (0)

}  // namespace primus::test
