#pragma once
// Helpers shared by the data tests: a scratch directory and small Megatron datasets written with our writer.
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/indexed_dataset.h"

namespace primus::data_test {

// A scratch directory, removed with its contents at the end of the test.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "primus-data-test-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    root_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string path(const std::string& rel = "") const { return (root_ / rel).string(); }

 private:
  std::filesystem::path root_;
};

// Writes a dataset of `docs` (one sequence per document) and returns its prefix.
inline std::string write_dataset(const std::string& prefix, const std::vector<std::vector<int32_t>>& docs,
                                 TokenDType dtype = TokenDType::kU16) {
  IndexedDatasetWriter w(prefix, dtype);
  for (const auto& d : docs) w.add_document(d);
  w.finalize();
  return prefix;
}

// `n` documents of pseudo-random lengths in [lo, hi] whose tokens encode (document, position), so a test can
// tell where every token of a sample came from: token = (doc * 1000 + pos) % modulus.
inline std::vector<std::vector<int32_t>> numbered_docs(int n, int lo, int hi, int modulus = 60000) {
  std::vector<std::vector<int32_t>> docs;
  uint32_t x = 12345;
  for (int d = 0; d < n; ++d) {
    x = x * 1103515245u + 12345u;
    const int len = lo + static_cast<int>((x >> 8) % static_cast<uint32_t>(hi - lo + 1));
    std::vector<int32_t> doc(static_cast<size_t>(len));
    for (int i = 0; i < len; ++i) doc[static_cast<size_t>(i)] = (d * 1000 + i) % modulus;
    docs.push_back(doc);
  }
  return docs;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// The message of the primus::Error `fn` throws ("" when it throws nothing).
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace primus::data_test
