#include "checkpoint/snapshot.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "checkpoint/safetensors.h"
#include "core/cuda_runtime_bridge.h"
#include "core/error.h"
#include "core/log.h"
#include "core/master_split.h"

namespace primus::ckpt {

std::string model_file(int rank) {
  return fmt::format("model_rank{}.safetensors", rank);
}
std::string master_file(int rank) {
  return fmt::format("master_rank{}.safetensors", rank);
}
std::string optim_file(int rank) {
  return fmt::format("optim_rank{}.safetensors", rank);
}

void crash_point(const char* phase) {
  // Read at every call (not cached), so that a forked test child can set it after its parent saved.
  const char* target = std::getenv("PRIMUS_CKPT_CRASH_AT");
  if (target == nullptr) return;
  std::string want = target;
  int nth = 1;  // "<phase>@<n>": the n-th time this process reaches the phase
  if (const size_t at = want.find('@'); at != std::string::npos) {
    nth = std::atoi(want.c_str() + at + 1);
    want.resize(at);
  }
  if (want != phase) return;
  static std::mutex mu;
  static std::map<std::string, int> reached;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (++reached[want] < nth) return;
  }
  std::fprintf(stderr, "primus: PRIMUS_CKPT_CRASH_AT=%s: killing the process at this save phase\n", target);
  std::fflush(stderr);
  ::kill(::getpid(), SIGKILL);
  ::_exit(137);  // not reached
}

HostBuffer::~HostBuffer() {
  try {
    release();
  } catch (...) {
    // A failed free at exit must not terminate the process.
  }
}

void HostBuffer::release() {
  if (ptr_ == nullptr) return;
  if (pinned_) {
    cuda_bridge::host_free_pinned(ptr_);
  } else {
    std::free(ptr_);
  }
  ptr_ = nullptr;
  bytes_ = 0;
}

void HostBuffer::ensure(size_t bytes, bool pinned) {
  if (ptr_ != nullptr && bytes_ >= bytes && pinned_ == pinned) return;
  release();
  if (bytes == 0) return;
  ptr_ = pinned ? cuda_bridge::host_alloc_pinned(bytes) : std::malloc(bytes);
  if (ptr_ == nullptr)
    throw Error(ErrorKind::kRuntime,
                fmt::format("cannot allocate {} bytes of checkpoint staging memory", bytes));
  bytes_ = bytes;
  pinned_ = pinned;
}

uint64_t Snapshot::tensor_bytes() const {
  uint64_t n = 0;
  for (const auto* g : {&model, &master, &optim})
    for (const SnapshotTensor& t : *g) n += static_cast<uint64_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
  return n;
}

namespace {

void stage_flat(const Tensor& flat, HostBuffer& buf, bool pinned, const Stream& s) {
  buf.ensure(flat.nbytes(), pinned);
  // A device-to-host copy returns when the data has arrived (cuda_bridge::copy_async synchronises), so the
  // buffer holds the state as of the last finished step.
  device_copy(buf.data(), Device::cpu(), flat.data_ptr(), flat.device(), flat.nbytes(), s);
}

void add_views(const ParamStore& params, const HostBuffer& buf, DType dtype, const std::string& suffix,
               std::vector<SnapshotTensor>& out) {
  const char* base = static_cast<const char*>(buf.data());
  for (const ParamEntry& e : params.entries())
    out.push_back(SnapshotTensor{e.name + suffix, dtype, e.shape,
                                 base + static_cast<size_t>(e.offset) * dtype_size(dtype)});
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Writes one group as a safetensors file and indexes its tensors (one full shard each).
void write_group(const std::vector<SnapshotTensor>& tensors, const std::string& group,
                 const std::string& name, const Snapshot& snap, const std::string& dir, Manifest& m,
                 bool crash_inside, int slow_ms) {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.set_metadata("primus_group", group);
  w.set_metadata("rank", std::to_string(snap.rank));
  w.set_metadata("world_size", std::to_string(snap.world_size));
  w.set_metadata("iteration", std::to_string(snap.state.iteration));
  for (const SnapshotTensor& t : tensors) {
    if (t.produce)
      w.add_lazy(t.name, t.dtype, t.shape, t.produce);
    else
      w.add(t.name, t.dtype, t.shape, t.data);
    TensorIndexEntry& e = m.tensors[group][t.name];
    e.dtype = st_dtype_name(t.dtype);
    e.global_shape = t.shape;
    e.shards.push_back(ShardRef{name, t.name, Shape(t.shape.size(), 0), t.shape});
  }
  bool crashed = false;
  auto hook = [&](uint64_t written, uint64_t total) {
    if (slow_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
    if (crash_inside && !crashed && written * 2 >= total) {
      crashed = true;
      crash_point("shard");  // half of the first shard is on disk
    }
  };
  FileDigest d = w.write(dir + "/" + name, hook);
  m.files.push_back(file_record(name, d));
}

}  // namespace

Snapshot Stager::stage(const ParamStore& params, const Stream& s, const TrainingState& state,
                       const std::string& config_yaml, bool save_optim) {
  const bool pinned = s.device.is_cuda();
  auto& p = const_cast<ParamStore&>(params);  // the flat-buffer accessors are non-const; nothing is mutated
  Snapshot snap;
  snap.state = state;
  snap.config_yaml = config_yaml;
  staged_bytes_ = 0;
  const DType cdt = p.compute_flat().dtype();
  stage_flat(p.compute_flat(), compute_, pinned, s);
  staged_bytes_ += p.compute_flat().nbytes();
  add_views(params, compute_, cdt, "", snap.model);
  if (p.master_in_remainders()) {
    // The master file holds f32 as always: each tensor is joined on the host from the staged compute copy
    // and remainder when the writer reaches it (2 bytes per parameter staged instead of 4).
    stage_flat(p.remainder_flat(), master_, pinned, s);
    staged_bytes_ += p.remainder_flat().nbytes();
    const auto* hi = static_cast<const uint16_t*>(compute_.data());
    const auto* rem = static_cast<const int16_t*>(master_.data());
    for (const ParamEntry& e : params.entries()) {
      SnapshotTensor t{e.name, DType::kF32, e.shape, nullptr, {}};
      t.produce = [hi = hi + e.offset, rem = rem + e.offset, shape = e.shape, n = e.numel] {
        Tensor out = Tensor::empty(shape, DType::kF32);
        auto* b = static_cast<uint32_t*>(out.data_ptr());
        for (int64_t j = 0; j < n; ++j) b[j] = join_bits(hi[j], rem[j]);
        return out;
      };
      snap.master.push_back(std::move(t));
    }
  } else if (!p.compute_aliases_master()) {
    stage_flat(p.master_flat(), master_, pinned, s);
    staged_bytes_ += p.master_flat().nbytes();
    add_views(params, master_, p.master_flat().dtype(), "", snap.master);
  }
  if (save_optim) {
    stage_flat(p.adam_m_flat(), m_, pinned, s);
    stage_flat(p.adam_v_flat(), v_, pinned, s);
    staged_bytes_ += p.adam_m_flat().nbytes() + p.adam_v_flat().nbytes();
    const DType odt = p.adam_m_flat().dtype();
    add_views(params, m_, odt, ".exp_avg", snap.optim);
    add_views(params, v_, odt, ".exp_avg_sq", snap.optim);
  }
  snap.state.compute_dtype = dtype_name(cdt);
  snap.state.has_optimizer = save_optim;
  return snap;
}

Manifest write_snapshot(const Snapshot& snap, const std::string& dir, WriteStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  const char* slow = std::getenv("PRIMUS_CKPT_SLOW_WRITE_MS");  // test hook: slow storage
  const int slow_ms = slow ? std::atoi(slow) : 0;
  Manifest m;
  m.iteration = snap.state.iteration;
  m.world_size = snap.world_size;
  m.created = utc_now();
  write_group(snap.model, "model", model_file(snap.rank), snap, dir, m, true, slow_ms);
  if (!snap.master.empty())
    write_group(snap.master, "master", master_file(snap.rank), snap, dir, m, false, slow_ms);
  if (!snap.optim.empty())
    write_group(snap.optim, "optim", optim_file(snap.rank), snap, dir, m, false, slow_ms);
  m.files.push_back(
      file_record(kStateName, write_file_durable(dir + "/" + kStateName, state_to_json(snap.state))));
  m.files.push_back(file_record(kConfigName, write_file_durable(dir + "/" + kConfigName, snap.config_yaml)));
  const std::string text = manifest_to_text(m);
  write_file_durable(dir + "/" + kManifestName, text);
  crash_point("manifest");
  if (stats) {
    stats->bytes = text.size();
    for (const FileRecord& f : m.files) stats->bytes += f.bytes;
    stats->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return m;
}

}  // namespace primus::ckpt
