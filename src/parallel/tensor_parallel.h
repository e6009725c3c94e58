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
// Gradients: split tensors (EntrySlice) are this rank's alone; elements several ranks hold alike but each
// computes part of the gradient of (ParamEntry::tp_sum: norms under SP and q/k-norm over the tp group,
// replicated key/value rows over the ranks sharing the kv head) are summed after the backward
// (sum_partial_grads), and the gradient norm counts every element once (norm_contribution).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "model/param_store.h"

namespace primus::parallel {

class TensorParallel {
 public:
  // `tp`: the tensor-parallel group (not owned; outlives this). kv_replicas: ranks sharing a key/value head
  // (ModelSpec::TensorShard); above 1 this constructor is collective over tp: it splits the groups of
  // consecutive tp ranks that share a head (the model's heads decide them, not the layout).
  TensorParallel(comm::Communicator& tp, bool sequence_parallel, int kv_replicas = 1);
  ~TensorParallel();

  int size() const { return tp_.size(); }
  int rank() const { return tp_.rank(); }
  bool sequence_parallel() const { return sp_; }
  int kv_replicas() const { return kv_replicas_; }
  comm::Communicator& group() const { return tp_; }
  // Rows of the residual stream this rank holds out of `rows` tokens (rows / size under SP).
  int64_t local_rows(int64_t rows) const;

  // x [local_rows(n), d] -> [n, d] (every rank's rows in rank order). Without SP returns x itself.
  Tensor gather_rows(const Tensor& x, const Stream& s, const char* label) const;
  // partial [n, d], summed over the ranks: with SP this rank's rows [n/size, d] (a new tensor); without SP
  // the sum in place (returns `partial`).
  Tensor sum_rows(const Tensor& partial, const Stream& s, const char* label) const;

  // Async TP (tp_comm_overlap, sequence parallelism only): the same two moves with the collective split
  // from the GEMM that produces or consumes its rows, so that the GEMM runs while the collective is on the
  // wire (a stream of its own; the caller's stream waits for it before these return).
  bool overlap() const { return overlap_; }
  void set_overlap(bool on);  // needs sequence parallelism
  // A computation over row ranges [r0, r1) of an [n, *] tensor: `rows` is the range's input (gather) or the
  // view to write (sum).
  using RowsFn = std::function<void(int64_t r0, int64_t r1, const Tensor& rows)>;
  // gather_rows(x) -> [n, d], and consume(r0, r1, rows) over every range of it: this rank's own rows first
  // (straight from x, under the all-gather), then the others' once they are there.
  Tensor gather_rows_overlapped(const Tensor& x, const Stream& s, const char* label,
                                const RowsFn& consume) const;
  // sum_rows of an [n, cols] partial that produce(r0, r1, out) writes range by range: the rows go in
  // `chunks` slices of every rank's part, and slice c's reduce-scatter runs while slice c + 1 is produced.
  // `under_last` (optional) runs after the last slice is produced, under its reduce-scatter (a backward
  // puts its weight-gradient GEMM there). Returns this rank's summed rows [n / size, cols].
  Tensor sum_rows_overlapped(int64_t n, int64_t cols, DType dtype, const Stream& s, const char* label,
                             const RowsFn& produce, const std::function<void()>& under_last = {}) const;

  // The gradient buffer the optimizer reads (grad_flat(), or this rank's shard under ZeRO-1 / FSDP): its
  // piece of region r starts at offset[r] and covers the region's flat elements [first[r], first[r] + len[r])
  // (the whole region when unsharded).
  struct GradView {
    Tensor grad;
    std::vector<int64_t> first, len, offset;  // per region
  };
  static GradView whole_grads(ParamStore& params);
  // After the backward and the data-parallel reduction: sums every ParamEntry::tp_sum range's gradient over
  // its group (tp, or the kv group).
  void sum_partial_grads(const ParamStore& params, const GradView& g, const Stream& s) const;
  // This rank's share of the global squared gradient norm (f64, on the host): its split elements' squares
  // plus those of elements held alike by n ranks divided by n (whole tensors: the tp size; replicated kv
  // rows: kv_replicas), after sum_partial_grads. Summed over tp (and the data-parallel shards): the norm^2.
  double norm_contribution(const ParamStore& params, const GradView& g, const Stream& s) const;

 private:
  enum class Pieces { kWhole, kTpSum, kKvSum };
  // Ranges of g.grad as (offset, length): whole (unsplit) entries; tp_sum ranges summed over tp; tp_sum
  // ranges summed over the kv group.
  std::vector<std::pair<int64_t, int64_t>> pieces(const ParamStore& params, const GradView& g,
                                                  Pieces which) const;
  void sum_pieces(const std::vector<std::pair<int64_t, int64_t>>& pieces, const Tensor& grad,
                  comm::Communicator& group, const Stream& s, const char* label) const;
  comm::Communicator& tp_;
  bool sp_ = false;
  bool overlap_ = false;
  int overlap_chunks_ = 2;        // slices per rank's rows in sum_rows_overlapped
  int overlap_sms_ = 0;           // SMs the GEMMs leave to a collective beside them
  mutable Stream comm_stream_{};  // async TP's collectives (created on first use)
  mutable bool comm_stream_made_ = false;
  const Stream& comm_stream(const Stream& compute) const;
  int kv_replicas_ = 1;
  std::unique_ptr<comm::Communicator> kv_group_;  // the ranks sharing this rank's kv head (kv_replicas > 1)
};

}  // namespace primus::parallel
