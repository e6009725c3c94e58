#include "safe/nvml.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <fstream>

namespace primus::safe {

namespace {
using Ret = int;  // nvmlReturn_t; 0 = success
using Dev = void*;
struct Memory {
  unsigned long long total, free, used;
};
struct ProcessInfo {  // nvmlProcessInfo_v1_t (pid, usedGpuMemory), read through the _v1 entry point
  unsigned pid;
  unsigned long long used;
};
struct PciInfo {  // nvmlPciInfo_t (v3)
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
}  // namespace

struct Nvml::Api {
  void* lib = nullptr;
  Ret (*init)() = nullptr;
  Ret (*shutdown)() = nullptr;
  Ret (*driver_version)(char*, unsigned) = nullptr;
  Ret (*cuda_version)(int*) = nullptr;
  Ret (*count)(unsigned*) = nullptr;
  Ret (*handle)(unsigned, Dev*) = nullptr;
  Ret (*name)(Dev, char*, unsigned) = nullptr;
  Ret (*uuid)(Dev, char*, unsigned) = nullptr;
  Ret (*memory)(Dev, Memory*) = nullptr;
  Ret (*clock)(Dev, int, unsigned*) = nullptr;
  Ret (*max_clock)(Dev, int, unsigned*) = nullptr;
  Ret (*temperature)(Dev, int, unsigned*) = nullptr;
  Ret (*power)(Dev, unsigned*) = nullptr;
  Ret (*power_limit)(Dev, unsigned*) = nullptr;
  Ret (*throttle)(Dev, unsigned long long*) = nullptr;
  Ret (*ecc_mode)(Dev, int*, int*) = nullptr;
  Ret (*ecc_total)(Dev, int, int, unsigned long long*) = nullptr;
  Ret (*retired)(Dev, int, unsigned*, unsigned long long*) = nullptr;
  Ret (*remapped)(Dev, unsigned*, unsigned*, unsigned*, unsigned*) = nullptr;
  Ret (*processes)(Dev, unsigned*, ProcessInfo*) = nullptr;
  Ret (*pci)(Dev, PciInfo*) = nullptr;
  Ret (*pcie_gen)(Dev, unsigned*) = nullptr;
  Ret (*pcie_width)(Dev, unsigned*) = nullptr;
  Ret (*pcie_gen_max)(Dev, unsigned*) = nullptr;
  Ret (*pcie_width_max)(Dev, unsigned*) = nullptr;
  Ret (*nvlink_state)(Dev, unsigned, int*) = nullptr;
  Ret (*topo)(Dev, Dev, int*) = nullptr;
};

std::unique_ptr<Nvml> Nvml::open(std::string& why) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    why = "libnvidia-ml.so.1 not found (no NVIDIA driver on this host)";
    return nullptr;
  }
  std::unique_ptr<Nvml> n(new Nvml());
  n->api_ = std::make_unique<Api>();
  Api& a = *n->api_;
  a.lib = lib;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
  };
  sym(a.init, "nvmlInit_v2");
  sym(a.shutdown, "nvmlShutdown");
  sym(a.driver_version, "nvmlSystemGetDriverVersion");
  sym(a.cuda_version, "nvmlSystemGetCudaDriverVersion_v2");
  sym(a.count, "nvmlDeviceGetCount_v2");
  sym(a.handle, "nvmlDeviceGetHandleByIndex_v2");
  sym(a.name, "nvmlDeviceGetName");
  sym(a.uuid, "nvmlDeviceGetUUID");
  sym(a.memory, "nvmlDeviceGetMemoryInfo");
  sym(a.clock, "nvmlDeviceGetClockInfo");
  sym(a.max_clock, "nvmlDeviceGetMaxClockInfo");
  sym(a.temperature, "nvmlDeviceGetTemperature");
  sym(a.power, "nvmlDeviceGetPowerUsage");
  sym(a.power_limit, "nvmlDeviceGetEnforcedPowerLimit");
  sym(a.throttle, "nvmlDeviceGetCurrentClocksEventReasons");
  if (!a.throttle) sym(a.throttle, "nvmlDeviceGetCurrentClocksThrottleReasons");
  sym(a.ecc_mode, "nvmlDeviceGetEccMode");
  sym(a.ecc_total, "nvmlDeviceGetTotalEccErrors");
  sym(a.retired, "nvmlDeviceGetRetiredPages");
  sym(a.remapped, "nvmlDeviceGetRemappedRows");
  sym(a.processes, "nvmlDeviceGetComputeRunningProcesses");  // v1 struct layout
  sym(a.pci, "nvmlDeviceGetPciInfo_v3");
  sym(a.pcie_gen, "nvmlDeviceGetCurrPcieLinkGeneration");
  sym(a.pcie_width, "nvmlDeviceGetCurrPcieLinkWidth");
  sym(a.pcie_gen_max, "nvmlDeviceGetMaxPcieLinkGeneration");
  sym(a.pcie_width_max, "nvmlDeviceGetMaxPcieLinkWidth");
  sym(a.nvlink_state, "nvmlDeviceGetNvLinkState");
  sym(a.topo, "nvmlDeviceGetTopologyCommonAncestor");
  if (!a.init || !a.count || !a.handle) {
    why = "libnvidia-ml.so.1 lacks nvmlInit_v2 / nvmlDeviceGetCount_v2";
    dlclose(lib);
    return nullptr;
  }
  if (Ret r = a.init(); r != 0) {
    why = fmt::format("nvmlInit failed (NVML error {}; is the driver loaded?)", r);
    dlclose(lib);
    return nullptr;
  }
  return n;
}

Nvml::~Nvml() {
  if (api_ && api_->shutdown) api_->shutdown();
}

std::string Nvml::driver_version() const {
  char buf[96] = {};
  if (api_->driver_version && api_->driver_version(buf, sizeof(buf)) == 0) return buf;
  return "?";
}

int Nvml::cuda_driver_version() const {
  int v = 0;
  if (api_->cuda_version) api_->cuda_version(&v);
  return v;
}

int Nvml::count() const {
  unsigned n = 0;
  return api_->count(&n) == 0 ? static_cast<int>(n) : 0;
}

NvmlGpu Nvml::query(int index) const {
  const Api& a = *api_;
  NvmlGpu g;
  g.index = index;
  Dev d = nullptr;
  if (a.handle(static_cast<unsigned>(index), &d) != 0) return g;
  char buf[128] = {};
  if (a.name && a.name(d, buf, sizeof(buf)) == 0) g.name = buf;
  if (a.uuid && a.uuid(d, buf, sizeof(buf)) == 0) g.uuid = buf;
  Memory m{};
  if (a.memory && a.memory(d, &m) == 0) {
    g.mem_total = m.total;
    g.mem_used = m.used;
  }
  if (a.clock) {
    a.clock(d, 1, &g.sm_clock_mhz);   // NVML_CLOCK_SM
    a.clock(d, 2, &g.mem_clock_mhz);  // NVML_CLOCK_MEM
  }
  if (a.max_clock) a.max_clock(d, 1, &g.sm_clock_max_mhz);
  if (a.temperature) a.temperature(d, 0, &g.temperature_c);
  unsigned mw = 0;
  if (a.power && a.power(d, &mw) == 0) g.power_w = mw / 1000.0;
  if (a.power_limit && a.power_limit(d, &mw) == 0) g.power_limit_w = mw / 1000.0;
  unsigned long long reasons = 0;
  if (a.throttle && a.throttle(d, &reasons) == 0) g.throttle_reasons = reasons;
  int cur = 0, pend = 0;
  if (a.ecc_mode && a.ecc_mode(d, &cur, &pend) == 0) g.ecc_enabled = cur;
  unsigned long long errs = 0;
  if (g.ecc_enabled == 1 && a.ecc_total && a.ecc_total(d, 1 /*uncorrected*/, 1 /*aggregate*/, &errs) == 0)
    g.ecc_uncorrected = static_cast<int64_t>(errs);
  if (a.retired) {
    unsigned c1 = 0, c2 = 0;
    // With a zero-sized buffer NVML answers success (no pages) or INSUFFICIENT_SIZE (7) with the count set.
    auto ok = [](Ret r) { return r == 0 || r == 7; };
    if (ok(a.retired(d, 0, &c1, nullptr)) && ok(a.retired(d, 1, &c2, nullptr))) g.retired_pages = c1 + c2;
  }
  if (a.remapped) {
    unsigned corr = 0, unc = 0, pending = 0, failure = 0;
    if (a.remapped(d, &corr, &unc, &pending, &failure) == 0) {
      g.remapped_rows_uncorrectable = unc;
      g.remap_pending = pending;
      g.remap_failure = failure;
    }
  }
  if (a.processes) {
    unsigned n = 64;
    std::vector<ProcessInfo> p(n);
    if (a.processes(d, &n, p.data()) == 0)
      for (unsigned i = 0; i < n && i < p.size(); ++i) g.processes.push_back({p[i].pid, p[i].used});
  }
  PciInfo pci{};
  if (a.pci && a.pci(d, &pci) == 0) {
    g.pci_bus_id = pci.busId;
    std::string lower;
    for (char c : g.pci_bus_id) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    // sysfs names the function as dddd:bb:dd.f; NVML's domain has 8 hex digits.
    if (lower.size() > 12) lower = lower.substr(lower.size() - 12);
    std::ifstream f("/sys/bus/pci/devices/" + lower + "/numa_node");
    int node = -1;
    if (f >> node) g.numa_node = node;
  }
  if (a.pcie_gen) a.pcie_gen(d, &g.pcie_gen);
  if (a.pcie_width) a.pcie_width(d, &g.pcie_width);
  if (a.pcie_gen_max) a.pcie_gen_max(d, &g.pcie_gen_max);
  if (a.pcie_width_max) a.pcie_width_max(d, &g.pcie_width_max);
  if (a.nvlink_state) {
    int active = 0;
    bool any = false;
    for (unsigned l = 0; l < 18; ++l) {
      int st = 0;
      if (a.nvlink_state(d, l, &st) == 0) {
        any = true;
        active += st == 1;
      }
    }
    g.nvlinks_active = any ? active : 0;
  }
  return g;
}

std::string Nvml::topology(int ia, int ib) const {
  const Api& a = *api_;
  Dev da = nullptr, db = nullptr;
  if (!a.topo || a.handle(ia, &da) != 0 || a.handle(ib, &db) != 0) return "?";
  int level = -1;
  if (a.topo(da, db, &level) != 0) return "?";
  switch (level) {
    case 0:
      return "same board";
    case 10:
      return "PCIe switch";
    case 20:
      return "PCIe switches";
    case 30:
      return "host bridge";
    case 40:
      return "NUMA node";
    case 50:
      return "system (cross-socket)";
    default:
      return "?";
  }
}

}  // namespace primus::safe
