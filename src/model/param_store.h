#pragma once
// All parameters of a model live in a few flat buffers: f32 master weights, the compute copy (bf16 on the
// GPU; on the CPU it *is* the master), f32 gradients and f32 Adam moments. Each layer owns one contiguous
// region, so DDP buckets, ZeRO shards and FSDP all-gathers are views of these buffers, not copies. Within a
// region the tensors that take weight decay come first, so the optimizer runs over two contiguous spans per
// region.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/model_spec.h"

namespace primus {

enum class InitKind { kNormal, kScaledNormal, kOnes, kZeros };

struct ParamEntry {
  std::string name;  // HF-style name, e.g. "layers.3.mlp.down_proj.weight"
  Shape shape;
  int64_t offset = 0;  // element offset into the flat buffers
  int64_t numel = 0;
  int region = 0;     // 0 = embedding, 1..L = layers, L+1 = final norm + head
  bool decay = true;  // weight decay applies (matrices yes; norms and biases no)
  InitKind init = InitKind::kNormal;
  double std = 0.0;
};

struct ParamRegion {
  int64_t begin = 0, end = 0;  // element range of the region
  int64_t decay_end = 0;       // [begin, decay_end) decays, [decay_end, end) does not
};

class ParamStore {
 public:
  // Lays out every parameter of `spec`; allocates nothing yet.
  explicit ParamStore(const ModelSpec& spec);

  // Allocates the buffers on `s`'s device. compute_dtype is f32 on the CPU (aliases master) or bf16 on CUDA.
  // master_dtype is f32 for training; f64 (CPU only, compute aliases master) serves whole-model gradient
  // checks.
  void allocate(DType compute_dtype, const Stream& s, DType master_dtype = DType::kF32);
  // Deterministic initialisation (Megatron's scheme: N(0, std), output projections N(0, std / sqrt(2L)),
  // norms 1, biases 0) keyed by (seed, parameter name, element index): the same for any device or layout.
  void initialize(uint64_t seed, const Stream& s);
  // Copies master -> compute copy (after initialisation or a checkpoint load).
  void sync_compute_copy(const Stream& s);

  int find(const std::string& name) const;  // -1 when absent
  const ParamEntry& entry(int i) const { return entries_[i]; }
  const std::vector<ParamEntry>& entries() const { return entries_; }
  const std::vector<ParamRegion>& regions() const { return regions_; }
  int64_t total_numel() const { return total_; }  // including alignment padding
  int64_t parameter_count() const;                // sum of entry sizes

  // Views into the flat buffers.
  Tensor param(int i) const { return view(compute_, i); }
  Tensor master(int i) const { return view(master_, i); }
  Tensor grad(int i) const { return view(grad_, i); }
  Tensor param(const std::string& name) const { return param(require(name)); }
  Tensor grad(const std::string& name) const { return grad(require(name)); }

  Tensor& master_flat() { return master_; }
  Tensor& compute_flat() { return compute_; }
  Tensor& grad_flat() { return grad_; }
  Tensor& adam_m_flat() { return adam_m_; }
  Tensor& adam_v_flat() { return adam_v_; }
  bool compute_aliases_master() const { return compute_aliases_master_; }

 private:
  int require(const std::string& name) const;
  Tensor view(const Tensor& flat, int i) const;
  void add(const std::string& name, const Shape& shape, int region, bool decay, InitKind init, double std);

  std::vector<ParamEntry> entries_;
  std::vector<ParamRegion> regions_;
  int64_t total_ = 0;
  Tensor master_, compute_, grad_, adam_m_, adam_v_;
  bool compute_aliases_master_ = false;
};

}  // namespace primus
