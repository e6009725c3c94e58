#pragma once
// Helpers of the tensor- and context-parallel unit tests: stores whose norms and biases carry generic values,
// and the check that a rank's gradients are its part of the one-rank model's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/param_store.h"

namespace primus::split_test {

// Norm weights start at 1 and biases at 0: move every element by a function of its index in the whole tensor,
// so that their gradients are generic and every layout moves the same element alike (f64 stores).
inline void perturb(ParamStore& p) {
  for (int i = 0; i < static_cast<int>(p.entries().size()); ++i) {
    const ParamEntry& e = p.entry(i);
    if (e.decay) continue;
    double* w = p.master(i).data<double>();
    e.slice.for_each_run(e.numel, e.cols(), [&](int64_t lo, int64_t wo, int64_t len) {
      for (int64_t j = 0; j < len; ++j)
        w[lo + j] += 0.2 * std::sin(0.7 * static_cast<double>(wo + j) + static_cast<double>(e.name.size()));
    });
  }
}

// Every entry's gradient in `local` equals its part (EntrySlice) of the same entry's gradient in `whole`,
// within tol x (1 + the whole tensor's largest magnitude).
inline void expect_grad_parts(const ParamStore& local, const ParamStore& whole, double tol,
                              const std::string& who) {
  for (int i = 0; i < static_cast<int>(local.entries().size()); ++i) {
    const ParamEntry& e = local.entry(i);
    const std::vector<double> g = local.grad(i).to_vector<double>();
    const std::vector<double> all = whole.grad(whole.find(e.name)).to_vector<double>();
    double scale = 0;
    for (double x : all) scale = std::max(scale, std::abs(x));
    std::vector<double> want(g.size());
    e.slice.for_each_run(e.numel, e.cols(), [&](int64_t lo, int64_t wo, int64_t len) {
      std::copy(all.begin() + wo, all.begin() + wo + len, want.begin() + lo);
    });
    for (size_t j = 0; j < g.size(); ++j)
      ASSERT_NEAR(g[j], want[j], tol * (1 + scale)) << who << " " << e.name << " [" << j << "]";
  }
}

}  // namespace primus::split_test
