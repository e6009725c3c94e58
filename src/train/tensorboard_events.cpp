#include "train/tensorboard_events.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "train/metrics.h"

namespace primus::tb {

namespace {

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

// Protobuf wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_tag(std::string& out, int field, int wire) {
  put_varint(out, (uint64_t(field) << 3) | wire);
}
template <typename T>
void put_fixed(std::string& out, T v) {  // little-endian hosts only (x86-64, aarch64)
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view s) {
  put_tag(out, field, 2);
  put_varint(out, s.size());
  out.append(s);
}

// Reads the fields of one message; anything malformed throws naming `where`.
class WireReader {
 public:
  WireReader(std::string_view s, const std::string& where) : s_(s), where_(where) {}
  bool done() const { return pos_ >= s_.size(); }
  // The next field's number and wire type.
  std::pair<int, int> tag() {
    const uint64_t t = varint();
    return {static_cast<int>(t >> 3), static_cast<int>(t & 7)};
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      need(1);
      const uint8_t b = static_cast<uint8_t>(s_[pos_++]);
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("varint longer than 10 bytes");
  }
  template <typename T>
  T fixed() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, s_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    need(n);
    std::string_view v = s_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  void skip(int wire) {
    switch (wire) {
      case 0:
        varint();
        return;
      case 1:
        fixed<uint64_t>();
        return;
      case 2:
        bytes();
        return;
      case 5:
        fixed<uint32_t>();
        return;
      default:
        fail(fmt::format("unsupported protobuf wire type {}", wire));
    }
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorKind::kRuntime,
                fmt::format("{}: malformed Event protobuf at byte {}: {}", where_, pos_, what));
  }

 private:
  void need(uint64_t n) const {
    if (n > s_.size() - pos_) fail(fmt::format("{} bytes needed, {} left", n, s_.size() - pos_));
  }
  std::string_view s_;
  size_t pos_ = 0;
  const std::string& where_;
};

std::pair<std::string, float> decode_value(std::string_view bytes, const std::string& where) {
  WireReader r(bytes, where);
  std::pair<std::string, float> v{"", 0.0f};
  while (!r.done()) {
    const auto [field, wire] = r.tag();
    if (field == 1 && wire == 2) {
      v.first = std::string(r.bytes());
    } else if (field == 2 && wire == 5) {
      v.second = r.fixed<float>();
    } else {
      r.skip(wire);
    }
  }
  return v;
}

uint64_t le_u64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint32_t le_u32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

double unix_seconds_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

uint32_t crc32c(std::string_view data) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = kCrcTable[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

std::string encode_file_version_event(double wall_time, const std::string& version) {
  std::string e;
  put_tag(e, 1, 1);
  put_fixed(e, wall_time);
  put_bytes(e, 3, version);
  return e;
}

std::string encode_scalar_event(double wall_time, int64_t step,
                                const std::vector<std::pair<std::string, float>>& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    put_bytes(v, 1, tag);
    put_tag(v, 2, 5);
    put_fixed(v, value);
    put_bytes(summary, 1, v);
  }
  std::string e;
  put_tag(e, 1, 1);
  put_fixed(e, wall_time);
  put_tag(e, 2, 0);
  put_varint(e, static_cast<uint64_t>(step));
  put_bytes(e, 5, summary);
  return e;
}

Event decode_event(std::string_view bytes, const std::string& where) {
  Event ev;
  WireReader r(bytes, where);
  while (!r.done()) {
    const auto [field, wire] = r.tag();
    if (field == 1 && wire == 1) {
      ev.wall_time = r.fixed<double>();
    } else if (field == 2 && wire == 0) {
      ev.step = static_cast<int64_t>(r.varint());
    } else if (field == 3 && wire == 2) {
      ev.file_version = std::string(r.bytes());
    } else if (field == 5 && wire == 2) {
      WireReader s(r.bytes(), where);
      while (!s.done()) {
        const auto [sf, sw] = s.tag();
        if (sf == 1 && sw == 2) {
          ev.values.push_back(decode_value(s.bytes(), where));
        } else {
          s.skip(sw);
        }
      }
    } else {
      r.skip(wire);
    }
  }
  return ev;
}

std::string frame_record(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  const uint64_t len = data.size();
  put_fixed(out, len);
  put_fixed(out, masked_crc32c(std::string_view(out.data(), 8)));
  out.append(data);
  put_fixed(out, masked_crc32c(data));
  return out;
}

EventFile read_event_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::kRuntime, fmt::format("cannot open TensorBoard event file {}", path));
  const std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EventFile f;
  size_t pos = 0;
  while (pos < s.size()) {
    if (s.size() - pos < 12) {
      f.torn_tail = true;
      break;
    }
    const uint64_t len = le_u64(s.data() + pos);
    if (masked_crc32c(std::string_view(s.data() + pos, 8)) != le_u32(s.data() + pos + 8))
      throw Error(ErrorKind::kRuntime,
                  fmt::format("{}: record at byte {}: the CRC of its length does not match", path, pos));
    if (s.size() - pos - 12 < len + 4) {
      f.torn_tail = true;
      break;
    }
    const std::string_view data(s.data() + pos + 12, len);
    if (masked_crc32c(data) != le_u32(s.data() + pos + 12 + len))
      throw Error(
          ErrorKind::kRuntime,
          fmt::format("{}: record at byte {}: the CRC of its {} data bytes does not match", path, pos, len));
    f.events.push_back(decode_event(data, fmt::format("{} (record at byte {})", path, pos)));
    pos += 12 + len + 4;
  }
  return f;
}

std::string event_file_name(int64_t unix_seconds, const std::string& hostname, long pid) {
  return fmt::format("events.out.tfevents.{}.{}.{}", unix_seconds, hostname, pid);
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw Error(ErrorKind::kRuntime,
                fmt::format("cannot create TensorBoard directory {}: {}", dir, ec.message()));
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const double now = unix_seconds_now();
  path_ = dir + "/" + event_file_name(static_cast<int64_t>(now), host, static_cast<long>(getpid()));
  // O_EXCL: never append to another run's file.
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw Error(ErrorKind::kRuntime,
                fmt::format("cannot create TensorBoard event file {}: {}", path_, std::strerror(errno)));
  add(encode_file_version_event(now));
  flush();
}

EventFileWriter::~EventFileWriter() {
  try {
    flush();
  } catch (const std::exception&) {
    // A failing disk at exit: the records written so far stay readable; nothing else to do here.
  }
  if (fd_ >= 0) ::close(fd_);
}

void EventFileWriter::add(std::string_view event_bytes) {
  pending_ += frame_record(event_bytes);
  ++pending_records_;
}

void EventFileWriter::flush() {
  if (pending_.empty()) return;
  write_whole(fd_, pending_, path_);
  pending_.clear();
  pending_records_ = 0;
}

}  // namespace primus::tb
