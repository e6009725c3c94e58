#include "comm/rank_names.h"

#include <fmt/format.h>

#include <mutex>

namespace primus::comm {

namespace {
std::mutex g_mu;
std::vector<std::string> g_coords;
}  // namespace

void set_rank_coordinates(std::vector<std::string> coords) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_coords = std::move(coords);
}

std::string rank_name(int world_rank) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (world_rank >= 0 && world_rank < static_cast<int>(g_coords.size()) && !g_coords[world_rank].empty())
    return fmt::format("rank {} ({})", world_rank, g_coords[world_rank]);
  return fmt::format("rank {}", world_rank);
}

}  // namespace primus::comm
