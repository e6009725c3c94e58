#pragma once
// NVML, loaded with dlopen("libnvidia-ml.so.1") so that the binary has no link dependency on the driver
// library (the CPU build and GPU-less hosts run preflight too). Only what preflight reads.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace primus::safe {

struct NvmlProcess {
  unsigned pid = 0;
  uint64_t used_bytes = 0;
};

struct NvmlGpu {
  int index = 0;
  std::string name, uuid, pci_bus_id;
  uint64_t mem_total = 0, mem_used = 0;
  unsigned sm_clock_mhz = 0, sm_clock_max_mhz = 0, mem_clock_mhz = 0;
  unsigned temperature_c = 0;
  double power_w = 0, power_limit_w = 0;
  uint64_t throttle_reasons = 0;  // nvmlClocksEventReasons bitmask (0 = none readable)
  int ecc_enabled = -1;           // 1 on, 0 off, -1 unknown
  int64_t ecc_uncorrected = -1;   // aggregate uncorrected ECC errors (-1 unknown)
  int64_t retired_pages = -1;     // single + double bit (-1 unknown; Hopper uses row remapping instead)
  int64_t remapped_rows_uncorrectable = -1, remap_pending = -1, remap_failure = -1;
  unsigned pcie_gen = 0, pcie_width = 0, pcie_gen_max = 0, pcie_width_max = 0;
  int nvlinks_active = -1;
  int numa_node = -1;                  // from sysfs
  std::vector<NvmlProcess> processes;  // compute processes on this GPU
};

class Nvml {
 public:
  // nullptr with `why` set when the library or the driver is unavailable.
  static std::unique_ptr<Nvml> open(std::string& why);
  ~Nvml();
  std::string driver_version() const;
  int cuda_driver_version() const;  // 13000 for 13.0; 0 unknown
  int count() const;
  NvmlGpu query(int index) const;
  // NVML topology level between two GPUs: "same board", "PCIe switch", "PCIe switches", "host bridge",
  // "NUMA node", "system" (and "?"), plus NVLink when both have active links.
  std::string topology(int a, int b) const;

 private:
  struct Api;
  Nvml() = default;
  std::unique_ptr<Api> api_;
};

}  // namespace primus::safe
