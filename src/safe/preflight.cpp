#include "safe/preflight.h"

#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "bench/comm_bench.h"
#include "core/error.h"
#include "core/log.h"
#include "safe/nvml.h"
#include "safe/preflight_gpu.h"
#include "safe/subprocess.h"

namespace primus::safe {

#ifndef PRIMUS_WITH_CUDA
nlohmann::json gpu_smoke_test() {
  throw Error(ErrorKind::kRuntime, "preflight: this build has no CUDA backend");
}
nlohmann::json gpu_perf_test(bool) {
  throw Error(ErrorKind::kRuntime, "preflight: this build has no CUDA backend");
}
#endif

const char* level_name(Level l) {
  return l == Level::kInfo ? "info" : l == Level::kWarn ? "warn" : "fail";
}

namespace {
constexpr double kGiB = 1024.0 * 1024 * 1024;
const char* kResultTag = "PRIMUS_PREFLIGHT_RESULT ";

bool contains(const std::string& s, const char* w) {
  return s.find(w) != std::string::npos;
}

void add(PreflightReport& r, std::string check, Level l, std::string subject, std::string msg,
         nlohmann::json value = nullptr) {
  r.findings.push_back({std::move(check), l, std::move(subject), std::move(msg), std::move(value)});
}

std::string read_first_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}
}  // namespace

Thresholds default_thresholds(const std::string& gpu_name) {
  Thresholds t;
  if (contains(gpu_name, "H100") || contains(gpu_name, "H200") || contains(gpu_name, "H800") ||
      contains(gpu_name, "H20")) {
    t.model = contains(gpu_name, "H200") ? "H200" : "H100";
    // H100 SXM measured: bf16 GEMM 8192^3 734 TFLOP/s, D2D copy ~3.0 TB/s (reference.md §7).
    t.gemm_tflops_min = 600;
    t.hbm_copy_gbps_min = 2500;
    t.allreduce_busbw_gbps_min = 200;  // NVLink, one node (Meta GCM's critical level)
    t.alltoall_busbw_gbps_min = 100;
    if (contains(gpu_name, "PCIe")) {
      t.gemm_tflops_min = 450;
      t.hbm_copy_gbps_min = 1600;
      t.allreduce_busbw_gbps_min = 10;
      t.alltoall_busbw_gbps_min = 5;
    }
  }
  return t;
}

void apply_threshold_file(Thresholds& t, const std::string& path, const std::string& gpu_name) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("preflight thresholds {}: {}", path, e.what()));
  }
  auto apply = [&](const YAML::Node& m, const std::string& where) {
    if (!m.IsMap()) throw ConfigError(fmt::format("preflight thresholds {}: {} must be a map", path, where));
    const std::map<std::string, double*> keys = {{"gemm_tflops_min", &t.gemm_tflops_min},
                                                 {"hbm_copy_gbps_min", &t.hbm_copy_gbps_min},
                                                 {"allreduce_busbw_gbps_min", &t.allreduce_busbw_gbps_min},
                                                 {"alltoall_busbw_gbps_min", &t.alltoall_busbw_gbps_min},
                                                 {"shm_gib_min", &t.shm_gib_min},
                                                 {"memlock_gib_min", &t.memlock_gib_min},
                                                 {"mem_available_pct_min", &t.mem_available_pct_min}};
    for (const auto& kv : m) {
      const std::string k = kv.first.as<std::string>();
      if (k == "models" && where == "top level") continue;
      auto it = keys.find(k);
      if (it == keys.end()) {
        std::string known;
        for (const auto& [name, _] : keys) known += (known.empty() ? "" : ", ") + name;
        throw ConfigError(fmt::format("preflight thresholds {} line {}: unknown key '{}' in {}", path,
                                      kv.first.Mark().line + 1, k, where),
                          "keys: " + known + ", models");
      }
      try {
        *it->second = kv.second.as<double>();
      } catch (const YAML::Exception&) {
        throw ConfigError(fmt::format("preflight thresholds {} line {}: {} must be a number", path,
                                      kv.second.Mark().line + 1, k));
      }
    }
  };
  if (!root.IsMap()) throw ConfigError(fmt::format("preflight thresholds {}: expected a map", path));
  apply(root, "top level");
  if (const YAML::Node models = root["models"]) {
    if (!models.IsMap())
      throw ConfigError(fmt::format("preflight thresholds {}: models must be a map", path));
    for (const auto& kv : models) {
      const std::string model = kv.first.as<std::string>();
      if (contains(gpu_name, model.c_str())) {
        apply(kv.second, "models." + model);
        t.model = model;
      }
    }
  }
}

int PreflightReport::exit_code() const {
  for (const Finding& f : findings)
    if (f.level == Level::kFail) return static_cast<int>(ErrorKind::kPreflight);
  return 0;
}

std::string PreflightReport::markdown() const {
  int counts[3] = {0, 0, 0};
  for (const Finding& f : findings) ++counts[static_cast<int>(f.level)];
  std::string s = fmt::format("# Preflight: {}\n\n**{}**: {} fail, {} warn, {} info ({:.1f} s)\n\n", host,
                              exit_code() == 0 ? "PASS" : "FAIL", counts[2], counts[1], counts[0], seconds);
  if (!failing.empty()) {
    s += "## Failing\n\n";
    for (const std::string& f : failing) s += "- " + f + "\n";
    s += "\n";
  }
  s += "| level | check | subject | finding |\n|---|---|---|---|\n";
  for (const Finding& f : findings) {
    std::string msg = f.message;
    for (size_t p = 0; (p = msg.find('|', p)) != std::string::npos; p += 2) msg.replace(p, 1, "\\|");
    s += fmt::format("| {} | {} | {} | {} |\n", level_name(f.level), f.check, f.subject, msg);
  }
  return s;
}

nlohmann::json PreflightReport::json() const {
  nlohmann::json j;
  j["host"] = host;
  j["result"] = exit_code() == 0 ? "pass" : "fail";
  j["exit_code"] = exit_code();
  j["seconds"] = seconds;
  j["failing"] = failing;
  j["findings"] = nlohmann::json::array();
  for (const Finding& f : findings)
    j["findings"].push_back({{"check", f.check},
                             {"level", level_name(f.level)},
                             {"subject", f.subject},
                             {"message", f.message},
                             {"value", f.value}});
  return j;
}

void host_checks(PreflightReport& r, const Thresholds& t) {
  utsname u{};
  uname(&u);
  std::string os;
  {
    std::ifstream f("/etc/os-release");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("PRETTY_NAME=", 0) == 0) os = line.substr(12);
    if (os.size() >= 2 && os.front() == '"') os = os.substr(1, os.size() - 2);
  }
  add(r, "host.os", Level::kInfo, "host",
      fmt::format("{} | kernel {} {}", os.empty() ? "?" : os, u.release, u.machine));
  if (const char* job = std::getenv("SLURM_JOB_ID"))
    add(r, "host.slurm", Level::kInfo, "host", fmt::format("Slurm job {}", job));
  if (std::filesystem::exists("/.dockerenv") || std::getenv("container") != nullptr)
    add(r, "host.container", Level::kInfo, "host", "running in a container");

  // CPUs.
  std::string model;
  {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("model name", 0) == 0) {
        model = line.substr(line.find(':') + 2);
        break;
      }
  }
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  add(r, "host.cpu", Level::kInfo, "host",
      fmt::format("{} CPUs online ({})", online, model.empty() ? "?" : model), online);

  // Memory.
  std::map<std::string, double> mem;
  {
    std::ifstream f("/proc/meminfo");
    std::string key;
    double kb;
    std::string unit;
    while (f >> key >> kb) {
      std::getline(f, unit);
      mem[key.substr(0, key.size() - 1)] = kb * 1024;
    }
  }
  const double total = mem["MemTotal"], avail = mem["MemAvailable"];
  const double pct = total > 0 ? 100 * avail / total : 0;
  add(r, "host.memory", pct < t.mem_available_pct_min ? Level::kWarn : Level::kInfo, "host",
      fmt::format("{:.1f} GiB total, {:.1f} GiB available ({:.0f}%; warn below {:.0f}%)", total / kGiB,
                  avail / kGiB, pct, t.mem_available_pct_min),
      avail / kGiB);

  // /dev/shm (NCCL's shared-memory transport and data-loader workers live there).
  struct statvfs sv {};
  if (statvfs("/dev/shm", &sv) == 0) {
    const double gib = static_cast<double>(sv.f_blocks) * sv.f_frsize / kGiB;
    add(r, "host.shm", gib < t.shm_gib_min ? Level::kFail : Level::kInfo, "host",
        fmt::format("/dev/shm {:.1f} GiB (need >= {:.0f} GiB)", gib, t.shm_gib_min), gib);
  } else {
    add(r, "host.shm", Level::kFail, "host", "/dev/shm is missing");
  }

  // ulimits.
  rlimit rl{};
  getrlimit(RLIMIT_MEMLOCK, &rl);
  if (rl.rlim_cur == RLIM_INFINITY) {
    add(r, "host.ulimit.memlock", Level::kInfo, "host", "memlock unlimited");
  } else {
    const double gib = static_cast<double>(rl.rlim_cur) / kGiB;
    add(r, "host.ulimit.memlock", gib < t.memlock_gib_min ? Level::kWarn : Level::kInfo, "host",
        fmt::format("memlock {:.2f} GiB (RDMA registration wants >= {:.0f} GiB or unlimited)", gib,
                    t.memlock_gib_min),
        gib);
  }
  getrlimit(RLIMIT_NOFILE, &rl);
  add(r, "host.ulimit.nofile",
      rl.rlim_cur < 65536 && rl.rlim_cur != RLIM_INFINITY ? Level::kWarn : Level::kInfo, "host",
      fmt::format("open files {}",
                  rl.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : std::to_string(rl.rlim_cur)));
  getrlimit(RLIMIT_STACK, &rl);
  add(r, "host.ulimit.stack", Level::kInfo, "host",
      fmt::format("stack {}", rl.rlim_cur == RLIM_INFINITY
                                  ? std::string("unlimited")
                                  : fmt::format("{} MiB", rl.rlim_cur / (1024 * 1024))));

  // NUMA.
  int nodes = 0;
  std::string layout;
  for (int n = 0; n < 64; ++n) {
    const std::string cpus = read_first_line(fmt::format("/sys/devices/system/node/node{}/cpulist", n));
    if (cpus.empty()) continue;
    ++nodes;
    layout += fmt::format("{}node{}: cpus {}", layout.empty() ? "" : "; ", n, cpus);
  }
  add(r, "host.numa", Level::kInfo, "host",
      nodes ? fmt::format("{} NUMA node(s): {}", nodes, layout) : std::string("no NUMA information in sysfs"),
      nodes);
}

void nccl_env_checks(PreflightReport& r, int gpus) {
  std::string snapshot;
  for (const char* v : {"NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX",
                        "NCCL_NVLS_ENABLE", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE",
                        "CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_VISIBLE_DEVICES"}) {
    const char* val = std::getenv(v);
    snapshot += fmt::format("{}{}={}", snapshot.empty() ? "" : " ", v, val ? val : "(unset)");
  }
  add(r, "nccl.env", Level::kInfo, "host", snapshot);
  if (const char* ifn = std::getenv("NCCL_SOCKET_IFNAME"); ifn && *ifn) {
    // Comma-separated prefixes; '^' excludes, '=' matches exactly.
    std::string spec = ifn;
    const bool exclude = !spec.empty() && spec[0] == '^';
    if (exclude) spec = spec.substr(1);
    bool exact = !spec.empty() && spec[0] == '=';
    if (exact) spec = spec.substr(1);
    std::vector<std::string> ifaces;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/sys/class/net", ec))
      ifaces.push_back(e.path().filename().string());
    std::stringstream ss(spec);
    std::string item;
    bool any = false;
    while (std::getline(ss, item, ','))
      for (const std::string& i : ifaces)
        if (exact ? i == item : i.rfind(item, 0) == 0) any = true;
    if (!exclude && !any)
      add(r, "nccl.socket_ifname", Level::kFail, "host",
          fmt::format("NCCL_SOCKET_IFNAME={} matches no network interface (have: {})", ifn,
                      fmt::join(ifaces, ", ")));
  }
  if (const char* hca = std::getenv("NCCL_IB_HCA"); hca && *hca && hca[0] != '^') {
    std::error_code ec;
    std::vector<std::string> devs;
    for (const auto& e : std::filesystem::directory_iterator("/sys/class/infiniband", ec))
      devs.push_back(e.path().filename().string());
    std::string spec = hca[0] == '=' ? std::string(hca + 1) : std::string(hca);
    std::stringstream ss(spec);
    std::string item;
    while (std::getline(ss, item, ',')) {
      const std::string name = item.substr(0, item.find(':'));
      bool found = false;
      for (const std::string& d : devs) found |= d.rfind(name, 0) == 0;
      if (!found)
        add(r, "nccl.ib_hca", Level::kFail, "host",
            fmt::format("NCCL_IB_HCA names '{}' but /sys/class/infiniband has {}", name,
                        devs.empty() ? std::string("no devices") : fmt::format("{}", fmt::join(devs, ", "))));
    }
  }
  if (const char* d = std::getenv("NCCL_DEBUG"); d && (std::string(d) == "TRACE"))
    add(r, "nccl.debug", Level::kWarn, "host", "NCCL_DEBUG=TRACE slows every collective");
  if (const char* c = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"); c && std::string(c) != "1")
    add(r, "nccl.max_connections", Level::kInfo, "host",
        fmt::format("CUDA_DEVICE_MAX_CONNECTIONS={} (Megatron's TP overlap relies on 1)", c));
  if (const char* nv = std::getenv("NCCL_NVLS_ENABLE"); gpus > 1 && (!nv || std::string(nv) != "0"))
    add(r, "nccl.nvls", Level::kInfo, "host",
        "NCCL_NVLS_ENABLE is not 0: NVLink SHARP (multicast) may be used");
}

namespace {

// One result line of a worker's output (nullopt-like null when absent).
nlohmann::json parse_worker(const std::string& out) {
  const size_t p = out.rfind(kResultTag);
  if (p == std::string::npos) return nullptr;
  const size_t b = p + std::string(kResultTag).size();
  try {
    return nlohmann::json::parse(out.substr(b, out.find('\n', b) - b));
  } catch (const std::exception&) {
    return nullptr;
  }
}

std::string tail(const std::string& s, size_t n) {
  std::string t = s.size() > n ? s.substr(s.size() - n) : s;
  for (char& c : t)
    if (c == '\n') c = ' ';
  return t;
}

void gpu_checks(PreflightReport& r, Nvml& nvml, int count, const PreflightOptions& o, Thresholds& t,
                std::vector<NvmlGpu>& gpus) {
  add(r, "gpu.driver", Level::kInfo, "host",
      fmt::format("driver {}, CUDA {}.{}", nvml.driver_version(), nvml.cuda_driver_version() / 1000,
                  nvml.cuda_driver_version() % 1000 / 10));
  std::set<std::string> names;
  for (int i = 0; i < count; ++i) {
    NvmlGpu g = nvml.query(i);
    gpus.push_back(g);
    names.insert(g.name);
    const std::string who = fmt::format("gpu{}", i);
    add(r, "gpu.identity", Level::kInfo, who,
        fmt::format("{} | {} | {:.1f} GiB ({:.1f} GiB used) | PCI {} | NUMA {}", g.name, g.uuid,
                    g.mem_total / kGiB, g.mem_used / kGiB, g.pci_bus_id, g.numa_node));
    add(r, "gpu.clocks", Level::kInfo, who,
        fmt::format("SM {} / {} MHz, memory {} MHz, {} C, {:.0f} / {:.0f} W, clock-event reasons 0x{:x}",
                    g.sm_clock_mhz, g.sm_clock_max_mhz, g.mem_clock_mhz, g.temperature_c, g.power_w,
                    g.power_limit_w, g.throttle_reasons));
    // HW slowdown (0x8), thermal (0x20, 0x40) and power-brake (0x80) reasons mean the GPU is held back.
    if (g.throttle_reasons & (0x8 | 0x20 | 0x40 | 0x80))
      add(r, "gpu.clocks.slowdown", Level::kWarn, who,
          fmt::format("hardware/thermal slowdown active (reasons 0x{:x})", g.throttle_reasons));
    if (g.ecc_enabled == 0) add(r, "gpu.ecc", Level::kWarn, who, "ECC is off");
    if (g.ecc_uncorrected > 0)
      add(r, "gpu.ecc", Level::kWarn, who,
          fmt::format("{} uncorrected ECC errors (aggregate)", g.ecc_uncorrected), g.ecc_uncorrected);
    if (g.retired_pages > 0)
      add(r, "gpu.retired_pages", Level::kWarn, who, fmt::format("{} retired pages", g.retired_pages),
          g.retired_pages);
    if (g.remap_failure > 0)
      add(r, "gpu.row_remap", Level::kFail, who, "row remapping failed: the GPU needs service");
    else if (g.remap_pending > 0)
      add(r, "gpu.row_remap", Level::kWarn, who, "a row remap is pending: reset the GPU");
    if (g.remapped_rows_uncorrectable > 0)
      add(r, "gpu.row_remap", Level::kInfo, who,
          fmt::format("{} rows remapped for uncorrectable errors", g.remapped_rows_uncorrectable));
    if (g.pcie_width_max > 0 && g.pcie_width < g.pcie_width_max)
      add(r, "gpu.pcie", Level::kWarn, who,
          fmt::format("PCIe link x{} gen{} (capable of x{} gen{})", g.pcie_width, g.pcie_gen,
                      g.pcie_width_max, g.pcie_gen_max));
    else
      add(r, "gpu.pcie", Level::kInfo, who, fmt::format("PCIe link x{} gen{}", g.pcie_width, g.pcie_gen));
    if (g.nvlinks_active >= 0)
      add(r, "gpu.nvlink", Level::kInfo, who, fmt::format("{} NVLink links active", g.nvlinks_active),
          g.nvlinks_active);
    for (const NvmlProcess& p : g.processes) {
      if (p.pid == static_cast<unsigned>(getpid())) continue;
      const std::string cmd = read_first_line(fmt::format("/proc/{}/comm", p.pid));
      add(r, "gpu.foreign_process", o.allow_foreign_procs ? Level::kWarn : Level::kFail, who,
          fmt::format("process {} ({}) holds {:.2f} GiB on this GPU", p.pid,
                      cmd.empty() ? "other container?" : cmd, p.used_bytes / kGiB));
    }
  }
  if (names.size() > 1)
    add(r, "gpu.mixed", Level::kWarn, "host", fmt::format("mixed GPU models: {}", fmt::join(names, ", ")));
  // Link counts should agree across the node's GPUs.
  std::set<int> links;
  for (const NvmlGpu& g : gpus)
    if (g.nvlinks_active >= 0) links.insert(g.nvlinks_active);
  if (links.size() > 1)
    for (const NvmlGpu& g : gpus)
      if (g.nvlinks_active < *links.rbegin())
        add(r, "gpu.nvlink", Level::kFail, fmt::format("gpu{}", g.index),
            fmt::format("{} NVLink links active where other GPUs have {}", g.nvlinks_active,
                        *links.rbegin()));
  // GPU <-> NUMA balance.
  std::map<int, int> per_node;
  for (const NvmlGpu& g : gpus) ++per_node[g.numa_node];
  if (per_node.size() > 1) {
    std::string s;
    for (auto& [n, c] : per_node) s += fmt::format("{}node {}: {} GPU(s)", s.empty() ? "" : ", ", n, c);
    const bool balanced = per_node.begin()->second == per_node.rbegin()->second;
    add(r, "gpu.numa", balanced ? Level::kInfo : Level::kWarn, "host", s);
  }
  // Topology matrix.
  if (count > 1) {
    std::string m;
    for (int a = 0; a < count; ++a)
      for (int b = a + 1; b < count; ++b) {
        const bool nv = gpus[a].nvlinks_active > 0 && gpus[b].nvlinks_active > 0;
        m += fmt::format("{}{}-{}: {}", m.empty() ? "" : "; ", a, b, nv ? "NVLink" : nvml.topology(a, b));
      }
    add(r, "gpu.topology", Level::kInfo, "host", m);
  }
}

// Each worker sees one GPU, named by UUID when NVML gave one (CUDA's device order need not be NVML's).
void run_gpu_workers(PreflightReport& r, const std::string& what, const std::vector<NvmlGpu>& gpus,
                     double timeout_s, const Thresholds& t) {
  std::vector<ChildSpec> specs;
  const std::string exe = self_executable();
  const int count = static_cast<int>(gpus.size());
  for (const NvmlGpu& g : gpus)
    specs.push_back({{exe, "preflight", "--worker", what},
                     {{"CUDA_VISIBLE_DEVICES", g.uuid.empty() ? std::to_string(g.index) : g.uuid}}});
  const std::vector<ChildResult> res = run_children(specs, timeout_s);
  for (int i = 0; i < count; ++i) {
    const std::string who = fmt::format("gpu{}", i);
    const ChildResult& c = res[i];
    const nlohmann::json j = parse_worker(c.output);
    const std::string check = what == "smoke" ? "smoke" : "perf";
    if (c.timed_out) {
      add(r, check, Level::kFail, who, fmt::format("no answer within {:.0f} s (GPU hung?)", timeout_s));
      continue;
    }
    if (j.is_null() || c.exit_code != 0) {
      add(r, check, Level::kFail, who,
          fmt::format("worker failed (exit {}, signal {}): {}", c.exit_code, c.signal, tail(c.output, 300)));
      continue;
    }
    if (what == "smoke") {
      const bool ok = j.value("finite", false);
      add(r, "smoke", ok ? Level::kInfo : Level::kFail, who,
          ok ? fmt::format("alloc 256 MB + 2048^3 bf16 GEMM finite ({:.1f} s)", c.seconds)
             : fmt::format("GEMM result not finite: {}", j.dump()),
          j);
      continue;
    }
    const double tf = j.value("gemm_tflops", 0.0), bw = j.value("copy_gbps", 0.0);
    add(r, "perf.gemm", t.gemm_tflops_min > 0 && tf < t.gemm_tflops_min ? Level::kFail : Level::kInfo, who,
        fmt::format("bf16 GEMM 8192^3: {:.0f} TFLOP/s (need >= {:.0f}){}", tf, t.gemm_tflops_min,
                    j.contains("gemm_by_size") ? " | " + j["gemm_by_size"].dump() : ""),
        tf);
    add(r, "perf.hbm_copy", t.hbm_copy_gbps_min > 0 && bw < t.hbm_copy_gbps_min ? Level::kFail : Level::kInfo,
        who,
        fmt::format("device-to-device copy {:.0f} GB/s, read + write (need >= {:.0f})", bw,
                    t.hbm_copy_gbps_min),
        bw);
    if (!j.value("finite", true)) add(r, "perf.gemm", Level::kFail, who, "GEMM output not finite");
  }
}

void run_comm_perf(PreflightReport& r, int count, bool quick, const Thresholds& t, const std::string& dir) {
  if (count < 2) {
    add(r, "perf.comm", Level::kInfo, "host", "one GPU: intra-node all-reduce / all-to-all not measured");
    return;
  }
  const std::string out = dir + "/comm-bench.jsonl";
  std::error_code ec;
  std::filesystem::remove(out, ec);
  ChildSpec spec{
      {self_executable(), "launch", "--nproc-per-node", std::to_string(count), "--", "benchmark", "comm",
       "--backend", "nccl", "--ops", "all_reduce,all_to_all", "--bytes", quick ? "64M" : "64M,256M,1G",
       "--warmup", "5", "--iters", quick ? "20" : "50", "--output-file", out},
      {}};
  const ChildResult c = run_children({spec}, quick ? 45 : 300)[0];
  if (c.timed_out || c.exit_code != 0) {
    add(r, "perf.comm", Level::kFail, "host",
        fmt::format("intra-node collective benchmark {} : {}", c.timed_out ? "timed out" : "failed",
                    tail(c.output, 400)));
    return;
  }
  std::ifstream f(out);
  std::string line;
  while (std::getline(f, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    const std::string op = j.value("op", "");
    const double bus = j.value("busbw_gbps", 0.0);
    const double min = op == "all_reduce" ? t.allreduce_busbw_gbps_min : t.alltoall_busbw_gbps_min;
    const int64_t bytes = j.value("bytes", int64_t{0});
    const bool judged = bytes == (int64_t{64} << 20);
    add(r, "perf." + op, judged && min > 0 && bus < min ? Level::kFail : Level::kInfo, "host",
        fmt::format("{} over {} GPUs, {} MiB: busbw {:.1f} GB/s{}", op, count, bytes >> 20, bus,
                    judged && min > 0 ? fmt::format(" (need >= {:.0f})", min) : ""),
        bus);
  }
}

}  // namespace

PreflightReport run_preflight_checks(const PreflightOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  PreflightReport r;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  r.host = host;

  std::string why;
  std::unique_ptr<Nvml> nvml = Nvml::open(why);
  const int count = nvml ? nvml->count() : 0;
  std::string first_name = count > 0 ? nvml->query(0).name : "";
  Thresholds t = default_thresholds(first_name);
  if (!o.thresholds_file.empty()) apply_threshold_file(t, o.thresholds_file, first_name);
  add(r, "thresholds", Level::kInfo, "host",
      fmt::format(
          "model {}: GEMM >= {} TFLOP/s, HBM copy >= {} GB/s, all-reduce >= {} GB/s, all-to-all >= {} GB/s{}",
          t.model, t.gemm_tflops_min, t.hbm_copy_gbps_min, t.allreduce_busbw_gbps_min,
          t.alltoall_busbw_gbps_min, o.thresholds_file.empty() ? "" : " (from " + o.thresholds_file + ")"));

  host_checks(r, t);
  std::vector<NvmlGpu> gpus;
  if (!nvml || count == 0) {
    add(r, "gpu.count", o.allow_no_gpu ? Level::kWarn : Level::kFail, "host",
        nvml ? "no NVIDIA GPU visible to NVML" : "no NVIDIA GPU: " + why);
  } else {
    add(r, "gpu.count", Level::kInfo, "host", fmt::format("{} GPU(s)", count), count);
    gpu_checks(r, *nvml, count, o, t, gpus);
  }
  if (o.expected_gpus >= 0 && count != o.expected_gpus)
    add(r, "gpu.count", Level::kFail, "host",
        fmt::format("{} GPU(s) visible, {} expected", count, o.expected_gpus));
  nccl_env_checks(r, count);

  if (count > 0 && o.smoke) run_gpu_workers(r, "smoke", gpus, o.smoke_timeout_s, t);
  if (count > 0 && o.perf) {
    run_gpu_workers(r, o.quick ? "perf-quick" : "perf", gpus, o.quick ? 30 : 120, t);
    std::error_code ec;
    std::filesystem::create_directories(o.output_dir, ec);
    run_comm_perf(r, count, o.quick, t, o.output_dir);
  }
  for (const Finding& f : r.findings)
    if (f.level == Level::kFail) {
      const std::string line =
          fmt::format("{} {} {}", r.host, f.subject == "host" ? "-" : f.subject, f.check);
      if (std::find(r.failing.begin(), r.failing.end(), line) == r.failing.end()) r.failing.push_back(line);
    }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

int run_preflight(const PreflightOptions& o) {
  PreflightReport r = run_preflight_checks(o);
  for (const Finding& f : r.findings) {
    const std::string line =
        fmt::format("[{}] {} {}: {}", level_name(f.level), f.check, f.subject, f.message);
    if (f.level == Level::kFail) {
      log::error("{}", line);
    } else if (f.level == Level::kWarn) {
      log::warn("{}", line);
    } else {
      log::info("{}", line);
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(o.output_dir, ec);
  if (ec) throw Error(ErrorKind::kRuntime, "preflight: cannot create " + o.output_dir + ": " + ec.message());
  char ts[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(ts, sizeof(ts), "%Y%m%d-%H%M%S", std::gmtime(&now));
  const std::string base = fmt::format("{}/preflight-{}-{}", o.output_dir, r.host, ts);
  std::ofstream(base + ".md") << r.markdown();
  std::ofstream(base + ".json") << r.json().dump(1) << '\n';
  {
    std::ofstream f(o.output_dir + "/failing.txt");
    for (const std::string& s : r.failing) f << s << '\n';
  }
  log::info("preflight {} in {:.1f} s: {} ({}.md, .json; failing list {}/failing.txt)",
            r.exit_code() == 0 ? "PASSED" : "FAILED", r.seconds,
            r.failing.empty() ? std::string("no failures") : fmt::format("{}", fmt::join(r.failing, "; ")),
            base, o.output_dir);
  return r.exit_code();
}

int run_preflight_worker(const std::string& what) {
  nlohmann::json j;
  if (what == "smoke") {
    j = gpu_smoke_test();
  } else if (what == "perf" || what == "perf-quick") {
    j = gpu_perf_test(what == "perf-quick");
  } else {
    throw ConfigError(fmt::format("preflight --worker '{}' (smoke, perf or perf-quick)", what));
  }
  std::printf("%s%s\n", kResultTag, j.dump().c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace primus::safe
