#include "checkpoint/manifest.h"

#include <cstdint>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace primus::ckpt {

namespace {

constexpr const char* kHashKey = "\"manifest_xxh3\": \"";
constexpr const char* kZeroHash = "0000000000000000";

[[noreturn]] void bad_manifest(const std::string& what, const std::string& msg) {
  throw Error(ErrorKind::kRuntime, fmt::format("{}: {}", what, msg));
}

// Shapes and offsets are element counts. Each must fit, with the product of its entries (and so any offset +
// extent the loader adds up), well inside int64: a damaged manifest must not overflow the block copy's
// arithmetic (signed overflow), only fail here.
constexpr uint64_t kMaxElements = uint64_t(1) << 61;

Shape shape_of(const nlohmann::json& j, const std::string& what, const std::string& field) {
  if (!j.is_array()) bad_manifest(what, field + " is not a list");
  Shape s;
  uint64_t product = 1;
  for (const auto& d : j) {
    if (!d.is_number_unsigned()) bad_manifest(what, field + " holds a non-integer");
    const uint64_t v = d.get<uint64_t>();
    if (v > kMaxElements || (v > 0 && __builtin_mul_overflow(product, v, &product)) ||
        (v > 0 && product > kMaxElements))
      bad_manifest(what, fmt::format("{} holds {}: more elements than any tensor can have", field, d.dump()));
    s.push_back(static_cast<int64_t>(v));
  }
  return s;
}

// nlohmann's get<integer>() casts a JSON float to the integer type, which is undefined behaviour when it is
// out of range (fuzzing found `"bytes": 1.3e63`): every integer field must be a JSON integer within range.
uint64_t unsigned_field(const nlohmann::json& j, const char* key, const std::string& what) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_unsigned())
    bad_manifest(what, fmt::format("{} is {}, not a non-negative integer", key, v.dump()));
  return v.get<uint64_t>();
}

int64_t signed_field(const nlohmann::json& j, const char* key, int64_t lo, int64_t hi,
                     const std::string& what) {
  const nlohmann::json& v = j.at(key);
  const bool in_range = v.is_number_unsigned()  ? v.get<uint64_t>() <= static_cast<uint64_t>(hi)
                        : v.is_number_integer() ? v.get<int64_t>() >= lo && v.get<int64_t>() <= hi
                                                : false;
  if (!in_range)
    bad_manifest(what, fmt::format("{} is {}, not an integer in [{}, {}]", key, v.dump(), lo, hi));
  return v.get<int64_t>();
}

// Position of the 16 hex digits of the self-hash, or npos.
size_t hash_position(const std::string& text) {
  const size_t p = text.rfind(kHashKey);
  if (p == std::string::npos) return p;
  const size_t start = p + std::char_traits<char>::length(kHashKey);
  return start + 16 <= text.size() ? start : std::string::npos;
}

}  // namespace

const FileRecord* Manifest::file(const std::string& name) const {
  for (const FileRecord& f : files)
    if (f.name == name) return &f;
  return nullptr;
}

FileRecord file_record(const std::string& name, const FileDigest& d) {
  return FileRecord{name, d.bytes, d.xxh3, d.chunks};
}

std::string manifest_to_text(const Manifest& m) {
  nlohmann::ordered_json j;
  j["format"] = kCheckpointFormat;
  j["version"] = m.version;
  j["iteration"] = m.iteration;
  j["world_size"] = m.world_size;
  j["created"] = m.created;
  j["chunk_bytes"] = m.chunk_bytes;
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (const FileRecord& f : m.files) {
    nlohmann::ordered_json r;
    r["name"] = f.name;
    r["bytes"] = f.bytes;
    r["xxh3"] = hex64(f.xxh3);
    nlohmann::ordered_json chunks = nlohmann::ordered_json::array();
    for (uint64_t c : f.chunks) chunks.push_back(hex64(c));
    r["chunks"] = chunks;
    files.push_back(r);
  }
  j["files"] = files;
  nlohmann::ordered_json tensors = nlohmann::ordered_json::object();
  for (const auto& [group, entries] : m.tensors) {
    nlohmann::ordered_json g = nlohmann::ordered_json::object();
    for (const auto& [name, e] : entries) {
      nlohmann::ordered_json t;
      t["dtype"] = e.dtype;
      t["global_shape"] = e.global_shape;
      nlohmann::ordered_json shards = nlohmann::ordered_json::array();
      for (const ShardRef& s : e.shards)
        shards.push_back({{"file", s.file}, {"name", s.name}, {"offset", s.offset}, {"shape", s.shape}});
      t["shards"] = shards;
      g[name] = t;
    }
    tensors[group] = g;
  }
  j["tensors"] = tensors;
  j["manifest_xxh3"] = kZeroHash;  // last, so the digits sit at a known place
  std::string text = j.dump(1) + "\n";
  const size_t pos = hash_position(text);
  PRIMUS_CHECK(pos != std::string::npos, "manifest self-hash field not found");
  const std::string digest = hex64(xxh3_bytes(text.data(), text.size()));
  text.replace(pos, 16, digest);
  return text;
}

Manifest parse_manifest(const std::string& text_in, const std::string& what) {
  std::string text = text_in;
  const size_t pos = hash_position(text);
  if (pos == std::string::npos) bad_manifest(what, "no manifest_xxh3 field (truncated or damaged manifest)");
  uint64_t stored = 0;
  if (!parse_hex64(text.substr(pos, 16), &stored))
    bad_manifest(what, fmt::format("manifest_xxh3 '{}' is not 16 hex digits", text.substr(pos, 16)));
  text.replace(pos, 16, kZeroHash);
  const uint64_t actual = xxh3_bytes(text.data(), text.size());
  if (actual != stored)
    bad_manifest(what,
                 fmt::format("manifest checksum mismatch over bytes [0, {}): expected xxh3 {}, actual {}",
                             text.size(), hex64(stored), hex64(actual)));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text_in);
  } catch (const nlohmann::json::exception& e) {
    bad_manifest(what, fmt::format("manifest is not valid JSON ({})", e.what()));
  }
  try {
    if (j.value("format", "") != kCheckpointFormat)
      bad_manifest(what, "not a primus-cpp-checkpoint manifest");
    Manifest m;
    m.version = static_cast<int>(signed_field(j, "version", 0, INT32_MAX, what));
    if (m.version != kCheckpointVersion)
      bad_manifest(what, fmt::format("checkpoint format version {} (this primus reads {})", m.version,
                                     kCheckpointVersion));
    m.iteration = signed_field(j, "iteration", 0, INT64_MAX, what);
    m.world_size = static_cast<int>(signed_field(j, "world_size", 1, INT32_MAX, what));
    m.created = j.value("created", "");
    m.chunk_bytes = unsigned_field(j, "chunk_bytes", what);
    if (m.chunk_bytes == 0) bad_manifest(what, "chunk_bytes is 0");
    for (const auto& f : j.at("files")) {
      FileRecord r;
      r.name = f.at("name").get<std::string>();
      if (r.name.empty() || r.name.find('/') != std::string::npos || r.name[0] == '.')
        bad_manifest(what, fmt::format("file name '{}' is not a plain file name", r.name));
      r.bytes = unsigned_field(f, "bytes", what);
      if (!parse_hex64(f.at("xxh3").get<std::string>(), &r.xxh3)) bad_manifest(what, "bad xxh3 of " + r.name);
      for (const auto& c : f.at("chunks")) {
        uint64_t v = 0;
        if (!parse_hex64(c.get<std::string>(), &v)) bad_manifest(what, "bad chunk hash of " + r.name);
        r.chunks.push_back(v);
      }
      const uint64_t want_chunks = r.bytes == 0 ? 1 : (r.bytes + m.chunk_bytes - 1) / m.chunk_bytes;
      if (r.chunks.size() != want_chunks)
        bad_manifest(what, fmt::format("{} lists {} chunk hashes for {} bytes (expected {})", r.name,
                                       r.chunks.size(), r.bytes, want_chunks));
      m.files.push_back(std::move(r));
    }
    for (auto g = j.at("tensors").begin(); g != j.at("tensors").end(); ++g) {
      for (auto t = g.value().begin(); t != g.value().end(); ++t) {
        TensorIndexEntry e;
        e.dtype = t.value().at("dtype").get<std::string>();
        e.global_shape = shape_of(t.value().at("global_shape"), what, t.key() + ".global_shape");
        for (const auto& s : t.value().at("shards")) {
          ShardRef r;
          r.file = s.at("file").get<std::string>();
          r.name = s.at("name").get<std::string>();
          r.offset = shape_of(s.at("offset"), what, t.key() + ".offset");
          r.shape = shape_of(s.at("shape"), what, t.key() + ".shape");
          if (m.file(r.file) == nullptr)
            bad_manifest(what, fmt::format("tensor {} refers to {}, which the manifest does not list",
                                           t.key(), r.file));
          e.shards.push_back(std::move(r));
        }
        m.tensors[g.key()][t.key()] = std::move(e);
      }
    }
    return m;
  } catch (const nlohmann::json::exception& e) {
    bad_manifest(what, fmt::format("manifest is malformed ({})", e.what()));
  }
}

}  // namespace primus::ckpt
