#pragma once
// Offline GEMM tuning, Primus's hipBLASLt tuning (reference.md §4.10) done with cuBLASLt.
//
// A tuning file lists, per GEMM problem, the cuBLASLt algorithm that beat the heuristic's first choice on a
// given GPU with a given cuBLASLt build, as the algorithm's 8 x u64 opaque data. Training loads it with
// load_gemm_tuning() (config key `gemm_tuning_file`, else env PRIMUS_GEMM_TUNING_FILE); the GEMM path then
// runs the tuned algorithm for those problems and the heuristic for every other one. Entries recorded on
// another GPU or cuBLASLt version are skipped with a warning, because the opaque data means nothing
// elsewhere.
//
// File format (JSON, one object):
//   {"format": "primus-gemm-tuning/1",
//    "entries": [{"gpu": "NVIDIA H100 80GB HBM3", "cublaslt_version": 130100,
//                 "m": 8192, "n": 6144, "k": 4096, "trans_a": false, "trans_b": true,
//                 "a": "bf16", "b": "bf16", "c": "bf16", "epilogue": "none",
//                 "algo": ["0x...", x 8], "algo_desc": "id=.. tile=..", "time_ms": 0.55,
//                 "heuristic_time_ms": 0.57, "name": "layer.qkv.fwd"}]}
// m, n, k, trans_a, trans_b are in the row-major terms of ops/gemm.h (c[m, n] = op(a) @ op(b)); "c" is the
// output dtype; the u64 words are hex strings because JSON readers elsewhere lose integers above 2^53.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"

namespace primus::bench {

// One GEMM problem (mirrors ops::cuda::lt::Problem, without needing CUDA headers).
struct GemmKey {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  DType a_type = DType::kBF16, b_type = DType::kBF16, c_type = DType::kBF16;
  std::string epilogue = "none";  // none | bias | bgrad
  bool operator==(const GemmKey& o) const = default;
  std::string str() const;  // "8192x6144x4096 a=N b=T bf16*bf16->bf16"
};

struct TuningEntry {
  std::string gpu;
  uint64_t cublaslt_version = 0;
  GemmKey key;
  std::array<uint64_t, 8> algo{};
  std::string algo_desc;
  double time_ms = 0;            // the tuned algorithm's median
  double heuristic_time_ms = 0;  // the heuristic's first choice, same measurement
  std::string name;              // optional label ("layer.qkv.fwd")
};

struct TuningFile {
  std::vector<TuningEntry> entries;
  // Adds or replaces the entry with the same (gpu, cublaslt_version, key).
  void upsert(const TuningEntry& e);
};

// Throws ConfigError naming the file on a missing file, bad JSON or a malformed entry.
TuningFile read_tuning_file(const std::string& path);
// Writes atomically (temporary file, then rename) so a crash never leaves half a file.
void write_tuning_file(const std::string& path, const TuningFile& f);

// Loads `path` (or, when empty, env PRIMUS_GEMM_TUNING_FILE; neither set: does nothing) into the GEMM path of
// this process's GPU `device`. Returns the number of entries installed. In a CPU-only build it only validates
// the file.
int load_gemm_tuning(const std::string& path, int device = 0);

// ---- The tuner (CUDA builds; throws in a CPU build) ----
// How the tuned call uses C (the timing reads C when beta != 0, as the real call does).
enum class GemmCMode {
  kNone,      // beta = 0: C is not read
  kInPlace,   // C = D, beta = 1 (gradient accumulation, dw += ...)
  kSeparate,  // C is its own buffer, beta = 1 (fused residual add)
};

struct TuneOptions {
  GemmCMode c_mode = GemmCMode::kNone;
  int candidates = 32;  // candidates timed at most: the heuristic's top-K, then per-algorithm-id bests
  bool search_by_algo_id = true;  // add cuBLASLt's best config of every algorithm id (beyond the top-K list)
  double heat_ms = 200;           // run the heuristic's choice this long first: time at sustained clocks
  int warmup = 3;                 // untimed runs per candidate
  int iters = 20;                 // timed runs per candidate, spread over sweep_rounds
  int sweep_rounds = 3;           // round-robin rounds over all candidates (drift hits all alike)
  int confirm_rounds = 3;         // alternating re-timings of the heuristic choice and the winner
  double min_gain = 0.01;         // the winner must beat the heuristic by this fraction
  size_t rotate_bytes = 512u << 20;  // operand sets cover at least this much (L2-cold timing)
  size_t max_bytes = 16ull << 30;    // cap on the operand sets' memory
};

struct TuneResult {
  GemmKey key;
  int candidates = 0;         // candidates offered (top-K + per-id bests, deduplicated)
  int timed = 0;              // candidates that ran
  double heuristic_ms = 0;    // median of the heuristic's first choice (confirmation round)
  double best_ms = 0;         // median of the accepted algorithm (= heuristic_ms when not improved)
  bool improved = false;      // a different algorithm won by >= min_gain and matched numerically
  double verify_rel_err = 0;  // winner vs heuristic output, ||a - b|| / ||b||
  std::string heuristic_desc, best_desc;
  std::array<uint64_t, 8> best_algo{};
  std::array<uint64_t, 8> heuristic_algo{};        // the heuristic's first choice (what an untuned plan runs)
  std::string note;                                // why a faster candidate was rejected, if one was
  double setup_s = 0, sweep_s = 0, confirm_s = 0;  // wall time of operand setup, sweep, re-timing + verify
  double uplift() const { return best_ms > 0 ? heuristic_ms / best_ms - 1.0 : 0.0; }
};

// Times the top-K heuristic candidates (and per-algorithm-id bests) of `key` on rotating operand sets and
// returns the winner. Does not install it; see to_tuning_entry() and
// load_gemm_tuning()/install_tuning_entry().
TuneResult tune_gemm(const GemmKey& key, const TuneOptions& opt, const Stream& s);
TuningEntry to_tuning_entry(const TuneResult& r, int device, const std::string& name = {});
// Makes the GEMM path use the entry's algorithm now (CUDA builds). Returns false when the entry belongs to
// another GPU or cuBLASLt version than `device` and the loaded cuBLASLt (load_gemm_tuning warns about those).
bool install_tuning_entry(const TuningEntry& e, int device);

}  // namespace primus::bench
