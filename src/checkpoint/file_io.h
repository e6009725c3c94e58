#pragma once
// File primitives for checkpoints: durable writes (write + fsync, directory fsync), streaming XXH3-64 hashes
// in fixed-size chunks (so a mismatch can be located to a byte range), and a reader with positioned reads.
// Every failure throws primus::Error naming the file and the operation.
#include <cstdint>
#include <string>
#include <vector>

namespace primus::ckpt {

// Checksums are computed per chunk of this many bytes (the last chunk may be shorter) plus over the whole
// file. 64 MiB keeps the manifest small (one entry per 64 MiB) while locating corruption usefully.
inline constexpr uint64_t kHashChunkBytes = uint64_t(64) << 20;

std::string hex64(uint64_t v);  // 16 lower-case hex digits
bool parse_hex64(const std::string& s, uint64_t* out);

struct FileDigest {
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;             // over the whole file
  std::vector<uint64_t> chunks;  // per kHashChunkBytes chunk
};

// Writes a file from a sequence of appends, hashing as it goes; finish() fsyncs and closes. The destructor of
// an unfinished writer closes the descriptor (the partial file stays: it lives in a temporary directory).
class DurableFile {
 public:
  explicit DurableFile(std::string path);
  ~DurableFile();
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  void append(const void* data, size_t bytes);
  FileDigest finish();  // fsync + close
  const std::string& path() const { return path_; }
  uint64_t written() const { return digest_.bytes; }

 private:
  void flush_chunk_hash(bool final);
  std::string path_;
  int fd_ = -1;
  void* whole_ = nullptr;  // XXH3_state_t*
  void* chunk_ = nullptr;  // XXH3_state_t*
  uint64_t chunk_fill_ = 0;
  FileDigest digest_;
};

// Writes `text` to `path` durably and returns its digest.
FileDigest write_file_durable(const std::string& path, const std::string& text);
// fsync of a directory, so that the entries created or renamed in it survive a power loss.
void fsync_dir(const std::string& dir);
// rename(2) with an error naming both paths.
void rename_path(const std::string& from, const std::string& to);

// Hashes a file the way DurableFile does. `chunk_bytes` is the manifest's chunk size. Throws when the file
// cannot be read.
FileDigest digest_file(const std::string& path, uint64_t chunk_bytes = kHashChunkBytes);

uint64_t xxh3_bytes(const void* data, size_t bytes);

// Positioned reads from one file.
class FileReader {
 public:
  explicit FileReader(std::string path);
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;
  uint64_t size() const { return size_; }
  // Reads exactly `bytes` at `offset` or throws (naming the file and byte range).
  void read_at(uint64_t offset, void* dst, size_t bytes) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

std::string read_text_file(const std::string& path);

}  // namespace primus::ckpt
