#pragma once
// Data parallelism over a ParamStore's flat buffers (docs/distributed.md, "Data-parallel training"):
//   DDP     (no_shard)            gradients all-reduced over `dp`, one bucket per parameter region, launched
//                                 as soon as the region's backward of the last micro-batch is over
//                                 (overlap_grad_reduce) on a communication stream; f32 or bf16 reduction
//   ZeRO-1  (optim, optim_grads)  gradients reduce-scattered over `dp` per region; master weights and Adam
//                                 moments hold only this rank's chunk; updated parameters all-gathered
//                                 region by region behind each region's update (overlap_param_gather: the
//                                 update and the gathers run under the next forward, which waits per region)
//   FSDP    (optim_grads_params)  everything sharded over `dp_shard`; each region all-gathered before use,
//                                 the next one prefetched on the communication stream, released after use;
//                                 gradients reduce-scattered per micro-batch into the f32 shard
//   HSDP    FSDP inside each replica group + an all-reduce of the gradient shards over `dp_replicate`
//
// Emulation: a single process can reproduce any of these layouts' reduction order exactly
// (PRIMUS_DP_EMULATE=<dp size>), which is what the bitwise equivalence tests compare against.
#include <functional>
#include <memory>
#include <vector>

#include "core/stream_events.h"
#include "model/llama_model.h"
#include "model/param_store.h"
#include "parallel/parallel_dims.h"
#include "parallel/process_groups.h"
#include "parallel/tensor_parallel.h"
#include "train/optimizer.h"
#include "train/step_marks.h"

namespace primus {

struct DpConfig {
  parallel::Sharding sharding = parallel::Sharding::kNoShard;
  int dp = 1, dp_replicate = 1, dp_shard = 1;
  // Expert parallelism: experts split over `ep` ranks; their gradients are reduced (ZeRO-1: sharded) over the
  // `edp` ranks holding the same experts (the ParamStore's expert regions).
  int ep = 1, edp = 1;
  // Context parallelism: the cp ranks of a dp rank hold the same model and split its sequences, so dense
  // gradients are reduced, and ZeRO-1 / FSDP state sharded, over dp x cp (TorchTitan's dp_shard_cp mesh).
  int cp = 1;
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;
  bool reduce_in_bf16 = false;  // DDP only (grad_reduce_in_bf16)
  bool emulate = false;         // one process reproducing the layout's arithmetic

  bool fsdp() const { return sharding == parallel::Sharding::kOptimGradsParams; }
  bool zero1() const {
    return sharding == parallel::Sharding::kOptim || sharding == parallel::Sharding::kOptimGrads;
  }
  // Ranks the parameter state is sharded over (the ParamStore's region multiple), and their group: the
  // gradient reduction's too (DDP: dp, or dp_cp).
  int shard_ranks() const { return fsdp() ? dp_shard * cp : zero1() ? dp * cp : 1; }
  const char* shard_group() const {
    return fsdp() ? (cp > 1 ? "dp_shard_cp" : "dp_shard") : (cp > 1 ? "dp_cp" : "dp");
  }
  int expert_shard_ranks() const { return zero1() ? edp : fsdp() ? edp / dp_replicate : 1; }
  // The group that reduces and shards the expert regions: expert-dp, inside one replica under HSDP (the
  // replicas then all-reduce expert shards like the others).
  const char* expert_group() const { return fsdp() && dp_replicate > 1 ? "edp_shard" : "edp"; }
  ShardMode shard_mode() const {
    return fsdp() ? ShardMode::kFull : zero1() ? ShardMode::kOptimizer : ShardMode::kNone;
  }
  std::string describe() const;
};

DpConfig dp_config(const parallel::ParallelLayout& layout, const ParallelConfig& p);

class DataParallel : public ParamHooks {
 public:
  // `groups` is null when emulating. `params` is allocated with cfg.shard_mode() over cfg.shard_ranks()
  // (whole, kNone, when emulating).
  DataParallel(const DpConfig& cfg, ParamStore& params, const parallel::ProcessGroups* groups,
               const Stream& compute);
  ~DataParallel() override;

  const DpConfig& config() const { return cfg_; }
  const Stream& comm_stream() const { return comm_; }
  // The compute stream's waits for collectives go through `marks` (timed, for the straggler measure);
  // nullptr = plain waits. Not owned.
  void set_step_marks(CudaStepMarks* marks) { marks_ = marks; }
  // Tensor parallelism (not owned; nullptr = none): finish_grads also sums the gradients each tp rank holds
  // a part of, and grad_norm counts split tensors on every tp rank and whole ones once.
  void set_tensor_parallel(const parallel::TensorParallel* tp) { tp_ = tp; }
  // Pipeline parallelism (not owned; nullptr = none): each stage holds its own layers, so grad_norm adds the
  // stages' squares over `pp`. With tied embeddings split over stages (ModelSpec::tied_across_stages) the
  // embedding's and its copy's gradients are summed over `embedding` (the first and the last stage) after
  // the data-parallel reduction, and grad_norm leaves the copy out.
  void set_pipeline(comm::Communicator* pp, comm::Communicator* embedding);

  // Training step protocol: begin_step, per micro-batch begin_micro + forward_backward, finish_grads,
  // grad_norm, step.
  // grads_prepared: the overlapped update already zeroed this step's accumulated gradients (DDP).
  void begin_step(bool grads_prepared = false);
  // The row-sparse input embedding (train/sparse_embedding.h), before the step's first backward: `rows` are
  // the table rows this rank's tokens of the step look up (host; any order, repeats allowed). Their union
  // over dp (a presence all-reduce) is handed to the store to reserve ascending
  // (ParamStore::reserve_sparse_rows), so every rank's slots hold the same rows, and region 0's reduction
  // all-reduces those slots instead of a V x D table: bitwise the dense sums (an untouched row's slot adds
  // zeros), on a fraction of the bytes.
  void reserve_sparse_rows(const std::vector<int32_t>& rows);
  void begin_micro(bool last);
  void finish_grads();
  double grad_norm();  // L2 norm of the whole reduced gradient; the same value on every rank
  void step(AdamW& opt, double lr, float grad_scale);
  void set_training(bool training) { training_ = training; }

  // Emulation: runs the micro-batches of every virtual rank; fwd_bwd(a, d) runs micro-batch a of rank d,
  // accumulating into params.grad_flat(). Leaves the reduced gradient in grad_flat().
  void emulate_grads(int64_t micro_per_rank, const std::function<void(int64_t a, int d)>& fwd_bwd);

  // Checkpoints: whole master weights and moments into `full` (a kNone store of the same layout, on the CPU);
  // collective over the shard group. And back: this rank's chunks (and compute copy) from `full`.
  void gather_full(ParamStore& full);
  void load_from_full(ParamStore& full);

  // ParamHooks
  void before_forward(int region) override;
  void after_forward(int region) override;
  void before_backward(int region) override;
  void after_backward(int region) override;
  void backward_deferred(int region) override;

 private:
  comm::Communicator& group(const char* name) const;
  comm::Communicator& shard_group() const;
  // The group that reduces (and, sharded, splits) region r: the shard group, or expert-dp for expert regions.
  comm::Communicator& region_group(int r) const;
  int last_region() const { return params_.head_region(); }  // the last region the model's hooks name
  int all_regions() const { return static_cast<int>(params_.regions().size()); }  // + expert regions
  bool edge(int r) const { return r == 0 || r == last_region(); }
  void reduce_region(int r);  // DDP / ZeRO-1, last micro-batch
  // FSDP
  void gather(int r);
  void use(int r, bool with_grad);
  void release(int r);
  // The gathered weights only: a region whose weight gradients are still queued (zero-bubble BI before its
  // BW) keeps its gradient buffer attached.
  void release_params(int r);
  // Region r with the expert regions it owns (expert parallelism: a layer's experts are a region of their
  // own, gathered, used, reduced and released with the layer).
  std::vector<int> with_owned(int r) const;
  void reduce_scatter_fsdp(int r);
  Tensor shard_grad() const;
  // This rank's AdamW spans of region r (-1: of every region).
  std::vector<AdamSpan> shard_spans(int region = -1);

  DpConfig cfg_;
  ParamStore& params_;
  const parallel::ProcessGroups* groups_;
  Stream compute_, comm_;
  // ZeRO-1 with overlap_param_gather: the stream the shard update runs on, under the next forward (step()).
  // The compute stream itself otherwise.
  Stream update_;
  CudaStepMarks* marks_ = nullptr;
  const parallel::TensorParallel* tp_ = nullptr;
  comm::Communicator* pp_ = nullptr;
  comm::Communicator* embedding_ = nullptr;  // set when this stage holds a tied embedding or its copy
  void sum_tied_embedding_grads();
  // The part of region 0 (the tied embedding or its copy) in the gradient buffer the optimizer reads.
  Tensor region0_grads();
  double stage_grad_norm();  // this pipeline stage's part (the whole model without pipeline parallelism)
  // The gradient buffer the optimizer reads, as tensor parallelism's reductions see it.
  parallel::TensorParallel::GradView grad_view();
  void compute_waits_for(const std::shared_ptr<StreamEvent>& e);  // through marks_ when set
  bool training_ = true;
  bool last_micro_ = true;
  std::vector<bool> reduced_;                          // DDP/ZeRO: region reduced this step
  int64_t sparse_rows_ = 0;                            // reserve_sparse_rows: the union's size this step
  std::vector<std::shared_ptr<StreamEvent>> pending_;  // ZeRO-1 parameter gathers not yet waited for
  Tensor zero_grad_shard_;                             // ZeRO-1: reduce-scattered f32 gradient chunks
  std::shared_ptr<StreamEvent> params_ready_;          // FSDP: the optimizer's shard update
  struct Gathered {
    Tensor params, grads;
    std::shared_ptr<StreamEvent> ready;
    bool attached = false;
    // Micro-batches whose backward of the region has begun and whose gradient is not complete yet: more
    // than one while zero-bubble BW passes are pending. They share `grads`; the reduce-scatter waits for 0.
    int open = 0;
  };
  std::vector<Gathered> gathered_;       // FSDP, per region
  std::vector<std::vector<int>> owned_;  // per hook region: its expert regions (ParamRegion::owner)
};

}  // namespace primus
