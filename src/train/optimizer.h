#pragma once
// AdamW over a ParamStore's flat buffers: the global gradient norm (for clipping and the log), then one fused
// update per contiguous span of parameters that share a weight-decay setting.
#include <vector>

#include "config/train_config.h"
#include "model/param_store.h"
#include "ops/optimizer.h"
#include "ops/row_sparse_grad.h"

namespace primus {

// One contiguous run of parameters updated together (views of equal length; copy may be undefined). With
// master weights in remainders (ParamStore::master_in_remainders) `master` is undefined and the master is the
// pair (copy, rem): ops::adamw_step_split.
// A span of the row-sparse embedding (ParamStore::sparse_grad) has no grad tensor: its gradient is read from
// `sparse`, starting at the table's flat element `sparse_first`.
struct AdamSpan {
  Tensor master, grad, m, v, copy;
  Tensor rem;
  bool decay = true;
  const ops::RowSparseGrad* sparse = nullptr;
  int64_t sparse_first = 0;
};

class AdamW {
 public:
  AdamW(const OptimConfig& cfg, ParamStore& params);

  // L2 norm of all gradients (synchronises with the device to read it).
  double grad_norm(const Stream& s);
  // Applies one update with learning rate `lr`; gradients are first multiplied by `grad_scale` (clipping).
  void step(double lr, float grad_scale, const Stream& s);
  // The pieces of step(), for an update whose regions are enqueued at different times (OverlappedUpdate):
  // begin_step() once, then launch_region(r) for every region.
  void begin_step() { ++step_; }
  void launch_region(int r, double lr, float grad_scale, const Stream& s);
  // One piece of a region: flat elements [begin, end), all with or all without weight decay. AdamW is
  // elementwise, so a region updated piece by piece is bitwise the region updated at once.
  void launch_span(int64_t begin, int64_t end, bool decay, double lr, float grad_scale, const Stream& s);
  // The kernel parameters of the current step for a span with or without weight decay.
  ops::AdamWParams kernel_params(double lr, float grad_scale, bool decay) const;
  // The same update over explicit spans (data-parallel shards: src/parallel/data_parallel.cpp).
  void step_spans(double lr, float grad_scale, const std::vector<AdamSpan>& spans, const Stream& s);
  // step_spans in pieces (ZeRO-1's update region by region, each followed by its gather): begin_step() once,
  // then launch_spans for every piece.
  void launch_spans(const std::vector<AdamSpan>& spans, double lr, float grad_scale, const Stream& s) const {
    launch(spans, lr, grad_scale, s);
  }
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t n) { step_ = n; }

 private:
  OptimConfig cfg_;
  ParamStore& params_;
  int64_t step_ = 0;

  // The two spans of region r: [begin, decay_end) with weight decay, [decay_end, end) without.
  std::vector<AdamSpan> region_spans(const ParamRegion& r) const;
  AdamSpan span(int64_t begin, int64_t end, bool decay) const;
  void launch(const std::vector<AdamSpan>& spans, double lr, float grad_scale, const Stream& s) const;
};

// Clip coefficient for a gradient norm: min(1, clip / norm); 1 when clip <= 0.
float clip_coefficient(double grad_norm, double clip);

}  // namespace primus
