#pragma once
// The TCP store's wire format and its parser, kept free of sockets so that it can be unit-tested and fuzzed
// (tests/fuzz/fuzz_store_protocol.cpp). Multi-byte integers are little-endian.
//
//   request: u8 cmd (1 set, 2 get, 3 add, 4 check), u32 key length, key, u64 value length, value
//   reply:   u64 length, bytes
//
// Every length is checked against the caps before anything is allocated, in 64-bit arithmetic; a request the
// parser cannot accept is refused with a message naming the field and the value.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace primus::comm {

enum class StoreCmd : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4 };

// Caps of the store; RendezvousOptions::from_env (comm/job_auth.h) reads PRIMUS_STORE_MAX_KEY_BYTES,
// PRIMUS_STORE_MAX_VALUE_BYTES and PRIMUS_STORE_FRAME_TIMEOUT_S.
struct StoreLimits {
  uint64_t max_key_bytes = 4096;
  uint64_t max_value_bytes = uint64_t{64} << 20;
  double frame_timeout_s = 120;  // a request that has started must be complete within this
};

struct StoreRequest {
  StoreCmd cmd = StoreCmd::kGet;
  std::string_view key;    // views into the parsed bytes
  std::string_view value;  // set: the value; add: 8 bytes (i64 delta); get/check: empty
};

struct StoreParse {
  enum Status { kComplete, kNeedMore, kBad };
  Status status = kNeedMore;
  StoreRequest request;  // kComplete
  size_t consumed = 0;   // kComplete: the request's size in bytes
  std::string error;     // kBad: what was wrong, naming the field and value
};

// Parses the request at the front of `bytes`. kNeedMore means "a valid prefix; read more": the caps have
// been checked on every length already visible, so a caller that buffers at most one request's worth of
// bytes (13 + max_key_bytes + max_value_bytes) never grows beyond that.
StoreParse parse_store_request(std::string_view bytes, const StoreLimits& limits);

std::string encode_store_request(StoreCmd cmd, std::string_view key, std::string_view value);
std::string encode_store_reply(std::string_view value);

// The request header's size: cmd + key length + value length.
constexpr size_t kStoreHeaderBytes = 1 + 4 + 8;

}  // namespace primus::comm
