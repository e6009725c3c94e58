#include "train/optimizer.h"

#include <cmath>

#include "ops/optimizer.h"

namespace primus {

AdamW::AdamW(const OptimConfig& cfg, ParamStore& params) : cfg_(cfg), params_(params) {}

double AdamW::grad_norm(const Stream& s) {
  Tensor out = Tensor::empty({1}, params_.grad_flat().dtype(), s);
  ops::sum_squares(params_.grad_flat(), out, /*accumulate=*/false, s);
  // The row-sparse embedding's unused slots are zero: summing all of them adds nothing.
  if (params_.sparse_entry() >= 0)
    ops::sum_squares(params_.sparse_grad().rows.view({-1}), out, /*accumulate=*/true, s);
  return std::sqrt(out.to_vector<double>()[0]);
}

AdamSpan AdamW::span(int64_t b, int64_t e, bool decay) const {
  AdamSpan a;
  a.decay = decay;
  if (params_.master_in_remainders()) {
    a.rem = params_.remainder_flat().slice(b, e);
  } else {
    a.master = params_.master_flat().slice(b, e);
  }
  if (b < params_.grad_base()) {  // the row-sparse embedding (region 0 alone, so the whole span is in it)
    a.sparse = &params_.sparse_grad();
    a.sparse_first = b - params_.entry(params_.sparse_entry()).offset;
  } else {
    a.grad = params_.grad_span(b, e);
  }
  a.m = params_.adam_m_flat().slice(b, e);
  a.v = params_.adam_v_flat().slice(b, e);
  if (!params_.compute_aliases_master()) a.copy = params_.compute_flat().slice(b, e);
  return a;
}

std::vector<AdamSpan> AdamW::region_spans(const ParamRegion& r) const {
  std::vector<AdamSpan> spans;
  if (r.decay_end > r.begin) spans.push_back(span(r.begin, r.decay_end, true));
  if (r.end > r.decay_end) spans.push_back(span(r.decay_end, r.end, false));
  return spans;
}

void AdamW::step(double lr, float grad_scale, const Stream& s) {
  begin_step();
  for (int r = 0; r < static_cast<int>(params_.regions().size()); ++r) launch_region(r, lr, grad_scale, s);
}

void AdamW::launch_region(int r, double lr, float grad_scale, const Stream& s) {
  launch(region_spans(params_.regions().at(r)), lr, grad_scale, s);
}

void AdamW::launch_span(int64_t begin, int64_t end, bool decay, double lr, float grad_scale,
                        const Stream& s) {
  if (end > begin) launch({span(begin, end, decay)}, lr, grad_scale, s);
}

ops::AdamWParams AdamW::kernel_params(double lr, float grad_scale, bool decay) const {
  ops::AdamWParams p;
  p.lr = static_cast<float>(lr);
  p.beta1 = static_cast<float>(cfg_.adam_beta1);
  p.beta2 = static_cast<float>(cfg_.adam_beta2);
  p.eps = static_cast<float>(cfg_.adam_eps);
  p.step = step_;
  p.grad_scale = grad_scale;
  p.weight_decay = decay ? static_cast<float>(cfg_.weight_decay) : 0.0f;
  return p;
}

void AdamW::step_spans(double lr, float grad_scale, const std::vector<AdamSpan>& spans, const Stream& s) {
  ++step_;
  launch(spans, lr, grad_scale, s);
}

void AdamW::launch(const std::vector<AdamSpan>& spans, double lr, float grad_scale, const Stream& s) const {
  for (const AdamSpan& a : spans) {
    if (a.m.numel() == 0) continue;
    const ops::AdamWParams p = kernel_params(lr, grad_scale, a.decay);
    Tensor master = a.master, m = a.m, v = a.v, copy = a.copy, rem = a.rem;
    if (a.sparse && rem.defined()) {
      ops::adamw_step_split_sparse(copy, rem, *a.sparse, a.sparse_first, m, v, p, s);
    } else if (a.sparse) {
      ops::adamw_step_sparse(master, *a.sparse, a.sparse_first, m, v, p, copy.defined() ? &copy : nullptr, s);
    } else if (rem.defined()) {
      ops::adamw_step_split(copy, rem, a.grad, m, v, p, s);
    } else {
      ops::adamw_step(master, a.grad, m, v, p, copy.defined() ? &copy : nullptr, s);
    }
  }
}

float clip_coefficient(double grad_norm, double clip) {
  if (clip <= 0 || !std::isfinite(grad_norm) || grad_norm <= clip) return 1.0f;
  return static_cast<float>(clip / (grad_norm + 1e-6));
}

}  // namespace primus
