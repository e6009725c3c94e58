#pragma once
// Verification and loading. Nothing of a checkpoint is used before all of it verified: the manifest's own
// checksum, then every listed file's size and XXH3 (per 64 MiB chunk, so a mismatch names a byte range),
// then every safetensors header (reference.md §1.3 rules) against the manifest's tensor index, then
// state.json. A corrupt, truncated, missing or swapped file is reported with the file, the byte range and the
// expected vs actual values, and is never loaded.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/state.h"
#include "core/tensor.h"
#include "model/param_store.h"

namespace primus::ckpt {

struct Problem {
  std::string file;    // path of the bad file
  std::string detail;  // what is wrong (byte range, expected vs actual)
  std::string str() const { return file + ": " + detail; }
};

struct Verification {
  std::string dir;
  bool ok = false;
  std::vector<Problem> problems;
  Manifest manifest;    // meaningful when the manifest verified
  TrainingState state;  // meaningful when ok
  uint64_t bytes = 0;   // bytes hashed
  double seconds = 0;
  double gb_per_s() const { return seconds > 0 ? static_cast<double>(bytes) / 1e9 / seconds : 0; }
};

// Verifies a checkpoint directory (never throws for problems of the checkpoint itself).
Verification verify_checkpoint(const std::string& dir);

// What a `load` path names.
enum class PathKind { kMissing, kCheckpoint, kSaveRoot, kHuggingFace, kUnknown };
PathKind classify_path(const std::string& path);

struct Selection {
  Verification verification;
  std::vector<Problem> rejected;           // newer checkpoints that failed verification (fallback only)
  std::vector<std::string> rejected_dirs;  // their directories
};

// Newest valid checkpoint under a save root, falling back over invalid ones (each logged with its problem).
// nullopt when the root has no valid checkpoint.
std::optional<Selection> select_newest_valid(const std::string& root);
// Renames rejected checkpoint directories to <root>/corrupt-iter_NNNNNNN[-k] (kept for inspection, never
// deleted), so that retention counts only usable checkpoints and later restarts do not verify them again.
// Returns the new paths.
std::vector<std::string> quarantine(const std::vector<std::string>& dirs);
// An explicit path (a checkpoint directory, or a save root whose `latest` is used): verified; throws
// primus::Error naming the bad file(s) when it does not verify.
Selection select_explicit(const std::string& path);

// Reads one logical tensor of a verified checkpoint (group "model", "master" or "optim"), reassembling its
// shards, as a CPU tensor in the stored dtype.
class CheckpointReader {
 public:
  explicit CheckpointReader(const Verification& v);
  ~CheckpointReader();
  bool has(const std::string& group, const std::string& name) const;
  const TensorIndexEntry& entry(const std::string& group, const std::string& name) const;
  Tensor read(const std::string& group, const std::string& name);
  // Tensor names of a group (sorted).
  std::vector<std::string> names(const std::string& group) const;

 private:
  struct Impl;
  Impl* impl_;
};

struct LoadOptions {
  bool load_optim = true;     // Adam moments (else zeroed)
  bool weights_only = false;  // finetune: embedding/head rows may be padded to the configured vocabulary
};

struct LoadReport {
  bool loaded_master = false;  // f32 master weights came from the file (else from the model weights)
  bool loaded_optim = false;
  std::vector<std::string> notes;
};

// Loads a verified checkpoint into an allocated ParamStore (master, compute copy and, optionally, Adam
// moments). Throws primus::Error when the checkpoint's tensors do not match the store's layout.
LoadReport load_into_params(const Verification& v, ParamStore& params, const Stream& s, const LoadOptions& o);

// Copies host tensor `src` into the store's `which` buffer for entry i ("master", "compute", "m", "v"),
// converting the dtype and zero-padding dim 0 when allowed.
void copy_into_param(ParamStore& params, int i, const std::string& which, const Tensor& src, const Stream& s,
                     bool allow_row_padding);

}  // namespace primus::ckpt
