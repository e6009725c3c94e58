#pragma once
// `primus preflight` (docs/stability.md): is this node fit to train?
//
// Info (always): host, kernel, OS, CPUs, memory, /dev/shm, ulimits, NUMA; GPUs through NVML (count, name,
// memory, driver, CUDA, clocks and clock-event reasons, ECC, retired pages / remapped rows, PCIe link,
// NVLink, NUMA affinity), foreign compute processes on our GPUs, the GPU-pair topology, and NCCL environment
// sanity. Perf (--perf-test; --quick keeps it under 60 s): per-GPU bf16 GEMM TFLOP/s and HBM copy bandwidth
// (each GPU in its own process, in parallel), intra-node all-reduce and all-to-all bus bandwidth (`primus
// launch` of `benchmark comm --backend nccl` over the node's GPUs). Smoke (--smoke): each GPU in its own
// process with a timeout: allocate 256 MB, a 2048^3 bf16 GEMM, finite result.
//
// Every finding is info | warn | fail, judged against thresholds that default per GPU model (H100/H200:
// bf16 GEMM >= 600 TFLOP/s, HBM copy >= 2500 GB/s counting read + write, all-reduce busbw at 64 MB >= 200
// GB/s, all-to-all >= 100 GB/s) and can be set in a YAML file (--thresholds). Output: the console, a
// Markdown and a JSON report, and failing.txt (one "host gpuN check" line per failing GPU; "host -" for
// host-level failures). Exit code 3 (ErrorKind::kPreflight) on any fail, else 0. A host without an NVIDIA GPU
// fails `gpu.count` (exit 3) unless --allow-no-gpu.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace primus::safe {

enum class Level { kInfo, kWarn, kFail };
const char* level_name(Level l);

struct Finding {
  std::string check;  // "gpu.ecc", "host.shm", "perf.gemm", ...
  Level level = Level::kInfo;
  std::string subject;  // "host" or "gpu3"
  std::string message;
  nlohmann::json value;  // measured value when there is one
};

struct Thresholds {
  std::string model = "unknown";  // the GPU model they were chosen for
  double gemm_tflops_min = 0;     // 0 = not judged
  double hbm_copy_gbps_min = 0;
  double allreduce_busbw_gbps_min = 0;
  double alltoall_busbw_gbps_min = 0;
  double shm_gib_min = 8;
  double memlock_gib_min = 32;  // warn below (unless unlimited)
  double mem_available_pct_min = 10;
};
// Defaults for a GPU name as NVML reports it ("NVIDIA H100 80GB HBM3").
Thresholds default_thresholds(const std::string& gpu_name);
// Overrides from a YAML file: top-level keys (gemm_tflops_min, hbm_copy_gbps_min, allreduce_busbw_gbps_min,
// alltoall_busbw_gbps_min, shm_gib_min, memlock_gib_min, mem_available_pct_min), optionally per model under
// `models: {H100: {...}, H200: {...}}` (a model key applies when the GPU name contains it). Unknown keys are
// errors naming the file and key.
void apply_threshold_file(Thresholds& t, const std::string& path, const std::string& gpu_name);

struct PreflightOptions {
  bool perf = false;
  bool quick = false;
  bool smoke = false;
  bool allow_no_gpu = false;
  bool allow_foreign_procs = false;
  int expected_gpus = -1;  // -1: no expectation
  double smoke_timeout_s = 15;
  std::string thresholds_file;
  std::string output_dir = "output/preflight";
};

struct PreflightReport {
  std::string host;
  std::vector<Finding> findings;
  std::vector<std::string> failing;  // "host gpuN check"
  double seconds = 0;
  int exit_code() const;
  std::string markdown() const;
  nlohmann::json json() const;
};

// The host-level info checks that need no GPU (tested on CI).
void host_checks(PreflightReport& r, const Thresholds& t);
void nccl_env_checks(PreflightReport& r, int gpus);

PreflightReport run_preflight_checks(const PreflightOptions& o);
int run_preflight(const PreflightOptions& o);  // writes the reports; returns the exit code

// Per-GPU worker (a child process): "smoke" or "perf" / "perf-quick" on GPU `gpu` (after CUDA_VISIBLE_DEVICES
// the child sees it as device 0). Prints one line "PRIMUS_PREFLIGHT_RESULT {json}".
int run_preflight_worker(const std::string& what);

}  // namespace primus::safe
