#include "checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace primus::ckpt {

namespace {

struct DTypeRow {
  const char* name;
  size_t size;
  bool has_primus;
  DType primus;
};

// Every dtype name current safetensors writers emit; F4/F6 micro-floats (sub-byte) are rejected by name.
constexpr DTypeRow kDTypes[] = {
    {"F64", 8, true, DType::kF64},         {"F32", 4, true, DType::kF32},
    {"F16", 2, true, DType::kF16},         {"BF16", 2, true, DType::kBF16},
    {"I64", 8, true, DType::kI64},         {"I32", 4, true, DType::kI32},
    {"I16", 2, false, DType::kF32},        {"I8", 1, false, DType::kF32},
    {"U8", 1, true, DType::kU8},           {"U16", 2, true, DType::kU16},
    {"U32", 4, false, DType::kF32},        {"U64", 8, false, DType::kF32},
    {"BOOL", 1, false, DType::kF32},       {"F8_E4M3", 1, true, DType::kFP8E4M3},
    {"F8_E5M2", 1, true, DType::kFP8E5M2}, {"F8_E8M0", 1, false, DType::kF32},
};

[[noreturn]] void bad(const std::string& what, const std::string& msg) {
  throw Error(ErrorKind::kRuntime, fmt::format("{}: invalid safetensors file: {}", what, msg));
}

uint64_t read_u64_le(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

const StEntry* StHeader::find(const std::string& name) const {
  for (const StEntry& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

size_t st_dtype_size(const std::string& name) {
  for (const DTypeRow& r : kDTypes)
    if (name == r.name) return r.size;
  return 0;
}

bool st_dtype_to_primus(const std::string& name, DType* out) {
  for (const DTypeRow& r : kDTypes) {
    if (name == r.name && r.has_primus) {
      *out = r.primus;
      return true;
    }
  }
  return false;
}

std::string st_dtype_name(DType t) {
  for (const DTypeRow& r : kDTypes)
    if (r.has_primus && r.primus == t) return r.name;
  PRIMUS_FAIL("dtype {} has no safetensors name", dtype_name(t));
}

StHeader parse_safetensors_header(const std::string& json_text, uint64_t file_bytes,
                                  const std::string& what) {
  StHeader h;
  h.header_bytes = json_text.size();
  h.file_bytes = file_bytes;
  if (h.header_bytes > kMaxSafetensorsHeader)
    bad(what,
        fmt::format("header of {} bytes exceeds the {} byte cap", h.header_bytes, kMaxSafetensorsHeader));
  if (8 + h.header_bytes > file_bytes)
    bad(what, fmt::format("header length {} + 8 exceeds the file size {}", h.header_bytes, file_bytes));
  const uint64_t buffer_bytes = file_bytes - 8 - h.header_bytes;

  // Duplicate top-level keys would silently shadow each other in a JSON object: reject them.
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    if (depth == 1 && ev == nlohmann::json::parse_event_t::key) {
      const std::string k = parsed.get<std::string>();
      if (!seen.insert(k).second && duplicate.empty()) duplicate = k;
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text, on_event);
  } catch (const nlohmann::json::exception& e) {
    bad(what, fmt::format("header is not valid JSON ({})", e.what()));
  }
  if (!j.is_object()) bad(what, "header JSON is not an object");
  if (!duplicate.empty()) bad(what, fmt::format("tensor '{}' appears twice in the header", duplicate));

  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) bad(what, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          bad(what, fmt::format("__metadata__ value '{}' is not a string", m.key()));
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) bad(what, fmt::format("entry '{}' is not an object", name));
    for (auto f = v.begin(); f != v.end(); ++f)
      if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets")
        bad(what, fmt::format("entry '{}' has an unknown field '{}'", name, f.key()));
    if (!v.contains("dtype") || !v["dtype"].is_string())
      bad(what, fmt::format("entry '{}' has no dtype string", name));
    if (!v.contains("shape") || !v["shape"].is_array())
      bad(what, fmt::format("entry '{}' has no shape list", name));
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      bad(what, fmt::format("entry '{}' needs data_offsets [begin, end]", name));
    StEntry e;
    e.name = name;
    e.dtype = v["dtype"].get<std::string>();
    const size_t item = st_dtype_size(e.dtype);
    if (item == 0) bad(what, fmt::format("entry '{}' has unknown dtype '{}'", name, e.dtype));
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned())
        bad(what, fmt::format("entry '{}' has a shape that is not [uint, ...]", name));
      const uint64_t dim = d.get<uint64_t>();
      if (dim > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, dim, &numel))
        bad(what, fmt::format("entry '{}': element count overflows", name));
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(item), &nbytes))
      bad(what, fmt::format("entry '{}': byte size overflows", name));
    for (const auto& o : v["data_offsets"])
      if (!o.is_number_unsigned()) bad(what, fmt::format("entry '{}' has non-integer data_offsets", name));
    e.begin = v["data_offsets"][0].get<uint64_t>();
    e.end = v["data_offsets"][1].get<uint64_t>();
    if (e.end < e.begin)
      bad(what, fmt::format("entry '{}' ends ({}) before it begins ({})", name, e.end, e.begin));
    if (e.end - e.begin != nbytes)
      bad(what, fmt::format("entry '{}' spans {} bytes but {} {} is {} bytes", name, e.end - e.begin, e.dtype,
                            shape_str(e.shape), nbytes));
    if (e.end > buffer_bytes)
      bad(what, fmt::format("entry '{}' bytes [{}, {}) lie beyond the data buffer ({} bytes)", name, e.begin,
                            e.end, buffer_bytes));
    h.entries.push_back(std::move(e));
  }
  std::sort(h.entries.begin(), h.entries.end(), [](const StEntry& a, const StEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // The ranges must tile the buffer: each begins where the previous ended, the last ends at the buffer's end.
  uint64_t pos = 0;
  for (const StEntry& e : h.entries) {
    if (e.begin != pos)
      bad(what, fmt::format("entry '{}' begins at {} but the previous tensor ends at {} ({})", e.name,
                            e.begin, pos, e.begin > pos ? "a gap" : "an overlap"));
    pos = e.end;
  }
  if (pos != buffer_bytes)
    bad(what, fmt::format("tensors cover {} bytes of a {} byte data buffer ({} trailing bytes)", pos,
                          buffer_bytes, buffer_bytes - pos));
  return h;
}

StHeader read_safetensors_header(const FileReader& f) {
  if (f.size() < 8) bad(f.path(), fmt::format("{} bytes is shorter than the 8-byte length prefix", f.size()));
  unsigned char len[8];
  f.read_at(0, len, 8);
  const uint64_t n = read_u64_le(len);
  if (n > kMaxSafetensorsHeader)
    bad(f.path(), fmt::format("header length {} exceeds the {} byte cap", n, kMaxSafetensorsHeader));
  if (n > f.size() - 8)
    bad(f.path(), fmt::format("header length {} + 8 exceeds the file size {}", n, f.size()));
  std::string json(static_cast<size_t>(n), '\0');
  if (n > 0) f.read_at(8, json.data(), json.size());
  return parse_safetensors_header(json, f.size(), f.path());
}

Tensor read_st_tensor(const FileReader& f, const StHeader& h, const StEntry& e) {
  DType t;
  if (!st_dtype_to_primus(e.dtype, &t))
    throw Error(ErrorKind::kRuntime, fmt::format("{}: tensor '{}' has dtype {}, which primus cannot hold",
                                                 f.path(), e.name, e.dtype));
  Tensor out = Tensor::empty(e.shape, t);
  if (e.bytes() > 0) f.read_at(h.data_start() + e.begin, out.data_ptr(), e.bytes());
  return out;
}

void SafetensorsWriter::add(std::string name, DType dtype, Shape shape, const void* data) {
  add_raw(std::move(name), st_dtype_name(dtype), std::move(shape), data);
}

void SafetensorsWriter::add_raw(std::string name, std::string st_dtype, Shape shape, const void* data) {
  const size_t item = st_dtype_size(st_dtype);
  PRIMUS_CHECK(item > 0, "unknown safetensors dtype {}", st_dtype);
  PRIMUS_CHECK(name != "__metadata__", "a tensor cannot be named __metadata__");
  for (const Item& it : items_) PRIMUS_CHECK(it.name != name, "tensor '{}' added twice", name);
  const uint64_t bytes = static_cast<uint64_t>(shape_numel(shape)) * item;
  items_.push_back(Item{std::move(name), std::move(st_dtype), std::move(shape), data, bytes, {}});
}

void SafetensorsWriter::add_lazy(std::string name, DType dtype, Shape shape,
                                 std::function<Tensor()> produce) {
  PRIMUS_CHECK(produce, "lazy tensor '{}' needs a producer", name);
  add_raw(std::move(name), st_dtype_name(dtype), std::move(shape), nullptr);
  items_.back().produce = std::move(produce);
}

std::string SafetensorsWriter::header_json() const {
  nlohmann::json j = nlohmann::json::object();
  uint64_t pos = 0;
  for (const Item& it : items_) {
    j[it.name] = {{"dtype", it.dtype}, {"shape", it.shape}, {"data_offsets", {pos, pos + it.bytes}}};
    pos += it.bytes;
  }
  if (!metadata_.empty()) j["__metadata__"] = metadata_;
  std::string text = j.dump();
  // Pad with spaces so the data buffer starts 8-byte aligned, as the reference writer does.
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  return text;
}

uint64_t SafetensorsWriter::file_bytes() const {
  uint64_t n = 8 + header_json().size();
  for (const Item& it : items_) n += it.bytes;
  return n;
}

FileDigest SafetensorsWriter::write(const std::string& path,
                                    const std::function<void(uint64_t, uint64_t)>& after_tensor) const {
  const std::string header = header_json();
  uint64_t total = 8 + header.size();
  for (const Item& it : items_) total += it.bytes;
  DurableFile f(path);
  unsigned char len[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  f.append(len, 8);
  f.append(header.data(), header.size());
  for (const Item& it : items_) {
    if (it.produce) {
      const Tensor t = it.produce();
      PRIMUS_CHECK(t.device().is_cpu() && t.is_contiguous() && st_dtype_name(t.dtype()) == it.dtype &&
                       t.shape() == it.shape,
                   "lazy tensor '{}': produced {}, expected {} {}", it.name, t.describe(), it.dtype,
                   shape_str(it.shape));
      f.append(t.data_ptr(), static_cast<size_t>(it.bytes));
    } else {
      f.append(it.data, static_cast<size_t>(it.bytes));
    }
    if (after_tensor) after_tensor(f.written(), total);
  }
  return f.finish();
}

}  // namespace primus::ckpt
