#pragma once
// Minimal .npy (format 1.0) reading and writing for the index caches, which Megatron also stores as .npy: the
// files open in numpy as they are.
#include <cstdint>
#include <string>
#include <vector>

namespace primus {

struct NpyArray {
  std::string descr;           // "<i4", "<i8", "<u4", "<i2"
  std::vector<int64_t> shape;  // C order
  std::vector<uint8_t> data;
  int64_t count() const;
};

// Writes atomically (to a temporary name, then rename).
void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes);
// Throws primus::Error (naming the file) when the file is not a little-endian, C-order .npy of a plain dtype.
NpyArray read_npy(const std::string& path);

// Converts an integer array to int64 values (descr <i2/<i4/<i8/<u4/<u8).
std::vector<int64_t> npy_as_int64(const NpyArray& a, const std::string& path);

}  // namespace primus
