// The TCP store's request parser (comm/store_protocol.h) on hostile bytes: every prefix of a valid request
// asks for more, lengths beyond the caps are refused as soon as they are visible (before the body arrives),
// the 32-bit overflow that crashed the old parser is a clean refusal, and pipelined requests come out one at
// a time.
#include <gtest/gtest.h>

#include "comm/store_protocol.h"

namespace primus::comm {
namespace {

std::string header(uint8_t cmd, uint32_t key_len, std::string_view key, uint64_t value_len) {
  std::string out(1, static_cast<char>(cmd));
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((key_len >> (8 * i)) & 0xff));
  out.append(key);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value_len >> (8 * i)) & 0xff));
  return out;
}

TEST(CommStoreProtocol, RoundTripsAndAsksForMoreOnEveryPrefix) {
  const StoreLimits limits;
  const std::string req =
      encode_store_request(StoreCmd::kSet, "tcp/world/addr/1", std::string("1.2.\0.4", 7));
  for (size_t n = 0; n < req.size(); ++n)
    EXPECT_EQ(parse_store_request(std::string_view(req).substr(0, n), limits).status, StoreParse::kNeedMore)
        << n;
  const StoreParse p = parse_store_request(req, limits);
  ASSERT_EQ(p.status, StoreParse::kComplete) << p.error;
  EXPECT_EQ(p.request.cmd, StoreCmd::kSet);
  EXPECT_EQ(p.request.key, "tcp/world/addr/1");
  EXPECT_EQ(p.request.value, std::string("1.2.\0.4", 7));
  EXPECT_EQ(p.consumed, req.size());
}

TEST(CommStoreProtocol, PipelinedRequestsParseOneAtATime) {
  const StoreLimits limits;
  std::string add_delta(8, '\0');
  add_delta[0] = 5;
  const std::string a = encode_store_request(StoreCmd::kAdd, "n", add_delta);
  const std::string b = encode_store_request(StoreCmd::kGet, "k", "");
  const std::string both = a + b + "\x04";  // and the first byte of a third
  StoreParse p = parse_store_request(both, limits);
  ASSERT_EQ(p.status, StoreParse::kComplete);
  EXPECT_EQ(p.request.cmd, StoreCmd::kAdd);
  EXPECT_EQ(p.consumed, a.size());
  p = parse_store_request(std::string_view(both).substr(a.size()), limits);
  ASSERT_EQ(p.status, StoreParse::kComplete);
  EXPECT_EQ(p.request.cmd, StoreCmd::kGet);
  EXPECT_EQ(p.request.key, "k");
  EXPECT_EQ(parse_store_request(std::string_view(both).substr(a.size() + b.size()), limits).status,
            StoreParse::kNeedMore);
}

TEST(CommStoreProtocol, RefusesBadCommandsAndLengthsAsSoonAsTheyAreVisible) {
  const StoreLimits limits;  // key <= 4096, value <= 64 MiB
  StoreParse p = parse_store_request("\x09", limits);
  EXPECT_EQ(p.status, StoreParse::kBad);
  EXPECT_NE(p.error.find("unknown command byte 9"), std::string::npos) << p.error;
  // The old parser's crash: a key length near 2^32 wrapped "5 + kl + 8" around in 32 bits. Only the
  // 5 header bytes are needed to refuse it.
  p = parse_store_request(header(1, 0xfffffffb, "", 0).substr(0, 5), limits);
  EXPECT_EQ(p.status, StoreParse::kBad);
  EXPECT_NE(p.error.find("key length 4294967291 exceeds the cap of 4096 bytes"), std::string::npos)
      << p.error;
  p = parse_store_request(header(1, 4097, "", 0).substr(0, 5), limits);
  EXPECT_EQ(p.status, StoreParse::kBad);
  // A huge value length is refused from the header alone, naming the key.
  p = parse_store_request(header(1, 3, "abc", ~uint64_t{0}), limits);
  EXPECT_EQ(p.status, StoreParse::kBad);
  EXPECT_NE(p.error.find("set 'abc': value length 18446744073709551615 exceeds the cap of 67108864"),
            std::string::npos)
      << p.error;
  // Just at the cap: a valid prefix (the body has not arrived).
  EXPECT_EQ(parse_store_request(header(1, 3, "abc", limits.max_value_bytes), limits).status,
            StoreParse::kNeedMore);
  // Commands with the wrong kind of value.
  EXPECT_EQ(parse_store_request(header(3, 1, "n", 4) + "abcd", limits).status, StoreParse::kBad);
  EXPECT_EQ(parse_store_request(header(2, 1, "k", 1) + "x", limits).status, StoreParse::kBad);
  EXPECT_EQ(parse_store_request(header(4, 1, "k", 1) + "x", limits).status, StoreParse::kBad);
}

TEST(CommStoreProtocol, CapsAreConfigurableAndKeysInErrorsArePrintable) {
  StoreLimits limits;
  limits.max_key_bytes = 8;
  limits.max_value_bytes = 16;
  EXPECT_EQ(parse_store_request(header(1, 9, "", 0).substr(0, 5), limits).status, StoreParse::kBad);
  const StoreParse p = parse_store_request(header(1, 3, "a\x01\n", 17), limits);
  EXPECT_EQ(p.status, StoreParse::kBad);
  EXPECT_NE(p.error.find("'a\\x01\\x0a'"), std::string::npos) << p.error;
  EXPECT_EQ(
      parse_store_request(encode_store_request(StoreCmd::kSet, "12345678", std::string(16, 'v')), limits)
          .status,
      StoreParse::kComplete);
}

TEST(CommStoreProtocol, RepliesAreLengthPrefixedLittleEndian) {
  EXPECT_EQ(encode_store_reply("ab"), std::string("\x02\0\0\0\0\0\0\0ab", 10));
}

}  // namespace
}  // namespace primus::comm
