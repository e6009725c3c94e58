// Fuzzes safetensors: the header (length prefix, JSON, dtypes, shapes, offsets tiling the buffer) and the
// tensor index it yields, then reads every tensor primus can hold. Any input must end in a header whose
// tensors all lie inside the file, or in a primus::Error; never a crash or a read outside the file.
#include <cstdint>
#include <string>

#include "checkpoint/file_io.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace primus::ckpt;
  const std::string path = primus::fuzz::write_file("model.safetensors", data, size);
  try {
    FileReader f(path);
    const StHeader h = read_safetensors_header(f);
    if (h.data_start() + (h.entries.empty() ? 0 : h.entries.back().end) != f.size()) __builtin_trap();
    for (const StEntry& e : h.entries) {
      if (h.find(e.name) == nullptr) __builtin_trap();
      primus::DType t;
      if (st_dtype_to_primus(e.dtype, &t)) {
        primus::Tensor x = read_st_tensor(f, h, e);
        if (x.nbytes() != e.bytes()) __builtin_trap();
      }
    }
  } catch (const primus::Error&) {
  }
  return 0;
}
