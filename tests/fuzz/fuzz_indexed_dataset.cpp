// Fuzzes Megatron's .idx: the input is `<prefix>.idx`; `<prefix>.bin` is a fixed 4 KiB file of token ids, so
// every pointer the index holds is checked against a real .bin. Opening must end in a dataset whose every
// sequence reads inside the .bin, or in a primus::Error naming the file; never a crash or a read outside.
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "fuzz_util.h"

namespace {
constexpr size_t kBinBytes = 4096;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool bin_written = [] {
    std::vector<uint8_t> bin(kBinBytes);
    for (size_t i = 0; i < bin.size(); ++i) bin[i] = static_cast<uint8_t>(i % 2 == 0 ? i / 2 % 251 : 0);
    primus::fuzz::write_file("data.bin", bin.data(), bin.size());
    return true;
  }();
  (void)bin_written;
  primus::fuzz::write_file("data.idx", data, size);
  const std::string prefix = (primus::fuzz::scratch_dir() / "data").string();
  try {
    primus::IndexedDataset ds(prefix);
    const std::vector<int64_t>& docs = ds.document_indices();
    if (docs.front() != 0 || docs.back() != ds.num_sequences()) __builtin_trap();
    std::vector<int32_t> out;
    for (int64_t s = 0; s < ds.num_sequences(); ++s) {
      const int64_t len = ds.sequence_lengths()[static_cast<size_t>(s)];
      out.resize(static_cast<size_t>(len));
      try {
        ds.read(s, 0, len, out.data(), /*vocab_limit=*/200);
      } catch (const primus::Error&) {
        // A token outside the vocabulary is a named error; the next sequence must still read.
      }
    }
  } catch (const primus::Error&) {
  }
  return 0;
}
