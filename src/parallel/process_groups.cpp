#include "parallel/process_groups.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace primus::parallel {

comm::Communicator& ProcessGroups::get(const std::string& name) const {
  if (name == "world" && world_ != nullptr) return *world_;
  return *shared(name);
}

std::shared_ptr<comm::Communicator> ProcessGroups::shared(const std::string& name) const {
  auto it = groups_.find(name);
  if (it != groups_.end()) return it->second;
  std::string known;
  for (const auto& n : ParallelDims::group_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError(fmt::format("unknown process group '{}' (groups: {})", name, known));
}

void ProcessGroups::abort(const std::string& reason) {
  for (auto& [_, g] : groups_) g->abort(reason);
}

ProcessGroups build_groups(const ParallelDims& dims, comm::Communicator& world) {
  if (world.size() != dims.world_size())
    throw ConfigError(fmt::format("the parallel layout needs {} ranks ({}) but the job has {}",
                                  dims.world_size(), dims.describe(), world.size()));
  ProcessGroups out;
  out.dims_ = dims;
  out.world_ = &world;
  out.groups_["world"] =
      std::shared_ptr<comm::Communicator>(&world, [](comm::Communicator*) {});  // not owned
  // Which names share a partition of the ranks. The partition depends only on the degrees, so every rank
  // computes the same classes; comparing rank 0's group and this rank's group is not enough, so compare the
  // groups of every rank.
  std::vector<std::string> names;
  for (const auto& n : ParallelDims::group_names())
    if (n != "world") names.push_back(n);
  auto partition = [&](const std::string& name) {
    std::vector<std::vector<int>> p;
    for (int r = 0; r < dims.world_size(); ++r) p.push_back(dims.group_ranks(name, r));
    return p;
  };
  std::vector<std::vector<std::string>> classes;
  std::vector<std::vector<std::vector<int>>> parts;
  for (const auto& n : names) {
    auto p = partition(n);
    bool placed = false;
    for (size_t c = 0; c < classes.size(); ++c)
      if (parts[c] == p) {
        classes[c].push_back(n);
        placed = true;
        break;
      }
    if (!placed) {
      classes.push_back({n});
      parts.push_back(std::move(p));
    }
  }
  const int me = world.rank();
  for (size_t c = 0; c < classes.size(); ++c) {
    std::string label;
    for (const auto& n : classes[c]) label += (label.empty() ? "" : "=") + n;
    const std::vector<int>& members = parts[c][me];
    // color: the smallest world rank of the group identifies it; key: the world rank orders it.
    // The expert-parallel group's all-to-alls and the tensor-parallel group's all-reduces / gathers sit
    // between a layer's kernels: low latency (communicator.h).
    auto has = [&](const char* g) {
      return std::find(classes[c].begin(), classes[c].end(), g) != classes[c].end();
    };
    const bool hot = has("ep") || has("tp");
    std::shared_ptr<comm::Communicator> g(world.split(members.front(), me, label, hot).release());
    if (!g || g->size() != static_cast<int>(members.size()))
      throw comm::CommError(fmt::format("rank {}: building group {} gave {} ranks, expected {}", me, label,
                                        g ? g->size() : 0, members.size()));
    for (const auto& n : classes[c]) out.groups_[n] = g;
  }
  return out;
}

}  // namespace primus::parallel
