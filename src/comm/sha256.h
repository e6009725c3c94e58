#pragma once
// SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), for the rendezvous handshake (comm/job_auth.h). Our own
// small implementation because the binary links no crypto library (it must run on machines with nothing
// extra installed); tests/unit/comm_sha256_test.cpp checks the FIPS 180-4 and RFC 4231 vectors.
//
//   Sha256Digest d = sha256("abc");
//   Sha256Digest mac = hmac_sha256(key, message);
//   bool same = digests_equal(mac, received);   // constant time
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace primus::comm {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  Sha256Digest finish();  // the object must not be used afterwards

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;  // bytes
};

Sha256Digest sha256(std::string_view data);
Sha256Digest hmac_sha256(std::string_view key, std::string_view message);

// Compares without an early exit, so that the time taken does not reveal how many leading bytes matched.
bool digests_equal(const Sha256Digest& a, const Sha256Digest& b);

std::string to_hex(const uint8_t* p, size_t n);
inline std::string to_hex(const Sha256Digest& d) {
  return to_hex(d.data(), d.size());
}

}  // namespace primus::comm
