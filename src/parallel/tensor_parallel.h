#pragma once
// Tensor parallelism's communication (Megatron-style TP, with optional sequence parallelism). The model's
// layers are written on local shapes (ModelSpec::with_tensor_shard divides heads, ffn and vocabulary); they
// call this at the two boundaries of each parallel region:
//
//   column-parallel in (QKV, gate|up, the LM head):  the region needs every token's input rows.
//       without SP: the residual stream is replicated, nothing to do (forward); backward sums the partial
//                   input gradients (all-reduce).
//       with SP:    each rank holds rows [r n/tp, (r+1) n/tp) of the residual stream: all-gather (forward),
//                   reduce-scatter of the input gradient (backward).
//   row-parallel out (o_proj, down_proj, the vocab-parallel embedding): each rank's output is a partial sum.
//       without SP: all-reduce (forward); backward passes the replicated gradient through.
//       with SP:    reduce-scatter to this rank's rows (forward); all-gather of the gradient (backward).
//
// So two moves cover all four: gather_rows (SP all-gather, else identity) and sum_rows (SP reduce-scatter,
// else all-reduce). The norms and residual adds between regions run on this rank's rows.
//
// Gradients: split tensors (EntrySlice) are this rank's alone; whole tensors whose gradient each rank holds a
// part of (ParamEntry::tp_sum_grad) are summed over tp after the backward (sum_partial_grads), and the
// gradient norm counts split tensors on every rank and whole ones once (norm_squares).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "model/param_store.h"

namespace primus::parallel {

class TensorParallel {
 public:
  // `tp`: the tensor-parallel group (not owned; outlives this).
  TensorParallel(comm::Communicator& tp, bool sequence_parallel);

  int size() const { return tp_.size(); }
  int rank() const { return tp_.rank(); }
  bool sequence_parallel() const { return sp_; }
  comm::Communicator& group() const { return tp_; }
  // Rows of the residual stream this rank holds out of `rows` tokens (rows / size under SP).
  int64_t local_rows(int64_t rows) const;

  // x [local_rows(n), d] -> [n, d] (every rank's rows in rank order). Without SP returns x itself.
  Tensor gather_rows(const Tensor& x, const Stream& s, const char* label) const;
  // partial [n, d], summed over the ranks: with SP this rank's rows [n/size, d] (a new tensor); without SP
  // the sum in place (returns `partial`).
  Tensor sum_rows(const Tensor& partial, const Stream& s, const char* label) const;

  // After the backward and the data-parallel reduction: sums every tp_sum_grad entry's gradient over tp.
  // `grad`: the gradient buffer the optimizer reads (grad_flat(), or this rank's shard under ZeRO-1 / FSDP),
  // whose piece of region r starts at grad_offset(r) and covers the region's flat elements [first(r),
  // first(r) + len(r)) (the whole region when unsharded).
  struct GradView {
    Tensor grad;
    std::vector<int64_t> first, len, offset;  // per region
  };
  static GradView whole_grads(ParamStore& params);
  void sum_partial_grads(const ParamStore& params, const GradView& g, const Stream& s) const;
  // Squares of the gradient held here for the global norm: (split, whole) sums, as f64 on the host. The
  // global norm^2 is the sum over tp (and over data-parallel shards) of split plus whole / size -- every tp
  // rank holds the same whole-tensor gradients after sum_partial_grads.
  std::pair<double, double> norm_squares(const ParamStore& params, const GradView& g, const Stream& s) const;

 private:
  // The pieces of whole (unsplit) entries' gradients in `g`, as (offset in g.grad, length).
  std::vector<std::pair<int64_t, int64_t>> whole_pieces(const ParamStore& params, const GradView& g,
                                                        bool only_partial) const;
  comm::Communicator& tp_;
  bool sp_ = false;
};

}  // namespace primus::parallel
