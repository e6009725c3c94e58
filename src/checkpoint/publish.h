#pragma once
// Atomic publication of a checkpoint under a save root:
//   1. write every file into <root>/.tmp-iter_NNNNNNN-<pid>/, fsync each file (manifest last), fsync the dir;
//   2. rename it to <root>/iter_NNNNNNN and fsync the root: the checkpoint exists, complete, or not at all;
//   3. write <root>/.latest.tmp-<pid> naming it, fsync, rename over <root>/latest, fsync the root;
//   4. only then delete checkpoints beyond the newest keep_latest_k (renamed to .trash-* first, so a crash
//      mid-delete never leaves a partial iter_* directory behind).
// A crash at any point leaves `latest` naming a complete checkpoint (the previous or the new one).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/snapshot.h"

namespace primus::ckpt {

inline constexpr const char* kLatestName = "latest";

std::string iter_dir_name(int64_t iteration);  // "iter_0000050" (Megatron's iter_%07d)
// Iteration of a directory named iter_NNN..., or nullopt.
std::optional<int64_t> parse_iter_dir_name(const std::string& name);

struct PublishStats {
  std::string dir;
  uint64_t bytes = 0;
  double write_seconds = 0;  // files + fsyncs
  double total_seconds = 0;  // including rename, latest and retention
  std::vector<std::string> deleted;
};

// Publishes `snap` under `root` as described above. keep_latest_k = 0 keeps every checkpoint.
PublishStats publish_checkpoint(const Snapshot& snap, const std::string& root, int64_t keep_latest_k);

// Makes `dir` (absent or empty, else a ConfigError) appear whole or not at all: `write` fills a hidden
// sibling <parent>/.tmp-<name>-<pid> (removed if it throws), which is fsynced and renamed to `dir`. For
// exports (PEFT adapters, merged models) that a reader must never see half written.
void publish_new_dir(const std::string& dir, const std::function<void(const std::string& staging)>& write);

// Deletes leftovers of crashed saves (.tmp-* and .trash-* entries whose process is gone).
void clean_stale_entries(const std::string& root);

// iter_* directories under root, newest first (by iteration number; complete by construction).
std::vector<std::string> list_checkpoint_dirs(const std::string& root);
// The directory `latest` names (full path), or nullopt when there is no readable pointer.
std::optional<std::string> read_latest_pointer(const std::string& root);

}  // namespace primus::ckpt
