#include "train/guards.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "core/error.h"
#include "core/log.h"
#include "ops/row_sparse_grad.h"

namespace primus {

std::string NonFiniteReport::describe() const {
  if (first_tensor.empty()) return "every gradient is finite";
  return fmt::format(
      "first non-finite gradient in {} ({}, element {}); {} non-finite element(s) in {} tensor(s)",
      first_tensor, layer >= 0 ? fmt::format("layer {}", layer) : std::string("outside the layers"),
      first_index, elements, tensors);
}

NonFiniteReport locate_non_finite_grad(ParamStore& params, const Stream& s) {
  NonFiniteReport r;
  const std::vector<float> g = params.grad_flat().to_vector<float>();
  std::vector<float> sparse;  // the row-sparse embedding's gradient, densified
  if (params.sparse_entry() >= 0) {
    const ParamEntry& e = params.entry(params.sparse_entry());
    Tensor dense = Tensor::empty(e.shape, DType::kF32, s);
    ops::row_sparse_to_dense(params.sparse_grad(), dense, s);
    sparse = dense.to_vector<float>();
  }
  for (int i = 0; i < static_cast<int>(params.entries().size()); ++i) {
    const ParamEntry& e = params.entry(i);
    const bool is_sparse = i == params.sparse_entry();
    const float* at = is_sparse ? sparse.data() : g.data() + (e.offset - params.grad_base());
    int64_t bad = 0, first = -1;
    for (int64_t j = 0; j < e.numel; ++j) {
      if (!std::isfinite(at[j])) {
        if (first < 0) first = j;
        ++bad;
      }
    }
    if (bad == 0) continue;
    if (r.first_tensor.empty()) {
      r.first_tensor = e.name;
      r.first_index = first;
      r.layer = e.region >= 1 && e.region < params.head_region() ? e.region - 1 : -1;
    }
    ++r.tensors;
    r.elements += bad;
  }
  return r;
}

bool SpikeDetector::is_spike(double loss) const {
  if (recent_.empty()) return false;
  return loss >= factor_ * reference();
}

double SpikeDetector::reference() const {
  return recent_.empty() ? 0.0 : *std::max_element(recent_.begin(), recent_.end());
}

void SpikeDetector::accept(double loss) {
  if (!std::isfinite(loss)) return;
  recent_.push_back(loss);
  while (recent_.size() > window_) recent_.pop_front();
}

void SpikeDetector::restore(const std::vector<double>& losses) {
  recent_.clear();
  for (double l : losses) accept(l);
}

FaultInjection FaultInjection::from_env() {
  FaultInjection f;
  if (const char* v = std::getenv("PRIMUS_INJECT_NAN")) {
    std::string s = v;
    const size_t a = s.find(':');
    if (a == std::string::npos)
      throw ConfigError("PRIMUS_INJECT_NAN must be <iteration>:<parameter>[:<element>]");
    f.nan_iter = std::stoll(s.substr(0, a));
    std::string rest = s.substr(a + 1);
    const size_t b = rest.find(':');
    f.nan_param = rest.substr(0, b);
    if (b != std::string::npos) f.nan_index = std::stoll(rest.substr(b + 1));
    log::warn("test hook: PRIMUS_INJECT_NAN puts a NaN into the gradient of {}[{}] at iteration {}",
              f.nan_param, f.nan_index, *f.nan_iter);
  }
  if (const char* v = std::getenv("PRIMUS_INJECT_LOSS_SPIKE")) {
    std::string s = v;
    const size_t a = s.find(':');
    if (a == std::string::npos) throw ConfigError("PRIMUS_INJECT_LOSS_SPIKE must be <iteration>:<factor>");
    f.spike_iter = std::stoll(s.substr(0, a));
    f.spike_factor = std::stod(s.substr(a + 1));
    log::warn("test hook: PRIMUS_INJECT_LOSS_SPIKE multiplies the loss of iteration {} by {}", *f.spike_iter,
              f.spike_factor);
  }
  if (const char* v = std::getenv("PRIMUS_INJECT_SLOW_GPU"); v && *v) {
    if (std::sscanf(v, "%ld:%d", &f.slow_gpu_rank, &f.slow_gpu_sms) != 2 || f.slow_gpu_rank < 0 ||
        f.slow_gpu_sms < 1)
      throw ConfigError(
          fmt::format("environment: PRIMUS_INJECT_SLOW_GPU='{}' (expected <rank>:<SMs>, SMs >= 1)", v));
    log::warn("test hook: PRIMUS_INJECT_SLOW_GPU leaves {} SMs idle in rank {}'s GEMMs", f.slow_gpu_sms,
              f.slow_gpu_rank);
  }
  return f;
}

void FaultInjection::maybe_poison_grad(int64_t iter, ParamStore& params, const Stream& s) const {
  if (!nan_iter || *nan_iter != iter) return;
  const int i = params.find(nan_param);
  if (i < 0) throw ConfigError(fmt::format("PRIMUS_INJECT_NAN: no parameter named '{}'", nan_param));
  const ParamEntry& e = params.entry(i);
  PRIMUS_CHECK(nan_index >= 0 && nan_index < e.numel, "PRIMUS_INJECT_NAN: element {} outside {}", nan_index,
               e.name);
  Tensor one;
  if (i == params.sparse_entry()) {
    // A row-sparse gradient holds only the rows this step's tokens touched: poison that row's slot.
    const int64_t row = nan_index / e.shape[1];
    const int32_t slot = params.sparse_grad().slot_of.slice(row, row + 1).to_vector<int32_t>()[0];
    if (slot < 0)
      throw ConfigError(
          fmt::format("PRIMUS_INJECT_NAN: row {} of {} has no gradient at iteration {} (its "
                      "gradient is row-sparse and no token of the step is that id)",
                      row, e.name, iter));
    const int64_t at = slot * e.shape[1] + nan_index % e.shape[1];
    one = params.sparse_grad().rows.view({-1}).slice(at, at + 1);
  } else {
    one = params.grad_span(e.offset + nan_index, e.offset + nan_index + 1);
  }
  Tensor nan = Tensor::from_vector<float>({std::numeric_limits<float>::quiet_NaN()}, {1});
  if (one.dtype() != DType::kF32) nan = cpu_cast(nan, one.dtype());
  one.copy_from(nan, s);
}

}  // namespace primus
