// libFuzzer harness for the TCP store's request parser (comm/store_protocol.h): the bytes an authenticated
// but buggy or hostile client could send. Checks, beyond "no crash, no sanitizer report": a complete request
// stays inside the input and re-encodes to exactly the bytes it came from; kNeedMore never lets a length
// beyond the caps through; every prefix of a complete request is kNeedMore; a refusal carries a message.
// Needs src/comm/store_protocol.cpp (fmt header-only).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "comm/store_protocol.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using primus::comm::StoreParse;
  primus::comm::StoreLimits limits;
  limits.max_key_bytes = 64;  // small caps, so that the fuzzer reaches both sides of them
  limits.max_value_bytes = 256;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  size_t requests = 0;
  while (!bytes.empty() && requests < 64) {
    const StoreParse p = primus::comm::parse_store_request(bytes, limits);
    if (p.status == StoreParse::kBad) {
      check(!p.error.empty());
      break;
    }
    if (p.status == StoreParse::kNeedMore) {
      // Everything visible is within the caps: a caller may buffer up to one maximal request.
      check(bytes.size() < primus::comm::kStoreHeaderBytes + limits.max_key_bytes + limits.max_value_bytes);
      break;
    }
    check(p.consumed > 0 && p.consumed <= bytes.size());
    check(p.request.key.size() <= limits.max_key_bytes && p.request.value.size() <= limits.max_value_bytes);
    check(p.request.key.data() >= bytes.data() &&
          p.request.value.data() + p.request.value.size() <= bytes.data() + p.consumed);
    check(primus::comm::encode_store_request(p.request.cmd, p.request.key, p.request.value) ==
          bytes.substr(0, p.consumed));
    check(primus::comm::parse_store_request(bytes.substr(0, p.consumed - 1), limits).status ==
          StoreParse::kNeedMore);
    bytes.remove_prefix(p.consumed);
    ++requests;
  }
  return 0;
}
