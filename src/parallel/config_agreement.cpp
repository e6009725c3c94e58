#include "parallel/config_agreement.h"

#include <fmt/format.h>

#include <cstring>
#include <sstream>

#include "checkpoint/file_io.h"
#include "core/error.h"
#include "core/log.h"

namespace primus::parallel {

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(' ');
  const size_t e = s.find_last_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

std::string config_semantics(const std::string& resolved_yaml) {
  std::string out;
  for (const std::string& line : lines_of(resolved_yaml)) {
    if (trimmed(line).rfind('#', 0) == 0) continue;  // header comments: paths, names, versions
    const size_t comment = line.rfind("  # ");       // the origin of the value (file:line, may be a path)
    const std::string kept = comment == std::string::npos ? line : line.substr(0, comment);
    out += kept.substr(0, kept.find_last_not_of(' ') + 1) + "\n";
  }
  return out;
}

std::vector<std::string> config_differences(const std::string& rank0, const std::string& mine,
                                            size_t max_lines) {
  const std::vector<std::string> a = lines_of(rank0), b = lines_of(mine);
  std::vector<std::string> out;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n && out.size() < max_lines; ++i) {
    const std::string x = i < a.size() ? a[i] : "(nothing)", y = i < b.size() ? b[i] : "(nothing)";
    if (x != y) out.push_back(fmt::format("{} (rank 0: {})", trimmed(y), trimmed(x)));
  }
  return out;
}

void check_ranks_agree(comm::Communicator& world, const std::string& resolved, const Stream& s) {
  const int n = world.size();
  if (n <= 1) return;
  const std::string resolved_yaml = config_semantics(resolved);
  const int64_t mine = static_cast<int64_t>(ckpt::xxh3_bytes(resolved_yaml.data(), resolved_yaml.size()));
  Tensor in = Tensor::from_vector(std::vector<int64_t>{mine}, {1});
  Tensor all = Tensor::zeros({n}, DType::kI64, s);
  if (!s.device.is_cpu()) in = in.to(s);
  world.all_gather(in, all, s, "config agreement");
  const std::vector<int64_t> hashes = all.to_vector<int64_t>();
  std::vector<int> differ;
  for (int r = 1; r < n; ++r)
    if (hashes[static_cast<size_t>(r)] != hashes[0]) differ.push_back(r);
  if (differ.empty()) return;

  // Rank 0's text to everyone (its length, then its bytes packed into i32), so each differing rank can say
  // what differs.
  Tensor len = Tensor::from_vector(std::vector<int64_t>{static_cast<int64_t>(resolved_yaml.size())}, {1});
  if (!s.device.is_cpu()) len = len.to(s);
  world.broadcast(len, 0, s, "config agreement: length");
  const int64_t bytes = len.to_vector<int64_t>()[0];
  std::vector<int32_t> packed(static_cast<size_t>((bytes + 3) / 4), 0);
  if (world.rank() == 0) std::memcpy(packed.data(), resolved_yaml.data(), resolved_yaml.size());
  Tensor text = Tensor::from_vector(packed, {static_cast<int64_t>(packed.size())});
  if (!s.device.is_cpu()) text = text.to(s);
  if (!packed.empty()) world.broadcast(text, 0, s, "config agreement: text");
  const std::vector<int32_t> got = text.to_vector<int32_t>();
  std::string rank0(static_cast<size_t>(bytes), '\0');
  if (bytes > 0) std::memcpy(rank0.data(), got.data(), static_cast<size_t>(bytes));

  std::string ranks;
  for (int r : differ) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  const std::string hint =
      "every rank must resolve the same experiment: the same file, overrides and ${VAR} values (check the "
      "environment of each node)";
  // Each differing rank logs what differs, then every rank waits for the others before failing: a launcher
  // stops the job when the first rank exits, which must not cut a rank off before it has said what differs.
  const bool mine_differs = hashes[static_cast<size_t>(world.rank())] != hashes[0];
  if (mine_differs) {
    std::string what;
    for (const std::string& d : config_differences(rank0, resolved_yaml)) what += "\n  - " + d;
    log::error("rank {} resolved a different configuration than rank 0:{}", world.rank(), what);
  }
  world.barrier("config agreement: reported");
  if (mine_differs)
    throw ConfigError(
        fmt::format("rank {} resolved a different configuration than rank 0 (ranks that differ: {}; "
                    "the lines are logged above); the job stops before building anything",
                    world.rank(), ranks),
        hint);
  throw ConfigError(fmt::format("rank(s) {} resolved a different configuration than rank 0 (each logged the "
                                "differing lines); the job stops before building anything",
                                ranks),
                    hint);
}

}  // namespace primus::parallel
