#include "data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace primus {

namespace {

Error data_error(const std::string& file, uint64_t offset, const std::string& what,
                 const std::string& hint = {}) {
  return Error(ErrorKind::kRuntime, fmt::format("{}: byte offset {}: {}", file, offset, what), {}, hint);
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // .idx arrays start at byte 34: not aligned
  return v;
}

const char* kRebuildHint =
    "the file is damaged or was not written by a Megatron-compatible tool; re-run "
    "`primus data preprocess` (or Megatron's preprocess_data.py)";

}  // namespace

bool is_valid_token_dtype_code(uint8_t code) {
  return code >= 1 && code <= 8;
}

size_t token_dtype_size(TokenDType t) {
  switch (t) {
    case TokenDType::kU8:
    case TokenDType::kI8:
      return 1;
    case TokenDType::kI16:
    case TokenDType::kU16:
      return 2;
    case TokenDType::kI32:
    case TokenDType::kF32:
      return 4;
    case TokenDType::kI64:
    case TokenDType::kF64:
      return 8;
  }
  return 0;
}

const char* token_dtype_name(TokenDType t) {
  switch (t) {
    case TokenDType::kU8:
      return "uint8";
    case TokenDType::kI8:
      return "int8";
    case TokenDType::kI16:
      return "int16";
    case TokenDType::kI32:
      return "int32";
    case TokenDType::kI64:
      return "int64";
    case TokenDType::kF64:
      return "float64";
    case TokenDType::kF32:
      return "float32";
    case TokenDType::kU16:
      return "uint16";
  }
  return "?";
}

TokenDType optimal_token_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? TokenDType::kU16 : TokenDType::kI32;
}

DataFile::DataFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0)
    throw Error(ErrorKind::kRuntime, fmt::format("cannot open {}: {}", path, std::strerror(errno)), {},
                "check data_path (a Megatron dataset is given by its prefix, without .bin/.idx)");
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw Error(ErrorKind::kRuntime, fmt::format("{} is not a regular file", path));
  }
  size_ = static_cast<size_t>(st.st_size);
  mtime_ns_ = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

DataFile::~DataFile() {
  if (fd_ >= 0) ::close(fd_);
}

void DataFile::read_at(uint64_t offset, void* dst, size_t bytes) const {
  auto* out = static_cast<uint8_t*>(dst);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t r = ::pread(fd_, out + done, bytes - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      throw Error(ErrorKind::kRuntime, fmt::format("{}: reading bytes [{}, {}) failed: {}", path_, offset,
                                                   offset + bytes, std::strerror(errno)));
    if (r == 0) {
      struct stat st {};
      const std::string now =
          ::fstat(fd_, &st) == 0 ? fmt::format("has {} now", st.st_size) : "cannot be stat'ed now";
      throw Error(
          ErrorKind::kRuntime,
          fmt::format("{}: reading bytes [{}, {}) came back short at byte {}: the file had {} bytes when "
                      "opened and {}; it was truncated or rewritten while in use",
                      path_, offset, offset + bytes, offset + done, size_, now),
          {}, "a dataset must not change while a job reads it: write a new one under another name");
    }
    done += static_cast<size_t>(r);
  }
  // A file rewritten in place to the same size reads without error but holds other tokens: its
  // modification time says so.
  struct stat st {};
  if (::fstat(fd_, &st) == 0 &&
      (static_cast<size_t>(st.st_size) != size_ ||
       static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec != mtime_ns_)) {
    throw Error(
        ErrorKind::kRuntime,
        fmt::format("{}: the file changed while in use ({} bytes when opened, {} now; modified since)", path_,
                    size_, st.st_size),
        {}, "a dataset must not change while a job reads it: write a new one under another name");
  }
}

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  // The index is read into memory section by section (never mapped), then validated against the .bin's size.
  const DataFile idx(idx_path);
  bin_ = std::make_unique<DataFile>(bin_path);
  idx_bytes_ = idx.size();
  const uint64_t n = idx.size();
  if (n < kIndexHeaderBytes)
    throw data_error(
        idx_path, n,
        fmt::format("truncated header: the file has {} bytes, the header needs {}", n, kIndexHeaderBytes),
        kRebuildHint);
  uint8_t header[kIndexHeaderBytes];
  idx.read_at(0, header, sizeof(header));
  const uint8_t* p = header;
  if (std::memcmp(p, kIndexMagic, sizeof(kIndexMagic)) != 0) {
    std::string found;
    for (size_t i = 0; i < sizeof(kIndexMagic); ++i) found += fmt::format("{:02x}", p[i]);
    throw data_error(idx_path, 0,
                     fmt::format("wrong magic {} (expected 4d4d4944494458 0000, \"MMIDIDX\")", found),
                     "this is not a Megatron .idx file (the legacy non-mmap format is not supported)");
  }
  const uint64_t version = load<uint64_t>(p + 9);
  if (version != 1)
    throw data_error(idx_path, 9, fmt::format("unsupported version {} (expected 1)", version));
  const uint8_t code = p[17];
  if (!is_valid_token_dtype_code(code))
    throw data_error(idx_path, 17, fmt::format("unknown dtype code {} (known: 1..8)", code), kRebuildHint);
  dtype_ = static_cast<TokenDType>(code);
  const uint64_t s = load<uint64_t>(p + 18), d = load<uint64_t>(p + 26);
  // Sizes are checked in 128-bit arithmetic: a corrupt count must not overflow the bound.
  const unsigned __int128 need = static_cast<unsigned __int128>(kIndexHeaderBytes) +
                                 static_cast<unsigned __int128>(s) * 12 +
                                 static_cast<unsigned __int128>(d) * 8;
  if (need > n) {
    throw data_error(idx_path, n,
                     fmt::format("truncated: the header declares {} sequences and {} document indices, which "
                                 "need {} bytes, but the file ends here",
                                 s, d, static_cast<uint64_t>(std::min<unsigned __int128>(need, UINT64_MAX))),
                     kRebuildHint);
  }
  const uint64_t base = static_cast<uint64_t>(need);
  if (n == base + s && s > 0) {
    multimodal_ = true;  // one int8 mode per sequence follows
  } else if (n != base) {
    throw data_error(
        idx_path, base,
        fmt::format("{} unexpected bytes after the document indices (expected {} or {} bytes in all)",
                    n - base, base, base + s),
        kRebuildHint);
  }
  if (d < 1) throw data_error(idx_path, 26, "document count is 0 (document_indices always starts with 0)");

  // The arrays are little-endian, as is every host primus runs on: read straight into the vectors.
  lengths_.resize(s);
  pointers_.resize(s);
  doc_idx_.resize(d);
  const uint64_t lengths_off = kIndexHeaderBytes, pointers_off = lengths_off + 4 * s,
                 doc_off = pointers_off + 8 * s;
  idx.read_at(lengths_off, lengths_.data(), 4 * s);
  idx.read_at(pointers_off, pointers_.data(), 8 * s);
  idx.read_at(doc_off, doc_idx_.data(), 8 * d);

  const size_t item = token_dtype_size(dtype_);
  const uint64_t bin_size = bin_->size();
  for (uint64_t i = 0; i < s; ++i) {
    const int32_t len = lengths_[i];
    const int64_t ptr = pointers_[i];
    if (len < 0)
      throw data_error(idx_path, lengths_off + 4 * i,
                       fmt::format("sequence {} has negative length {}", i, len));
    if (ptr < 0 || static_cast<uint64_t>(ptr) % item != 0 ||
        static_cast<uint64_t>(ptr) + static_cast<uint64_t>(len) * item > bin_size) {
      throw data_error(
          idx_path, pointers_off + 8 * i,
          fmt::format("sequence {}: pointer {} with {} tokens of {} bytes is outside {} ({} bytes)", i, ptr,
                      len, item, bin_path, bin_size),
          "the .bin and .idx files do not belong together, or one of them is truncated");
    }
    total_tokens_ += len;
  }
  for (uint64_t i = 0; i < d; ++i) {
    const int64_t v = doc_idx_[i];
    const int64_t prev = i == 0 ? 0 : doc_idx_[i - 1];
    if ((i == 0 && v != 0) || v < prev || v > static_cast<int64_t>(s)) {
      throw data_error(idx_path, doc_off + 8 * i,
                       fmt::format("document index {} is {} (must start at 0, never decrease and stay <= {} "
                                   "sequences)",
                                   i, v, s),
                       kRebuildHint);
    }
  }
  if (doc_idx_.back() != static_cast<int64_t>(s)) {
    throw data_error(
        idx_path, doc_off + 8 * (d - 1),
        fmt::format("the last document index is {}, not the sequence count {}", doc_idx_.back(), s),
        kRebuildHint);
  }
}

int64_t IndexedDataset::sequence_pointer(int64_t i) const {
  return pointers_[static_cast<size_t>(i)];
}

namespace {
template <typename T>
void convert(const uint8_t* src, int64_t n, int32_t* out, int64_t limit, const std::string& file,
             uint64_t base, size_t item) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = load<T>(src + static_cast<size_t>(i) * item);
    const bool integral =
        std::is_integral_v<T> || std::floor(static_cast<double>(v)) == static_cast<double>(v);
    if (!integral || v < 0 || (limit > 0 && static_cast<double>(v) >= static_cast<double>(limit)) ||
        static_cast<double>(v) > 2147483647.0) {
      throw data_error(file, base + static_cast<uint64_t>(i) * item,
                       fmt::format("token {} is not an id of the vocabulary [0, {})", static_cast<double>(v),
                                   limit > 0 ? fmt::format("{}", limit) : std::string("2^31")),
                       "the dataset was tokenized with another tokenizer (check tokenizer_type / "
                       "tokenizer_model / vocab_size)");
    }
    out[i] = static_cast<int32_t>(v);
  }
}
}  // namespace

void IndexedDataset::read(int64_t seq, int64_t offset, int64_t length, int32_t* out,
                          int64_t vocab_limit) const {
  PRIMUS_CHECK(seq >= 0 && seq < num_sequences(), "sequence {} out of range [0, {}) in {}.bin", seq,
               num_sequences(), prefix_);
  PRIMUS_CHECK(offset >= 0 && length >= 0 && offset + length <= lengths_[seq],
               "tokens [{}, {}) of sequence {} (length {}) in {}.bin", offset, offset + length, seq,
               lengths_[seq], prefix_);
  const size_t item = token_dtype_size(dtype_);
  const uint64_t base = static_cast<uint64_t>(sequence_pointer(seq)) + static_cast<uint64_t>(offset) * item;
  std::vector<uint8_t> bytes(static_cast<size_t>(length) * item);
  bin_->read_at(base, bytes.data(), bytes.size());
  const uint8_t* src = bytes.data();
  const std::string& f = bin_->path();
  switch (dtype_) {
    case TokenDType::kU8:
      return convert<uint8_t>(src, length, out, vocab_limit, f, base, item);
    case TokenDType::kI8:
      return convert<int8_t>(src, length, out, vocab_limit, f, base, item);
    case TokenDType::kI16:
      return convert<int16_t>(src, length, out, vocab_limit, f, base, item);
    case TokenDType::kU16:
      return convert<uint16_t>(src, length, out, vocab_limit, f, base, item);
    case TokenDType::kI32:
      return convert<int32_t>(src, length, out, vocab_limit, f, base, item);
    case TokenDType::kI64:
      return convert<int64_t>(src, length, out, vocab_limit, f, base, item);
    case TokenDType::kF32:
      return convert<float>(src, length, out, vocab_limit, f, base, item);
    case TokenDType::kF64:
      return convert<double>(src, length, out, vocab_limit, f, base, item);
  }
}

std::vector<int32_t> IndexedDataset::sequence(int64_t seq) const {
  PRIMUS_CHECK(seq >= 0 && seq < num_sequences(), "sequence {} out of range [0, {})", seq, num_sequences());
  std::vector<int32_t> out(static_cast<size_t>(lengths_[seq]));
  read(seq, 0, lengths_[seq], out.data());
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Writer

namespace {
std::FILE* open_for_write(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr)
    throw Error(ErrorKind::kRuntime, fmt::format("cannot write {}: {}", path, std::strerror(errno)), {},
                "check that the output directory exists and is writable");
  return f;
}

void write_all(std::FILE* f, const void* data, size_t n, const std::string& path) {
  if (n > 0 && std::fwrite(data, 1, n, f) != n)
    throw Error(ErrorKind::kRuntime, fmt::format("write to {} failed: {}", path, std::strerror(errno)), {},
                "is the disk full?");
}
}  // namespace

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, TokenDType dtype)
    : prefix_(prefix), dtype_(dtype) {
  PRIMUS_CHECK(dtype == TokenDType::kU8 || dtype == TokenDType::kU16 || dtype == TokenDType::kI32 ||
                   dtype == TokenDType::kI64 || dtype == TokenDType::kI16 || dtype == TokenDType::kI8,
               "the writer stores integer token ids (got {})", token_dtype_name(dtype));
  const std::string tag = fmt::format(".tmp.{}", ::getpid());
  bin_tmp_ = prefix + ".bin" + tag;
  idx_tmp_ = prefix + ".idx" + tag;
  bin_ = open_for_write(bin_tmp_);
  std::setvbuf(bin_, nullptr, _IOFBF, 1 << 20);
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (bin_ != nullptr) std::fclose(bin_);
  if (!done_) {
    std::error_code ec;
    std::filesystem::remove(bin_tmp_, ec);
    std::filesystem::remove(idx_tmp_, ec);
  }
}

void IndexedDatasetWriter::add_sequence(std::span<const int32_t> ids) {
  PRIMUS_CHECK(!done_, "add_sequence after finalize ({})", prefix_);
  const size_t item = token_dtype_size(dtype_);
  int64_t max_id = 0;
  switch (dtype_) {
    case TokenDType::kU8:
      max_id = 255;
      break;
    case TokenDType::kI8:
      max_id = 127;
      break;
    case TokenDType::kI16:
      max_id = 32767;
      break;
    case TokenDType::kU16:
      max_id = 65535;
      break;
    default:
      max_id = INT32_MAX;
  }
  buf_.resize(ids.size() * item);
  uint8_t* dst = buf_.data();
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t v = ids[i];
    if (v < 0 || v > max_id)
      throw Error(ErrorKind::kRuntime,
                  fmt::format("{}.bin: token id {} does not fit the dataset's dtype {}", prefix_, v,
                              token_dtype_name(dtype_)),
                  {}, "the tokenizer's vocabulary is larger than the dtype chosen for it");
    switch (dtype_) {
      case TokenDType::kU8:
      case TokenDType::kI8:
        dst[i] = static_cast<uint8_t>(v);
        break;
      case TokenDType::kU16:
      case TokenDType::kI16: {
        const uint16_t u = static_cast<uint16_t>(v);
        std::memcpy(dst + 2 * i, &u, 2);
        break;
      }
      case TokenDType::kI32: {
        const int32_t u = static_cast<int32_t>(v);
        std::memcpy(dst + 4 * i, &u, 4);
        break;
      }
      default:
        std::memcpy(dst + 8 * i, &v, 8);
    }
  }
  write_all(bin_, buf_.data(), buf_.size(), bin_tmp_);
  PRIMUS_CHECK(ids.size() <= static_cast<size_t>(INT32_MAX),
               "sequence of {} tokens is too long for the format", ids.size());
  lengths_.push_back(static_cast<int32_t>(ids.size()));
  tokens_ += static_cast<int64_t>(ids.size());
  bin_bytes_ += static_cast<int64_t>(buf_.size());
}

void IndexedDatasetWriter::end_document() {
  doc_idx_.push_back(static_cast<int64_t>(lengths_.size()));
}

void IndexedDatasetWriter::add_document(std::span<const int32_t> ids) {
  add_sequence(ids);
  end_document();
}

void IndexedDatasetWriter::finalize() {
  PRIMUS_CHECK(!done_, "finalize called twice ({})", prefix_);
  if (std::fflush(bin_) != 0 || std::fclose(bin_) != 0) {
    bin_ = nullptr;
    throw Error(ErrorKind::kRuntime, fmt::format("write to {} failed: {}", bin_tmp_, std::strerror(errno)));
  }
  bin_ = nullptr;
  std::FILE* idx = open_for_write(idx_tmp_);
  std::vector<uint8_t> head(kIndexHeaderBytes);
  std::memcpy(head.data(), kIndexMagic, sizeof(kIndexMagic));
  const uint64_t version = 1, s = lengths_.size(), d = doc_idx_.size();
  std::memcpy(head.data() + 9, &version, 8);
  head[17] = static_cast<uint8_t>(dtype_);
  std::memcpy(head.data() + 18, &s, 8);
  std::memcpy(head.data() + 26, &d, 8);
  write_all(idx, head.data(), head.size(), idx_tmp_);
  write_all(idx, lengths_.data(), lengths_.size() * 4, idx_tmp_);
  // Pointers: the running byte offset of each sequence (Megatron's _sequence_pointers).
  std::vector<int64_t> ptr(lengths_.size());
  int64_t off = 0;
  const int64_t item = static_cast<int64_t>(token_dtype_size(dtype_));
  for (size_t i = 0; i < lengths_.size(); ++i) {
    ptr[i] = off;
    off += static_cast<int64_t>(lengths_[i]) * item;
  }
  write_all(idx, ptr.data(), ptr.size() * 8, idx_tmp_);
  write_all(idx, doc_idx_.data(), doc_idx_.size() * 8, idx_tmp_);
  if (std::fclose(idx) != 0)
    throw Error(ErrorKind::kRuntime, fmt::format("write to {} failed: {}", idx_tmp_, std::strerror(errno)));
  std::filesystem::rename(bin_tmp_, prefix_ + ".bin");
  std::filesystem::rename(idx_tmp_, prefix_ + ".idx");
  done_ = true;
}

}  // namespace primus
