#pragma once
// safetensors files (reference.md §1.3): u64 little-endian header length N | N bytes of JSON | data buffer.
// The parser applies every check of the reference implementation before any tensor byte is touched: the
// header fits the file and the 100 MB cap, the JSON is an object (no duplicate keys), dtypes are known by
// name, end - begin = numel x itemsize (overflow-checked), and the ranges tile the data buffer exactly (no
// gaps, no overlaps, nothing after the last tensor).
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/file_io.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace primus::ckpt {

inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;  // the reference implementation's cap

struct StEntry {
  std::string name;
  std::string dtype;  // safetensors name: F32, BF16, ...
  Shape shape;
  uint64_t begin = 0, end = 0;  // relative to the start of the data buffer
  uint64_t bytes() const { return end - begin; }
};

struct StHeader {
  uint64_t header_bytes = 0;  // N
  uint64_t file_bytes = 0;
  uint64_t data_start() const { return 8 + header_bytes; }
  std::vector<StEntry> entries;  // sorted by data offset
  std::map<std::string, std::string> metadata;
  const StEntry* find(const std::string& name) const;
};

// Item size of a safetensors dtype name; 0 when the name is unknown.
size_t st_dtype_size(const std::string& name);
// The matching primus DType; false for dtypes primus tensors cannot hold (I8, BOOL, F8_E8M0, ...).
bool st_dtype_to_primus(const std::string& name, DType* out);
std::string st_dtype_name(DType t);

// Validates a header given its JSON bytes. `file_bytes` is the size of the whole file. Throws primus::Error
// whose message starts with `what` (usually the file path) and says which rule failed.
StHeader parse_safetensors_header(const std::string& json, uint64_t file_bytes, const std::string& what);
// Reads and validates the header of an open file.
StHeader read_safetensors_header(const FileReader& f);

// Reads one tensor (any dtype) into a new CPU tensor of the matching primus dtype.
Tensor read_st_tensor(const FileReader& f, const StHeader& h, const StEntry& e);

// Builds a safetensors file from borrowed tensor data (which must stay valid until write() returns).
class SafetensorsWriter {
 public:
  void add(std::string name, DType dtype, Shape shape, const void* data);
  // Adds raw bytes under a safetensors dtype name (used to copy tensors primus has no DType for).
  void add_raw(std::string name, std::string st_dtype, Shape shape, const void* data);
  // Adds a tensor made only when write() reaches it (and dropped right after), so that a file larger than
  // memory can be written one tensor at a time (`convert hf-to-primus` of a large model). `produce` must
  // return a host tensor of exactly this dtype and shape.
  void add_lazy(std::string name, DType dtype, Shape shape, std::function<Tensor()> produce);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  // Header JSON plus data size (the file size).
  uint64_t file_bytes() const;
  // Writes durably (fsync). `after_tensor(written, total)` runs after each tensor's bytes (crash-test hook).
  FileDigest write(const std::string& path,
                   const std::function<void(uint64_t, uint64_t)>& after_tensor = {}) const;
  size_t size() const { return items_.size(); }

 private:
  std::string header_json() const;
  struct Item {
    std::string name, dtype;
    Shape shape;
    const void* data;
    uint64_t bytes;
    std::function<Tensor()> produce;  // lazy tensors: data is null
  };
  std::vector<Item> items_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace primus::ckpt
