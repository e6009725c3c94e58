#pragma once
// Megatron-LM's indexed dataset, byte for byte: `<prefix>.bin` holds the tokens of every sequence back to
// back, `<prefix>.idx` the header (magic "MMIDIDX\0\0", version 1, dtype code), the sequence lengths, the
// byte pointers of each sequence into .bin and the document boundaries (reference.md §1.1). The .idx is read
// whole and validated when opened, against the .bin's size: every defect (truncation, wrong magic or version,
// unknown dtype, a pointer outside .bin, bad document indices) is a primus::Error that names the file and the
// byte offset, never a crash or garbage tokens later. Tokens are read from .bin with pread, so a .bin that is
// truncated or rewritten while a job reads it is an error naming the file, not SIGBUS.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace primus {

// dtype codes of the .idx header (Megatron's DType enum).
enum class TokenDType : uint8_t {
  kU8 = 1,
  kI8 = 2,
  kI16 = 3,
  kI32 = 4,
  kI64 = 5,
  kF64 = 6,
  kF32 = 7,
  kU16 = 8,
};
bool is_valid_token_dtype_code(uint8_t code);
size_t token_dtype_size(TokenDType t);
const char* token_dtype_name(TokenDType t);  // numpy's names: uint16, int32, ...
// The writer's choice: uint16 when the vocabulary has fewer than 65500 ids, else int32 (Megatron's
// DType.optimal_dtype).
TokenDType optimal_token_dtype(int64_t vocab_size);

inline constexpr char kIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr size_t kIndexHeaderBytes = 34;

// A file opened for positioned reads. The .bin is read with pread, not memory-mapped: a mapped file that
// is truncated under a running job (a dataset rewritten or a network mount cut short) turns the next access
// into SIGBUS; a read instead comes back short, and read_at names the file and what happened to it.
class DataFile {
 public:
  explicit DataFile(const std::string& path);
  ~DataFile();
  DataFile(const DataFile&) = delete;
  DataFile& operator=(const DataFile&) = delete;
  size_t size() const { return size_; }  // at open
  const std::string& path() const { return path_; }
  // Reads exactly `bytes` at `offset`; throws naming the file when it has shrunk, changed or failed since
  // open.
  void read_at(uint64_t offset, void* dst, size_t bytes) const;

 private:
  std::string path_;
  int fd_ = -1;
  size_t size_ = 0;
  int64_t mtime_ns_ = 0;
};

class IndexedDataset {
 public:
  // Opens `<prefix>.idx` and `<prefix>.bin` and validates them (see the header comment).
  explicit IndexedDataset(const std::string& prefix);

  const std::string& prefix() const { return prefix_; }
  TokenDType dtype() const { return dtype_; }
  int64_t num_sequences() const { return static_cast<int64_t>(lengths_.size()); }
  // Documents: document_indices() has num_documents() + 1 entries, the first 0 and the last num_sequences().
  int64_t num_documents() const { return static_cast<int64_t>(doc_idx_.size()) - 1; }
  const std::vector<int32_t>& sequence_lengths() const { return lengths_; }
  const std::vector<int64_t>& document_indices() const { return doc_idx_; }
  int64_t sequence_pointer(int64_t i) const;  // byte offset of sequence i in .bin
  bool multimodal() const { return multimodal_; }
  int64_t total_tokens() const { return total_tokens_; }
  size_t idx_bytes() const { return idx_bytes_; }
  size_t bin_bytes() const { return bin_->size(); }

  // Copies `length` tokens of sequence `seq` starting at token `offset` into `out`, converted to int32.
  // Throws naming the .bin file and byte offset when a token is negative or >= `vocab_limit` (if > 0) or not
  // an integer (float dtypes).
  void read(int64_t seq, int64_t offset, int64_t length, int32_t* out, int64_t vocab_limit = 0) const;
  std::vector<int32_t> sequence(int64_t seq) const;

 private:
  std::string prefix_;
  std::unique_ptr<DataFile> bin_;
  size_t idx_bytes_ = 0;
  TokenDType dtype_ = TokenDType::kU16;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> pointers_;
  std::vector<int64_t> doc_idx_;
  int64_t total_tokens_ = 0;
  bool multimodal_ = false;
};

// Writes `<prefix>.bin` and `<prefix>.idx` as Megatron's IndexedDatasetBuilder does. Both are written to
// temporary names and renamed by finalize(), so a reader never sees a half-written dataset.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(const std::string& prefix, TokenDType dtype);
  ~IndexedDatasetWriter();  // an unfinalized writer removes its temporary files
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // One sequence (a document in text pretraining, a sentence with --split-sentences).
  void add_sequence(std::span<const int32_t> ids);
  // Closes the current document (Megatron appends the running sequence count to document_indices).
  void end_document();
  // add_sequence + end_document.
  void add_document(std::span<const int32_t> ids);
  void finalize();

  int64_t num_sequences() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t num_tokens() const { return tokens_; }
  int64_t bin_bytes() const { return bin_bytes_; }

 private:
  std::string prefix_;
  TokenDType dtype_;
  std::FILE* bin_ = nullptr;
  std::string bin_tmp_, idx_tmp_;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> doc_idx_{0};
  std::vector<uint8_t> buf_;
  int64_t tokens_ = 0;
  int64_t bin_bytes_ = 0;
  bool done_ = false;
};

}  // namespace primus
