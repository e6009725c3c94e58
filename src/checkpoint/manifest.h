#pragma once
// manifest.json: what a checkpoint directory holds and how to check it. Every other file of the directory is
// listed with its size, its XXH3-64 and one XXH3-64 per 64 MiB chunk (so a mismatch names a byte range); the
// manifest carries its own XXH3 over its bytes (field manifest_xxh3, computed with that field zeroed), so a
// flipped bit anywhere in the directory is detected.
//
// Tensors are indexed by logical name with their global shape and a list of shards, each a block of the
// global tensor at an element offset in some file. Today one process writes full tensors (one shard each,
// offset 0); a distributed save writes one block per rank, and any world size can reassemble the global
// tensors by name on load (load.h does the block copy).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/file_io.h"
#include "core/tensor.h"

namespace primus::ckpt {

inline constexpr const char* kManifestName = "manifest.json";
inline constexpr const char* kCheckpointFormat = "primus-cpp-checkpoint";
inline constexpr int kCheckpointVersion = 1;

struct FileRecord {
  std::string name;  // relative to the checkpoint directory
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;
  std::vector<uint64_t> chunks;
};

struct ShardRef {
  std::string file;
  std::string name;  // tensor name inside the file
  Shape offset;      // element offset of this block in the global tensor (one entry per dim)
  Shape shape;       // block shape
};

struct TensorIndexEntry {
  std::string dtype;  // safetensors dtype name
  Shape global_shape;
  std::vector<ShardRef> shards;
};

struct Manifest {
  int version = kCheckpointVersion;
  int64_t iteration = 0;
  int world_size = 1;
  uint64_t chunk_bytes = kHashChunkBytes;
  std::string created;  // UTC time of the save; informational, ignored by comparisons
  std::vector<FileRecord> files;
  // group ("model", "master", "optim") -> logical tensor name -> entry
  std::map<std::string, std::map<std::string, TensorIndexEntry>> tensors;

  const FileRecord* file(const std::string& name) const;
};

// Serialises with the self-hash filled in.
std::string manifest_to_text(const Manifest& m);
// Checks the self-hash and the structure; throws primus::Error naming `what` and the problem.
Manifest parse_manifest(const std::string& text, const std::string& what);
FileRecord file_record(const std::string& name, const FileDigest& d);

}  // namespace primus::ckpt
