// Fuzzes the checkpoint manifest (manifest.json). The self-hash (manifest_xxh3 over the text with the field
// zeroed) would stop almost every mutation at the first check, so each input is parsed twice: as it is (the
// hash check) and with its hash field recomputed (the structure checks behind it). Any input must end in a
// Manifest or a primus::Error naming the problem.
#include <cstdint>
#include <string>

#include "checkpoint/file_io.h"
#include "checkpoint/manifest.h"
#include "core/error.h"

namespace {
// Mirrors manifest.cpp: the 16 hex digits after the last `"manifest_xxh3": "`.
std::string with_valid_hash(std::string text) {
  const std::string key = "\"manifest_xxh3\": \"";
  const size_t p = text.rfind(key);
  if (p == std::string::npos || p + key.size() + 16 > text.size()) return text;
  const size_t start = p + key.size();
  text.replace(start, 16, "0000000000000000");
  const std::string digest = primus::ckpt::hex64(primus::ckpt::xxh3_bytes(text.data(), text.size()));
  text.replace(start, 16, digest);
  return text;
}

void parse(const std::string& text) {
  try {
    const primus::ckpt::Manifest m = primus::ckpt::parse_manifest(text, "fuzz/manifest.json");
    for (const auto& [group, entries] : m.tensors)
      for (const auto& [name, e] : entries)
        for (const auto& s : e.shards)
          if (m.file(s.file) == nullptr) __builtin_trap();
    // What parses must survive a round trip: the writer's text parses back to the same manifest.
    const primus::ckpt::Manifest again =
        primus::ckpt::parse_manifest(primus::ckpt::manifest_to_text(m), "fuzz/roundtrip");
    if (again.files.size() != m.files.size() || again.tensors.size() != m.tensors.size()) __builtin_trap();
  } catch (const primus::Error&) {
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  parse(text);
  parse(with_valid_hash(text));
  return 0;
}
