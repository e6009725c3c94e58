#include "checkpoint/publish.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>

#include "checkpoint/file_io.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"

namespace fs = std::filesystem;

namespace primus::ckpt {

namespace {

// ".tmp-iter_0000050-1234" / ".trash-iter_0000050-1234" / ".latest.tmp-1234" -> 1234
std::optional<pid_t> owner_pid(const std::string& name) {
  const size_t dash = name.rfind('-');
  if (dash == std::string::npos || dash + 1 >= name.size()) return std::nullopt;
  pid_t pid = 0;
  for (size_t i = dash + 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    pid = pid * 10 + (name[i] - '0');
  }
  return pid;
}

bool process_alive(pid_t pid) {
  return pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH;
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) log::warn("checkpoint: could not delete {}: {}", path, ec.message());
}

}  // namespace

std::string iter_dir_name(int64_t iteration) {
  return fmt::format("iter_{:07d}", iteration);
}

std::optional<int64_t> parse_iter_dir_name(const std::string& name) {
  if (name.size() < 6 || name.rfind("iter_", 0) != 0) return std::nullopt;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || v > (INT64_MAX - 9) / 10) return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

std::vector<std::string> list_checkpoint_dirs(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(root, ec)) {
    const std::string name = d.path().filename().string();
    auto it = parse_iter_dir_name(name);
    if (it && d.is_directory(ec)) found.emplace_back(*it, d.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::optional<std::string> read_latest_pointer(const std::string& root) {
  const std::string p = root + "/" + kLatestName;
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return std::nullopt;
  std::string text;
  try {
    text = read_text_file(p);
  } catch (const Error&) {
    return std::nullopt;
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (!parse_iter_dir_name(text)) return std::nullopt;
  return root + "/" + text;
}

void clean_stale_entries(const std::string& root) {
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(root, ec)) {
    const std::string name = d.path().filename().string();
    const bool ours =
        name.rfind(".tmp-", 0) == 0 || name.rfind(".trash-", 0) == 0 || name.rfind(".latest.tmp-", 0) == 0;
    if (!ours) continue;
    auto pid = owner_pid(name);
    if (pid && process_alive(*pid) && *pid != ::getpid()) continue;  // another live process is saving
    log::info("checkpoint: removing {} left by an interrupted save", d.path().string());
    remove_tree(d.path().string());
  }
}

PublishStats publish_checkpoint(const Snapshot& snap, const std::string& root, int64_t keep_latest_k) {
  const Stopwatch t0;
  PublishStats st;
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec)
    throw Error(ErrorKind::kRuntime,
                fmt::format("cannot create checkpoint directory {}: {}", root, ec.message()));
  const std::string name = iter_dir_name(snap.state.iteration);
  const std::string pid = std::to_string(::getpid());
  const std::string tmp = root + "/.tmp-" + name + "-" + pid;
  const std::string final_dir = root + "/" + name;
  remove_tree(tmp);
  if (!fs::create_directory(tmp, ec) || ec)
    throw Error(ErrorKind::kRuntime, fmt::format("cannot create {}: {}", tmp, ec.message()));
  crash_point("stage");
  try {
    WriteStats ws;
    write_snapshot(snap, tmp, &ws);
    fsync_dir(tmp);
    st.bytes = ws.bytes;
    st.write_seconds = t0.seconds();
  } catch (...) {
    remove_tree(tmp);  // e.g. ENOSPC: the previous checkpoints are untouched
    throw;
  }

  // A re-save of the same iteration (a resumed run that saves where it started) replaces the old directory.
  if (fs::exists(final_dir, ec)) {
    // Swap atomically where the filesystem can (renameat2 RENAME_EXCHANGE), so iter_N never goes missing.
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
      fsync_dir(root);
      remove_tree(tmp);  // now holds the old directory
    } else {
      const std::string trash = root + "/.trash-" + name + "-" + pid;
      remove_tree(trash);
      rename_path(final_dir, trash);
      rename_path(tmp, final_dir);
      fsync_dir(root);
      remove_tree(trash);
    }
  } else {
    rename_path(tmp, final_dir);
    fsync_dir(root);
  }
  crash_point("publish");

  const std::string latest_tmp = root + "/.latest.tmp-" + pid;
  write_file_durable(latest_tmp, name + "\n");
  crash_point("latest");
  rename_path(latest_tmp, root + "/" + kLatestName);
  fsync_dir(root);
  st.dir = final_dir;

  // Retention after publication: the newest keep_latest_k stay, older ones go (never the one just written).
  if (keep_latest_k > 0) {
    std::vector<std::string> dirs = list_checkpoint_dirs(root);
    for (size_t i = static_cast<size_t>(keep_latest_k); i < dirs.size(); ++i) {
      if (dirs[i] == final_dir) continue;
      const std::string base = fs::path(dirs[i]).filename().string();
      const std::string trash = root + "/.trash-" + base + "-" + pid;
      try {
        rename_path(dirs[i], trash);
      } catch (const Error& e) {
        log::warn("checkpoint: retention could not remove {}: {}", dirs[i], e.what());
        continue;
      }
      crash_point("retention");
      remove_tree(trash);
      st.deleted.push_back(dirs[i]);
    }
    if (!st.deleted.empty()) fsync_dir(root);
  }
  st.total_seconds = t0.seconds();
  return st;
}

void publish_new_dir(const std::string& dir, const std::function<void(const std::string&)>& write) {
  fs::path final_dir = fs::path(dir).lexically_normal();
  if (final_dir.filename().empty()) final_dir = final_dir.parent_path();  // "out/" -> "out"
  std::error_code ec;
  if (fs::exists(final_dir, ec) && !(fs::is_directory(final_dir, ec) && fs::is_empty(final_dir, ec)))
    throw ConfigError(fmt::format("output {} exists and is not empty", dir),
                      "choose a new directory (exports never overwrite)");
  const fs::path parent = final_dir.has_parent_path() ? final_dir.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  if (ec)
    throw Error(ErrorKind::kRuntime, fmt::format("cannot create {}: {}", parent.string(), ec.message()));
  const std::string tmp =
      (parent / (".tmp-" + final_dir.filename().string() + "-" + std::to_string(::getpid()))).string();
  remove_tree(tmp);
  if (!fs::create_directory(tmp, ec) || ec)
    throw Error(ErrorKind::kRuntime, fmt::format("cannot create {}: {}", tmp, ec.message()));
  try {
    write(tmp);
    fsync_dir(tmp);
    rename_path(tmp, final_dir.string());  // rename(2) replaces an empty directory
  } catch (...) {
    remove_tree(tmp);
    throw;
  }
  fsync_dir(parent.string());
}

}  // namespace primus::ckpt
