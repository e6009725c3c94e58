#include "core/log.h"

#include <cstdio>
#include <mutex>

namespace primus::log {

namespace {
int g_rank = 0, g_world = 1;
Level g_level = Level::kInfo;
bool g_all_ranks = false;
std::mutex g_mu;
}  // namespace

void set_rank(int rank, int world) {
  g_rank = rank;
  g_world = world;
}
void set_level(Level l) {
  g_level = l;
}
void set_all_ranks(bool all) {
  g_all_ranks = all;
}
Level level() {
  return g_level;
}

void write(Level l, const std::string& msg) {
  if (l < g_level) return;
  if (l <= Level::kInfo && g_rank != 0 && !g_all_ranks) return;
  std::string prefix = g_world > 1 ? fmt::format("[rank {}] ", g_rank) : std::string();
  const char* tag = l == Level::kWarn ? "WARNING: " : l == Level::kError ? "ERROR: " : "";
  std::lock_guard<std::mutex> lock(g_mu);
  FILE* out = l >= Level::kWarn ? stderr : stdout;
  std::fprintf(out, "%s%s%s\n", prefix.c_str(), tag, msg.c_str());
  std::fflush(out);
}

}  // namespace primus::log
