#include "checkpoint/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace primus::ckpt {

namespace {

[[noreturn]] void io_error(const std::string& what, const std::string& path) {
  throw Error(ErrorKind::kRuntime, fmt::format("{} {}: {}", what, path, std::strerror(errno)));
}

XXH3_state_t* new_state() {
  XXH3_state_t* s = XXH3_createState();
  if (s == nullptr) throw Error(ErrorKind::kRuntime, "out of memory (xxh3 state)");
  XXH3_64bits_reset(s);
  return s;
}

}  // namespace

std::string hex64(uint64_t v) {
  return fmt::format("{:016x}", v);
}

bool parse_hex64(const std::string& s, uint64_t* out) {
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return false;
    }
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

uint64_t xxh3_bytes(const void* data, size_t bytes) {
  return XXH3_64bits(data, bytes);
}

DurableFile::DurableFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) io_error("cannot create", path_);
  whole_ = new_state();
  chunk_ = new_state();
}

DurableFile::~DurableFile() {
  if (fd_ >= 0) ::close(fd_);
  XXH3_freeState(static_cast<XXH3_state_t*>(whole_));
  XXH3_freeState(static_cast<XXH3_state_t*>(chunk_));
}

void DurableFile::flush_chunk_hash(bool final) {
  if (chunk_fill_ == 0 && !(final && digest_.chunks.empty())) return;
  auto* c = static_cast<XXH3_state_t*>(chunk_);
  digest_.chunks.push_back(XXH3_64bits_digest(c));
  XXH3_64bits_reset(c);
  chunk_fill_ = 0;
}

void DurableFile::append(const void* data, size_t bytes) {
  PRIMUS_CHECK(fd_ >= 0, "write to a finished file {}", path_);
  const char* p = static_cast<const char*>(data);
  size_t left = bytes;
  while (left > 0) {
    // Hash in chunk-sized pieces so that chunk boundaries fall at multiples of kHashChunkBytes.
    const size_t take = static_cast<size_t>(std::min<uint64_t>(left, kHashChunkBytes - chunk_fill_));
    XXH3_64bits_update(static_cast<XXH3_state_t*>(whole_), p, take);
    XXH3_64bits_update(static_cast<XXH3_state_t*>(chunk_), p, take);
    size_t done = 0;
    while (done < take) {
      const ssize_t n = ::write(fd_, p + done, take - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        io_error(fmt::format("cannot write {} bytes at offset {} of", take - done, digest_.bytes + done),
                 path_);
      }
      done += static_cast<size_t>(n);
    }
    digest_.bytes += take;
    chunk_fill_ += take;
    if (chunk_fill_ == kHashChunkBytes) flush_chunk_hash(false);
    p += take;
    left -= take;
  }
}

FileDigest DurableFile::finish() {
  PRIMUS_CHECK(fd_ >= 0, "file {} finished twice", path_);
  flush_chunk_hash(true);
  digest_.xxh3 = XXH3_64bits_digest(static_cast<XXH3_state_t*>(whole_));
  if (::fsync(fd_) != 0) io_error("cannot fsync", path_);
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) io_error("cannot close", path_);
  return digest_;
}

FileDigest write_file_durable(const std::string& path, const std::string& text) {
  DurableFile f(path);
  f.append(text.data(), text.size());
  return f.finish();
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) io_error("cannot open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) io_error("cannot fsync directory", dir);
}

void rename_path(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw Error(ErrorKind::kRuntime,
                fmt::format("cannot rename {} to {}: {}", from, to, std::strerror(errno)));
}

FileDigest digest_file(const std::string& path, uint64_t chunk_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) io_error("cannot open", path);
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> whole(new_state(), XXH3_freeState);
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> chunk(new_state(), XXH3_freeState);
  FileDigest d;
  // 8 MiB reads: large enough for full disk/page-cache bandwidth, small enough to stay in L3-ish buffers.
  constexpr size_t kBuf = size_t(8) << 20;
  std::unique_ptr<char[]> buf(new char[kBuf]);
  uint64_t fill = 0;
  while (true) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kBuf, chunk_bytes - fill));
    const ssize_t n = ::read(fd, buf.get(), want);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      errno = e;
      io_error("cannot read", path);
    }
    if (n == 0) break;
    XXH3_64bits_update(whole.get(), buf.get(), static_cast<size_t>(n));
    XXH3_64bits_update(chunk.get(), buf.get(), static_cast<size_t>(n));
    d.bytes += static_cast<uint64_t>(n);
    fill += static_cast<uint64_t>(n);
    if (fill == chunk_bytes) {
      d.chunks.push_back(XXH3_64bits_digest(chunk.get()));
      XXH3_64bits_reset(chunk.get());
      fill = 0;
    }
  }
  ::close(fd);
  if (fill > 0 || d.chunks.empty()) d.chunks.push_back(XXH3_64bits_digest(chunk.get()));
  d.xxh3 = XXH3_64bits_digest(whole.get());
  return d;
}

FileReader::FileReader(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) io_error("cannot open", path_);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) io_error("cannot stat", path_);
  size_ = static_cast<uint64_t>(st.st_size);
}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

void FileReader::read_at(uint64_t offset, void* dst, size_t bytes) const {
  if (offset > size_ || bytes > size_ - offset)
    throw Error(ErrorKind::kRuntime,
                fmt::format("{}: bytes [{}, {}) lie beyond the end of the file ({} bytes)", path_, offset,
                            offset + bytes, size_));
  char* p = static_cast<char*>(dst);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd_, p + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      io_error(fmt::format("cannot read bytes [{}, {}) of", offset + done, offset + bytes), path_);
    }
    if (n == 0)
      throw Error(ErrorKind::kRuntime,
                  fmt::format("{}: unexpected end of file at byte {}", path_, offset + done));
    done += static_cast<size_t>(n);
  }
}

std::string read_text_file(const std::string& path) {
  FileReader r(path);
  std::string s(static_cast<size_t>(r.size()), '\0');
  if (!s.empty()) r.read_at(0, s.data(), s.size());
  return s;
}

}  // namespace primus::ckpt
