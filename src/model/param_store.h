#pragma once
// All parameters of a model live in a few flat buffers: f32 master weights, the compute copy (bf16 on the
// GPU; on the CPU it *is* the master), f32 gradients and Adam moments (f32, or bf16: set_moment_dtypes). Each
// layer owns one contiguous region, so DDP buckets, ZeRO shards and FSDP all-gathers are views of these
// buffers, not copies. Within a region the tensors that take weight decay come first, so the optimizer runs
// over two contiguous spans per region.
//
// Master weights in remainders (core/master_split.h): with a bf16 compute copy on CUDA and whole-model
// buffers (one GPU, DDP) there is no f32 master buffer. The compute copy holds the master's upper 16 bits
// (rounded) and an i16 buffer the remainder, which together are the f32 master exactly: 16 bytes per
// parameter for weights + optimizer state instead of 18. master(i) / master_flat() then throw; master_f32(i)
// (a joined copy) and set_master(i) (a split write) work in both modes. In every mode the bf16 compute copy
// made from a master is compute_bits() of it, so both layouts hold bitwise the same weights.
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "model/model_spec.h"
#include "ops/row_sparse_grad.h"

namespace primus {

enum class InitKind { kNormal, kScaledNormal, kOnes, kZeros };

// Something that may still be writing parameters on another stream: the overlapped optimizer update
// (train/overlapped_update.h) writes a layer's weights piece by piece while the next forward runs. Every read
// of a parameter's values (param(i), master(i), master_f32(i)) calls before_read(i) first, so the reading
// stream waits for exactly the piece holding entry i and not for the whole layer.
class ParamReadGate {
 public:
  virtual ~ParamReadGate() = default;
  virtual void before_read(int entry) = 0;
};

// Data-parallel sharding of the flat buffers (src/parallel/data_parallel.h). Region r is split into `ranks`
// equal chunks (regions are padded so that they divide); a rank owns chunk `rank` of every region.
//   kNone       every buffer holds the whole model
//   kOptimizer  ZeRO-1: master weights and Adam moments hold only this rank's chunks; the compute copy and
//               the gradients are whole
//   kFull       FSDP: master, moments, compute copy and gradients hold only this rank's chunks; a layer's
//               whole parameters and gradients exist only while attached (attach_region)
enum class ShardMode { kNone, kOptimizer, kFull };

// How allocate() holds the f32 master weights.
//   kAuto        use_master_remainders() decides (core/master_split.h): remainders for bf16 compute on CUDA
//   kF32         a master buffer of its own (or the compute copy itself when it has the master's dtype)
//   kRemainders  the bf16 compute copy plus an i16 remainder buffer (needs bf16 compute, an f32 master and
//                whole-model buffers; allowed on the CPU too, for tests)
enum class MasterStorage { kAuto, kF32, kRemainders };

// Where a rank's tensor sits in the whole (one-rank) tensor of the same name, under tensor or expert
// parallelism. The whole tensor is viewed as a matrix [rows, whole_cols] (whole_cols: its last dimension; a
// 1-D tensor is one column); this rank's tensor, viewed as [rows', cols'], holds in order the whole rows of
// `row_blocks`, restricted to the columns [col_begin, col_begin + cols'). A tensor held whole has no blocks.
// Initialisation, checkpoint gathers and loads all go through it, so every split is described here once.
struct EntrySlice {
  std::vector<std::pair<int64_t, int64_t>> row_blocks;  // (first whole row, rows), in local row order
  int64_t col_begin = 0;
  int64_t whole_cols = 1;
  int64_t whole_numel = 0;
  bool whole() const { return row_blocks.empty(); }
  // Calls run(local_offset, whole_offset, length) for each contiguous run of the local tensor (local_cols:
  // its last dimension), in local order. A whole tensor is one run.
  template <typename F>
  void for_each_run(int64_t local_numel, int64_t local_cols, F&& run) const {
    if (whole()) {
      run(int64_t{0}, int64_t{0}, local_numel);
      return;
    }
    int64_t local = 0;
    for (const auto& [first, rows] : row_blocks)
      for (int64_t r = first; r < first + rows; ++r, local += local_cols)
        run(local, r * whole_cols + col_begin, local_cols);
  }
};

struct ParamEntry {
  std::string name;  // HF-style name, e.g. "layers.3.mlp.down_proj.weight"
  Shape shape;
  int64_t offset = 0;  // element offset into the flat buffers
  int64_t numel = 0;
  int region = 0;     // 0 = embedding, 1..L = layers, L+1 = final norm + head (+ MTP modules)
  bool decay = true;  // weight decay applies (matrices yes; norms and biases no)
  InitKind init = InitKind::kNormal;
  double std = 0.0;
  // This rank's part of the whole tensor (tensor / expert parallelism); it initialises as that part of the
  // one-rank model.
  EntrySlice slice;
  // Tensor parallelism: elements [first, first + count) of this tensor that several tp ranks hold alike but
  // each computes only part of the gradient of: norm weights under sequence parallelism and the per-head
  // q/k-norm weights (the whole tensor, summed over the tp group), key/value rows replicated because there
  // are fewer kv heads than ranks (summed over the ranks sharing the head, kv_group). Summed after the
  // backward (parallel/tensor_parallel.h).
  struct TpSum {
    int64_t first = 0, count = 0;
    bool kv_group = false;
  };
  TpSum tp_sum;
  // A buffer that no gradient trains and every rank holds alike (the MoE expert bias, which its layer moves
  // by its own rule from loads summed over the global batch): a zero-gradient entry, so AdamW leaves it
  // bitwise as it is and the gradient norm adds zeros. Under ZeRO-1 / FSDP the store keeps a whole f32 copy
  // of it on every rank beside the master chunks (master_f32 / set_master below).
  bool replicated = false;
  int64_t cols() const { return shape.size() <= 1 ? 1 : shape.back(); }  // as EntrySlice views it
};

struct ParamRegion {
  int64_t begin = 0, end = 0;  // element range of the region
  int64_t decay_end = 0;       // [begin, decay_end) decays, [decay_end, end) does not
  // Expert parallelism: the region holds one MoE layer's local experts (gradients reduced over the expert
  // data-parallel group, not over dp; see the layout below).
  bool experts = false;
  int owner = -1;  // expert regions: the hook region whose forward and backward use them (layer l: l + 1)
};

class ParamStore {
 public:
  // Lays out every parameter of `spec`; allocates nothing yet. Each region's length is padded to a multiple
  // of 64 x region_multiple elements (zeros), so that it splits into region_multiple aligned chunks.
  //
  // Regions: 0 = embedding, 1..L = layers, L+1 = final norm + head (+ MTP modules): the regions the model's
  // hooks name (hook_regions()). With experts split over ranks (spec.ep.size > 1) each MoE layer's local
  // experts (gate_up and down, [local_experts, ...]) move out of the layer into a region of their own after
  // the head, one per MoE layer in layer order (then the MTP depths'), padded to expert_region_multiple
  // (0 = region_multiple): data parallelism reduces and shards those over expert-dp, the rest over dp.
  explicit ParamStore(const ModelSpec& spec, int region_multiple = 1, int expert_region_multiple = 0);

  // Allocates the buffers on `s`'s device. compute_dtype is f32 on the CPU (aliases master) or bf16 on CUDA.
  // master_dtype is f32 for training; f64 (CPU only, compute aliases master) serves whole-model gradient
  // checks. `storage`: see MasterStorage.
  void allocate(DType compute_dtype, const Stream& s, DType master_dtype = DType::kF32,
                MasterStorage storage = MasterStorage::kAuto);
  // A frozen base model (LoRA, model/lora_adapter.h): only the weights, in `dtype` (bf16 on CUDA; f32 or f64
  // on the CPU), whole on every rank: no master copy, no gradients, no optimizer state. grad(i) is then an
  // undefined tensor (the model skips the gradient), master_f32(i) the weights widened and set_master(i)
  // rounds into them.
  void allocate_frozen(DType dtype, const Stream& s);
  bool frozen() const { return frozen_; }
  // Sharded allocation: `ranks` must divide region_multiple. See ShardMode. Shards keep an f32 master
  // (kNone allocates as allocate() does). Expert regions shard over (expert_ranks, expert_rank) (-1: the
  // same as the others), which must divide expert_region_multiple.
  void allocate_sharded(DType compute_dtype, const Stream& s, ShardMode mode, int ranks, int rank,
                        int expert_ranks = -1, int expert_rank = 0);
  // Deterministic initialisation (Megatron's scheme: N(0, std), output projections N(0, std / sqrt(2L)),
  // norms 1, biases 0) keyed by (seed, parameter name, element index): the same for any device or layout.
  void initialize(uint64_t seed, const Stream& s);
  // Master -> compute copy (compute_from_master) after the master was written through master_flat(). Nothing
  // to do when the compute copy is the master or its upper half (remainders).
  void sync_compute_copy(const Stream& s);
  // compute = the compute copy of `master` (same numel, same device): a copy for equal dtypes, compute_bits()
  // for f32 -> bf16 (core/master_split.h), else a cast. Every master -> compute conversion goes through it.
  static void compute_from_master(const Tensor& master, Tensor& compute, const Stream& s);

  int find(const std::string& name) const;  // -1 when absent
  const ParamEntry& entry(int i) const { return entries_[i]; }
  const std::vector<ParamEntry>& entries() const { return entries_; }
  const std::vector<ParamRegion>& regions() const { return regions_; }
  int hook_regions() const { return hook_regions_; }  // L + 2: the expert regions (if any) follow
  int head_region() const { return hook_regions_ - 1; }
  const ModelSpec& spec() const { return spec_; }  // the spec it was laid out from
  const ModelSpec::ExpertShard& expert_shard() const { return ep_; }
  const ModelSpec::TensorShard& tensor_shard() const { return tp_; }
  // Some entry holds only part of its whole tensor (tensor or expert parallelism), or some module is on
  // another pipeline stage.
  bool split() const { return ep_.size > 1 || tp_.size > 1 || spec_.pp.split; }
  int64_t total_numel() const { return total_; }  // including alignment padding
  int64_t parameter_count() const;                // sum of entry sizes

  // Views into the flat buffers. The reads of values pass the read gate (nullptr = none; not owned).
  void set_read_gate(ParamReadGate* gate) { gate_ = gate; }
  Tensor param(int i) const {
    if (gate_) gate_->before_read(i);
    return region_view(compute_, true, i);
  }
  Tensor master(int i) const;  // whole-model f32/f64 master view (throws when sharded or in remainders)
  // Master weights in either layout (whole-model stores only). master_f32: the f32 master of entry i -- its
  // view, or in remainders a fresh tensor joined on `s` (throws for an f64 master: use master(i)).
  // set_master: writes entry i's master from `value` (any float dtype, `numel` elements, on the CPU or the
  // store's device) and its compute copy: cast + compute_from_master, or a split into compute + remainder.
  // Sharded stores answer both for replicated entries only: master_f32 is the whole f32 copy (a view: the
  // caller may update it in place and hand it back), set_master writes that copy, the entry's part of this
  // rank's master chunk (which checkpoints gather) and, under ZeRO-1, its whole compute copy. FSDP's compute
  // chunk is left to the next optimizer update, which rewrites it from the master chunk: nothing reads it
  // (a gather of it may run on the communication stream meanwhile), the forward reads master_f32.
  Tensor master_f32(int i, const Stream& s) const;
  void set_master(int i, const Tensor& value, const Stream& s);
  bool master_in_remainders() const { return remainders_; }
  DType master_dtype() const;  // f32, or f64 for a gradient-check store
  // Entry i's gradient. The row-sparse embedding gradient has no dense view: grad(i) throws for it
  // (sparse_grad() holds it).
  Tensor grad(int i) const;
  Tensor param(const std::string& name) const { return param(require(name)); }
  Tensor grad(const std::string& name) const { return grad(require(name)); }

  // Sharding. Chunk of region r owned by this rank: flat elements [chunk_begin(r), chunk_begin(r) +
  // chunk_len(r)); its place in the shard-sized buffers starts at shard_offset(r).
  ShardMode shard_mode() const { return shard_mode_; }
  int shard_ranks() const { return shard_ranks_; }  // of the hook regions (expert regions: region_ranks)
  int shard_rank() const { return shard_rank_; }
  int region_ranks(int r) const { return regions_[r].experts ? expert_ranks_ : shard_ranks_; }
  int region_rank(int r) const { return regions_[r].experts ? expert_rank_ : shard_rank_; }
  int64_t region_len(int r) const { return regions_[r].end - regions_[r].begin; }
  int64_t chunk_len(int r) const { return region_len(r) / region_ranks(r); }
  int64_t chunk_begin(int r) const { return regions_[r].begin + region_rank(r) * chunk_len(r); }
  int64_t shard_offset(int r) const { return shard_offsets_[r]; }
  int64_t shard_total() const { return shard_total_; }
  // kFull: param(i)/grad(i) of region r's entries resolve into these whole-region buffers until detached.
  void attach_region(int r, const Tensor& compute, const Tensor& grad);
  void detach_region(int r);
  int region_of_entry(int i) const { return entries_[i].region; }

  // The flat buffers: whole-model in kNone; shard-sized where the mode shards them. master_flat() throws in
  // remainders, remainder_flat() (i16, whole-model) everywhere else.
  Tensor& master_flat();
  Tensor& remainder_flat();
  Tensor& compute_flat() { return compute_; }
  // The dense gradient buffer: flat elements [grad_base(), total_numel()) (sharded modes: the shard).
  Tensor& grad_flat() { return grad_; }
  // The dense gradient of flat elements [b, e) (whole-model stores); b >= grad_base().
  Tensor grad_span(int64_t b, int64_t e) const;
  int64_t grad_base() const { return grad_base_; }

  // The input embedding's gradient held row-sparse (ops/row_sparse_grad.h; train/sparse_embedding.h decides
  // when): call before allocate(), for a whole-model store whose region 0 is the embedding alone. allocate()
  // then gives region 0 no dense gradient (grad_base() = region 1's start) but a RowSparseGrad of
  // `capacity` rows; zeroing region 0's gradients (begin_grad_step, begin_region_grads(0)) clears it.
  void set_sparse_embedding_grad(int64_t capacity);
  int sparse_entry() const { return sparse_entry_; }  // -1: every gradient is dense
  bool sparse_region(int r) const { return sparse_entry_ >= 0 && r == 0; }
  ops::RowSparseGrad& sparse_grad() { return sparse_; }
  const ops::RowSparseGrad& sparse_grad() const { return sparse_; }
  // Data parallelism: the table rows (i32 on the store's device) that every rank's tokens of this step touch,
  // for the step's first embedding backward to reserve (ops::row_sparse_reserve) before it adds, so that the
  // slots are laid out alike on every rank. Taken once.
  void reserve_sparse_rows(Tensor rows) { sparse_reserve_ = std::move(rows); }
  Tensor take_sparse_reservation() { return std::exchange(sparse_reserve_, Tensor()); }
  Tensor& adam_m_flat() { return adam_m_; }
  Tensor& adam_v_flat() { return adam_v_; }
  // The Adam moments' dtypes (the precision-aware optimizer: Megatron's exp_avg_dtype, exp_avg_sq_dtype):
  // f32 unless set, before allocating, to bf16 (each on its own; an f32 master only). Only the store the
  // optimizer updates holds bf16 moments; stores that stage or gather state for checkpoints keep f32, which
  // holds every bf16 value exactly, and ops::copy_cast converts where the two meet.
  void set_moment_dtypes(DType m, DType v);
  bool compute_aliases_master() const { return compute_aliases_master_; }

  // Gradient zeroing. By default begin_grad_step zeroes the whole gradient buffer and every write
  // accumulates. With set_overwritten_grads(entries) -- entries whose first gradient write is a whole-tensor
  // GEMM (linear_backward_weight) -- that first write overwrites instead (grad_accumulate(i) answers false
  // once), and only the rest of the buffer is zeroed: a 1.5 B parameter model saves a 6 GB memset and the
  // GEMMs' read of C every step. "Once" is per step for whole-model gradients (begin_grad_step /
  // end_grad_step) and per micro-batch for FSDP's per-region buffers (begin_region_grads when a region's
  // buffer is created, end_region_grads before it is reduced). The end calls zero a listed entry that no GEMM
  // wrote (never in a full step; it keeps the buffer right if one is skipped).
  void set_overwritten_grads(const std::vector<int>& entries);
  void begin_grad_step(const Stream& s);
  bool grad_accumulate(int i);
  void end_grad_step(const Stream& s) { zero_unwritten(-1, s); }
  void begin_region_grads(int r, Tensor& region_grads, const Stream& s);  // region_grads: region r, whole
  void begin_region_grads(int r, const Stream& s);  // region r of the whole-model buffer (or sparse rows)
  void end_region_grads(int r, const Stream& s) { zero_unwritten(r, s); }  // while region r is attached
  // The same for a few entries whose gradients are complete before their region's backward ends
  // (ParamHooks::grads_final: a layer's MLP matrices).
  void end_entry_grads(std::span<const int> entries, const Stream& s);

 private:
  int require(const std::string& name) const;
  void zero_unwritten(int region, const Stream& s);  // listed entries no GEMM wrote; region -1 = all
  void zero_if_unwritten(int i, const Stream& s);    // entry i, when listed and no GEMM wrote it
  Tensor view(const Tensor& flat, int i) const;
  void add(const std::string& name, const Shape& shape, int region, bool decay, InitKind init, double std,
           EntrySlice slice = {});
  Tensor region_view(const Tensor& flat, bool compute, int i) const;

  std::vector<ParamEntry> entries_;
  std::vector<ParamRegion> regions_;
  int64_t total_ = 0;
  Tensor master_, compute_, grad_, adam_m_, adam_v_;
  Tensor remainder_;       // i16, in remainders only (master_ is then undefined)
  int64_t grad_base_ = 0;  // flat element of grad_[0]
  int sparse_entry_ = -1;  // set_sparse_embedding_grad
  int64_t sparse_capacity_ = 0;
  ops::RowSparseGrad sparse_;
  Tensor sparse_reserve_;  // reserve_sparse_rows
  // Sharded stores: the replicated entries' whole f32 values, entry i at replicated_at_[i] (-1: none).
  Tensor replicated_;
  std::vector<int64_t> replicated_at_;
  Tensor replicated_view(int i) const;
  void set_replicated(int i, const Tensor& value, const Stream& s);  // value: f32, entry i's shape
  DType moment_m_ = DType::kF32, moment_v_ = DType::kF32;            // set_moment_dtypes
  bool compute_aliases_master_ = false;
  bool remainders_ = false;
  bool frozen_ = false;  // allocate_frozen
  ShardMode shard_mode_ = ShardMode::kNone;
  int region_multiple_ = 1, shard_ranks_ = 1, shard_rank_ = 0;
  int expert_region_multiple_ = 1, expert_ranks_ = 1, expert_rank_ = 0;
  int hook_regions_ = 0;
  ModelSpec spec_;
  ModelSpec::ExpertShard ep_;
  ModelSpec::TensorShard tp_;
  std::vector<int64_t> shard_offsets_;
  int64_t shard_total_ = 0;
  std::vector<Tensor> attached_compute_, attached_grad_;
  ParamReadGate* gate_ = nullptr;
  std::vector<char> overwritten_, written_;              // per entry
  std::vector<std::pair<int64_t, int64_t>> zero_spans_;  // [begin, end) of the buffer begin_grad_step zeroes
  std::vector<std::vector<std::pair<int64_t, int64_t>>> region_zero_spans_;  // the same per region, relative
};

}  // namespace primus
