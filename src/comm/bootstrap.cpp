#include "comm/bootstrap.h"

#include <fmt/format.h>

#include <cstdlib>

#include "core/error.h"

namespace primus::comm {

EnvLookup process_env_lookup() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

std::string LaunchEnv::describe() const {
  return fmt::format("rank {} of {} (local {} of {}, node {} of {}) from {}{}; master {}:{}", rank,
                     world_size, local_rank, local_world_size, node_rank, nnodes, source,
                     variables.empty() ? "" : " (" + variables + ")", master_addr, master_port);
}

namespace {

std::optional<std::string> get(const EnvLookup& env, const char* name) {
  auto v = env(name);
  if (!v || v->empty()) return std::nullopt;
  return v;
}

int parse_int(const std::string& text, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || end == text.c_str() || *end != '\0' || errno != 0 || v < INT32_MIN || v > INT32_MAX)
    throw ConfigError(fmt::format("environment: {}='{}' is not an integer", what, text));
  return static_cast<int>(v);
}

std::optional<int> get_int(const EnvLookup& env, const char* name) {
  auto v = get(env, name);
  if (!v) return std::nullopt;
  return parse_int(*v, name);
}

int int_or(const EnvLookup& env, const char* name, int fallback) {
  return get_int(env, name).value_or(fallback);
}

// Fills `out` from one source when its defining variables are present. Returns false otherwise.
bool from_torchrun(const EnvLookup& env, LaunchEnv& out) {
  auto rank = get_int(env, "RANK");
  auto world = get_int(env, "WORLD_SIZE");
  if (!rank || !world) return false;
  out.rank = *rank;
  out.world_size = *world;
  out.local_rank = int_or(env, "LOCAL_RANK", *rank);
  out.local_world_size = int_or(env, "LOCAL_WORLD_SIZE", *world);
  out.node_rank = int_or(env, "GROUP_RANK", out.rank / std::max(1, out.local_world_size));
  out.nnodes = std::max(1, out.world_size / std::max(1, out.local_world_size));
  out.source = "torchrun";
  out.variables = "RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK";
  return true;
}

bool from_openmpi(const EnvLookup& env, LaunchEnv& out) {
  auto rank = get_int(env, "OMPI_COMM_WORLD_RANK");
  auto world = get_int(env, "OMPI_COMM_WORLD_SIZE");
  if (!rank || !world) return false;
  out.rank = *rank;
  out.world_size = *world;
  out.local_rank = int_or(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0);
  out.local_world_size = int_or(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  out.node_rank = int_or(env, "OMPI_COMM_WORLD_NODE_RANK", out.rank / std::max(1, out.local_world_size));
  out.nnodes = std::max(1, out.world_size / std::max(1, out.local_world_size));
  out.source = "openmpi";
  out.variables = "OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE,NODE_RANK}";
  return true;
}

bool from_pmi(const EnvLookup& env, LaunchEnv& out) {
  auto rank = get_int(env, "PMI_RANK");
  auto world = get_int(env, "PMI_SIZE");
  if (!rank || !world) return false;
  out.rank = *rank;
  out.world_size = *world;
  out.local_rank = int_or(env, "MPI_LOCALRANKID", 0);
  out.local_world_size = int_or(env, "MPI_LOCALNRANKS", 1);
  out.node_rank = out.rank / std::max(1, out.local_world_size);
  out.nnodes = std::max(1, out.world_size / std::max(1, out.local_world_size));
  out.source = "pmi";
  out.variables = "PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS";
  return true;
}

bool from_slurm(const EnvLookup& env, LaunchEnv& out) {
  auto rank = get_int(env, "SLURM_PROCID");
  auto world = get_int(env, "SLURM_NTASKS");
  if (!rank || !world) return false;
  out.rank = *rank;
  out.world_size = *world;
  out.local_rank = int_or(env, "SLURM_LOCALID", 0);
  if (auto t = get(env, "SLURM_NTASKS_PER_NODE")) {
    out.local_world_size = first_slurm_count(*t);
  } else if (auto t2 = get(env, "SLURM_TASKS_PER_NODE")) {
    out.local_world_size = first_slurm_count(*t2);
  } else {
    out.local_world_size = 1;
  }
  out.nnodes = int_or(env, "SLURM_NNODES", std::max(1, out.world_size / std::max(1, out.local_world_size)));
  out.node_rank =
      int_or(env, "NODE_RANK", int_or(env, "SLURM_NODEID", out.rank / std::max(1, out.local_world_size)));
  auto nodes = get(env, "SLURM_JOB_NODELIST");
  if (!nodes) nodes = get(env, "SLURM_NODELIST");
  if (nodes) {
    std::vector<std::string> hosts = expand_slurm_nodelist(*nodes);
    if (!hosts.empty()) out.master_addr = hosts.front();
  }
  // A port derived from the job id, so that two jobs sharing a node do not collide (MASTER_PORT overrides).
  if (auto job = get_int(env, "SLURM_JOB_ID")) out.master_port = 20000 + (*job % 10000);
  out.source = "slurm";
  out.variables =
      "SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE, SLURM_NODEID, "
      "SLURM_JOB_NODELIST";
  return true;
}

bool from_primus(const EnvLookup& env, LaunchEnv& out) {
  auto local = get_int(env, "LOCAL_RANK");
  auto gpus = get_int(env, "GPUS_PER_NODE");
  if (!local || !gpus || !get(env, "NNODES")) return false;
  out.nnodes = int_or(env, "NNODES", 1);
  out.node_rank = int_or(env, "NODE_RANK", 0);
  out.local_world_size = *gpus;
  out.local_rank = *local;
  out.world_size = out.nnodes * out.local_world_size;
  out.rank = out.node_rank * out.local_world_size + out.local_rank;
  out.master_addr = "localhost";
  out.master_port = 1234;  // Primus's defaults
  out.source = "primus";
  out.variables = "NNODES, NODE_RANK, GPUS_PER_NODE, LOCAL_RANK";
  return true;
}

}  // namespace

LaunchEnv resolve_launch_env(const EnvLookup& env, const ExplicitLaunch& ex) {
  LaunchEnv out;
  const bool any_explicit = ex.rank || ex.world_size;
  if (!(any_explicit && ex.rank && ex.world_size)) {
    if (!from_torchrun(env, out) && !from_openmpi(env, out) && !from_pmi(env, out) && !from_slurm(env, out) &&
        !from_primus(env, out)) {
      out.source = "single";
      out.variables = "no launcher variables found";
    }
  }
  if (any_explicit) {
    if (!ex.rank || !ex.world_size) throw ConfigError("explicit launch values need both rank and world size");
    out.rank = *ex.rank;
    out.world_size = *ex.world_size;
    out.local_rank = ex.local_rank.value_or(out.rank);
    out.local_world_size = ex.local_world_size.value_or(out.world_size);
    out.node_rank = out.rank / std::max(1, out.local_world_size);
    out.nnodes = std::max(1, out.world_size / std::max(1, out.local_world_size));
    out.source = "explicit";
    out.variables = "arguments";
  }
  if (auto a = get(env, "MASTER_ADDR")) out.master_addr = *a;
  if (auto p = get_int(env, "MASTER_PORT")) out.master_port = *p;
  if (ex.master_addr) out.master_addr = *ex.master_addr;
  if (ex.master_port) out.master_port = *ex.master_port;

  const std::string from = fmt::format(" (from {}: {})", out.source, out.variables);
  if (out.world_size < 1)
    throw ConfigError(fmt::format("world size {} must be >= 1{}", out.world_size, from));
  if (out.rank < 0 || out.rank >= out.world_size)
    throw ConfigError(
        fmt::format("rank {} is outside the world of {} ranks{}", out.rank, out.world_size, from));
  if (out.local_world_size < 1 || out.local_world_size > out.world_size)
    throw ConfigError(fmt::format("local world size {} must be between 1 and the world size {}{}",
                                  out.local_world_size, out.world_size, from));
  if (out.local_rank < 0 || out.local_rank >= out.local_world_size)
    throw ConfigError(fmt::format("local rank {} is outside the node's {} ranks{}", out.local_rank,
                                  out.local_world_size, from));
  if (out.master_port < 0 || out.master_port > 65535)
    throw ConfigError(fmt::format("master port {} is not a TCP port (MASTER_PORT)", out.master_port));
  return out;
}

int first_slurm_count(std::string_view t) {
  size_t i = 0;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
  if (i == 0) throw ConfigError(fmt::format("environment: cannot read a task count from '{}'", t));
  return parse_int(std::string(t.substr(0, i)), "SLURM_NTASKS_PER_NODE");
}

namespace {

// Expands the first bracket group of `name` and recurses on the rest (so "a[1-2]b[3-4]" gives 4 names).
void expand_name(const std::string& name, std::vector<std::string>& out, std::string_view whole) {
  auto open = name.find('[');
  if (open == std::string::npos) {
    out.push_back(name);
    return;
  }
  auto close = name.find(']', open);
  if (close == std::string::npos)
    throw ConfigError(fmt::format("Slurm node list '{}': unbalanced '['", whole));
  const std::string prefix = name.substr(0, open), suffix = name.substr(close + 1);
  const std::string body = name.substr(open + 1, close - open - 1);
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    std::string item = body.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    auto dash = item.find('-');
    std::string lo = dash == std::string::npos ? item : item.substr(0, dash);
    std::string hi = dash == std::string::npos ? item : item.substr(dash + 1);
    if (lo.empty() || hi.empty() || lo.find_first_not_of("0123456789") != std::string::npos ||
        hi.find_first_not_of("0123456789") != std::string::npos)
      throw ConfigError(fmt::format("Slurm node list '{}': bad range '{}'", whole, item));
    const long a = std::stol(lo), b = std::stol(hi);
    if (b < a) throw ConfigError(fmt::format("Slurm node list '{}': range '{}' runs backwards", whole, item));
    if (b - a > 100000)
      throw ConfigError(fmt::format("Slurm node list '{}': range '{}' is too large", whole, item));
    const size_t width = lo.size();  // "01-04" keeps two digits
    for (long v = a; v <= b; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
      expand_name(prefix + digits + suffix, out, whole);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
}

}  // namespace

std::vector<std::string> expand_slurm_nodelist(std::string_view list) {
  std::vector<std::string> out;
  // Split on commas outside brackets.
  int depth = 0;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty()) expand_name(cur, out, list);
    cur.clear();
  };
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0) throw ConfigError(fmt::format("Slurm node list '{}': unbalanced ']'", list));
    if (c == ',' && depth == 0) {
      flush();
    } else if (c != ' ') {
      cur.push_back(c);
    }
  }
  if (depth != 0) throw ConfigError(fmt::format("Slurm node list '{}': unbalanced '['", list));
  flush();
  return out;
}

}  // namespace primus::comm
