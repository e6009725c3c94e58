#include "comm/store_protocol.h"

#include <fmt/format.h>

namespace primus::comm {

namespace {

uint64_t read_le(std::string_view bytes, size_t offset, size_t width) {
  uint64_t v = 0;
  for (size_t i = 0; i < width; ++i) v |= uint64_t{static_cast<uint8_t>(bytes[offset + i])} << (8 * i);
  return v;
}

void append_le(std::string& out, uint64_t v, size_t width) {
  for (size_t i = 0; i < width; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

const char* cmd_name(StoreCmd c) {
  switch (c) {
    case StoreCmd::kSet:
      return "set";
    case StoreCmd::kGet:
      return "get";
    case StoreCmd::kAdd:
      return "add";
    case StoreCmd::kCheck:
      return "check";
  }
  return "?";
}

// Keys in messages: printable ASCII kept, anything else as \xNN, at most 64 bytes shown.
std::string printable(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 64; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\')
      out.push_back(static_cast<char>(c));
    else
      out += fmt::format("\\x{:02x}", c);
  }
  if (s.size() > 64) out += "...";
  return out;
}

StoreParse bad(std::string message) {
  StoreParse p;
  p.status = StoreParse::kBad;
  p.error = std::move(message);
  return p;
}

}  // namespace

StoreParse parse_store_request(std::string_view bytes, const StoreLimits& limits) {
  if (bytes.empty()) return {};
  const uint8_t cmd_byte = static_cast<uint8_t>(bytes[0]);
  if (cmd_byte < 1 || cmd_byte > 4)
    return bad(fmt::format("unknown command byte {} (expected 1 set, 2 get, 3 add, 4 check)", cmd_byte));
  const auto cmd = static_cast<StoreCmd>(cmd_byte);
  if (bytes.size() < 5) return {};
  const uint64_t key_len = read_le(bytes, 1, 4);
  if (key_len > limits.max_key_bytes)
    return bad(fmt::format("{}: key length {} exceeds the cap of {} bytes (PRIMUS_STORE_MAX_KEY_BYTES)",
                           cmd_name(cmd), key_len, limits.max_key_bytes));
  // key_len <= 2^20 and value_len <= 2^31 below: no sum here can overflow 64 bits.
  const uint64_t value_at = 5 + key_len + 8;
  if (bytes.size() < value_at) return {};
  const uint64_t value_len = read_le(bytes, 5 + key_len, 8);
  if (value_len > limits.max_value_bytes)
    return bad(
        fmt::format("{} '{}': value length {} exceeds the cap of {} bytes (PRIMUS_STORE_MAX_VALUE_BYTES)",
                    cmd_name(cmd), printable(bytes.substr(5, key_len)), value_len, limits.max_value_bytes));
  if (cmd == StoreCmd::kAdd && value_len != 8)
    return bad(fmt::format("add: the delta must be 8 bytes, not {}", value_len));
  if ((cmd == StoreCmd::kGet || cmd == StoreCmd::kCheck) && value_len != 0)
    return bad(fmt::format("{}: carries a {}-byte value (expected none)", cmd_name(cmd), value_len));
  if (bytes.size() < value_at + value_len) return {};
  StoreParse p;
  p.status = StoreParse::kComplete;
  p.request.cmd = cmd;
  p.request.key = bytes.substr(5, key_len);
  p.request.value = bytes.substr(value_at, value_len);
  p.consumed = value_at + value_len;
  return p;
}

std::string encode_store_request(StoreCmd cmd, std::string_view key, std::string_view value) {
  std::string out;
  out.reserve(kStoreHeaderBytes + key.size() + value.size());
  out.push_back(static_cast<char>(cmd));
  append_le(out, key.size(), 4);
  out.append(key);
  append_le(out, value.size(), 8);
  out.append(value);
  return out;
}

std::string encode_store_reply(std::string_view value) {
  std::string out;
  out.reserve(8 + value.size());
  append_le(out, value.size(), 8);
  out.append(value);
  return out;
}

}  // namespace primus::comm
