#pragma once
// A snapshot is everything one checkpoint holds, in host memory: named tensors in three groups (model =
// the compute copy, master = f32 master weights when they differ from the compute copy -- joined from the
// compute copy and the remainders when the store keeps its masters that way --, optim = Adam moments), the
// training state and the resolved configuration. Staging a ParamStore copies its flat buffers
// into (pinned, on the GPU) host buffers in one copy each; training may then mutate the parameters while a
// background thread writes the snapshot.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/state.h"
#include "core/device.h"
#include "core/dtype.h"
#include "model/param_store.h"

namespace primus::ckpt {

// File names inside a checkpoint directory (rank-suffixed: each rank of a distributed save writes its own).
std::string model_file(int rank);   // model_rank{r}.safetensors
std::string master_file(int rank);  // master_rank{r}.safetensors
std::string optim_file(int rank);   // optim_rank{r}.safetensors

// Host memory that stays allocated across saves (reallocated only when it must grow).
class HostBuffer {
 public:
  HostBuffer() = default;
  ~HostBuffer();
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  void ensure(size_t bytes, bool pinned);
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void release();
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  bool pinned_ = false;
};

struct SnapshotTensor {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  const void* data = nullptr;  // borrowed (a staging buffer or a caller's tensor)
  // Instead of data: made when the file writer reaches the tensor (SafetensorsWriter::add_lazy).
  std::function<Tensor()> produce;
};

struct Snapshot {
  TrainingState state;
  std::string config_yaml;
  std::vector<SnapshotTensor> model, master, optim;
  int rank = 0;
  int world_size = 1;
  uint64_t tensor_bytes() const;
};

// Reusable staging buffers for one ParamStore.
class Stager {
 public:
  // Copies the parameters (and the Adam moments when save_optim) into host memory and returns a snapshot
  // whose tensors point into it. Blocks until the copies are done, so the snapshot is consistent. The
  // snapshot stays valid until the next stage() call.
  Snapshot stage(const ParamStore& params, const Stream& s, const TrainingState& state,
                 const std::string& config_yaml, bool save_optim);
  uint64_t staged_bytes() const { return staged_bytes_; }

 private:
  HostBuffer compute_, master_, m_, v_;  // master_ holds the i16 remainders when the store keeps those
  uint64_t staged_bytes_ = 0;
};

struct WriteStats {
  uint64_t bytes = 0;
  double seconds = 0;
};

// Writes the snapshot's files and its manifest (last) into the existing directory `dir`. Crash-test hooks
// (PRIMUS_CKPT_CRASH_AT=shard|manifest) fire inside.
Manifest write_snapshot(const Snapshot& snap, const std::string& dir, WriteStats* stats = nullptr);

// PRIMUS_CKPT_CRASH_AT=<phase>[@<n>]: the process SIGKILLs itself the n-th time (default the first) it
// reaches that save phase (stage, shard, manifest, publish, latest, retention). A test hook for "crash
// during save"; unset in normal runs.
void crash_point(const char* phase);

}  // namespace primus::ckpt
