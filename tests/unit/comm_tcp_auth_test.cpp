// Strangers and broken peers against the TCP store and the tcp data plane (comm/job_auth.h): wrong tokens,
// garbage, the 13-byte messages that used to crash rank 0, truncated handshakes, floods of idle connections,
// an authenticated client with a huge length or a stalled request, claims of a wrong rank. Each is refused
// and named while the data and the real ranks are unaffected.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <thread>

#include "comm/job_auth.h"
#include "comm/socket_util.h"
#include "comm/tcp_communicator.h"
#include "comm/tcp_store.h"

namespace primus::comm {
namespace {

const std::string kToken = "0123456789abcdef0123456789abcdef";

RendezvousOptions with_token(const std::string& token) {
  RendezvousOptions o;
  o.token = token;
  return o;
}

// True when the server closed `fd` (recv sees EOF or a reset) within `seconds`.
bool closed_within(int fd, double seconds) {
  const auto deadline = net::deadline_in(seconds);
  char buf[256];
  while (net::Clock::now() < deadline) {
    const ssize_t k = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

void send_raw(int fd, const std::string& bytes) {
  net::send_all(fd, bytes.data(), bytes.size(), net::deadline_in(5), "the test's server");
}

TEST(CommTcpAuth, WrongOrMissingTokenIsRefusedAndTheStoreGoesOn) {
  TcpStore server("127.0.0.1", 0, true, 10, with_token(kToken));
  server.set("k", "kept");
  try {
    TcpStore wrong("127.0.0.1", server.port(), false, 5, with_token("another-job-token-0123456789"));
    FAIL() << "a wrong token was admitted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("refused this rank's job token"), std::string::npos) << e.what();
  }
  EXPECT_THROW(TcpStore("127.0.0.1", server.port(), false, 5, with_token("")), Error);
  TcpStore good("127.0.0.1", server.port(), false, 10, with_token(kToken));
  EXPECT_EQ(good.get("k"), "kept");
  EXPECT_GE(server.refused_connections(), 2u);
}

TEST(CommTcpAuth, TheClientChecksTheServerToo) {
  // A listener that plays the handshake but does not know the token: the client must not trust it.
  int port = 0;
  const int lfd = net::listen_on("127.0.0.1", 0, &port);
  std::thread fake([lfd] {
    const int fd = ::accept(lfd, nullptr, nullptr);
    ServerHandshake hs("not-the-token-0123456789", "primus-store", 0);
    send_raw(fd, hs.challenge());
    std::string in(kResponseBytes, '\0');
    net::recv_exact(fd, in.data(), in.size(), net::deadline_in(5), "client");
    send_raw(fd, std::string(kProofBytes, 'x'));
    closed_within(fd, 2);
    net::close_fd(fd);
  });
  try {
    TcpStore("127.0.0.1", port, false, 5, with_token(kToken));
    ADD_FAILURE() << "an impostor store was trusted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("could not prove this job's token"), std::string::npos) << e.what();
  }
  fake.join();
  net::close_fd(lfd);
}

TEST(CommTcpAuth, StrangersSendingGarbageTruncatedFramesAndIdleFloodsCannotHurtTheStore) {
  RendezvousOptions o = with_token(kToken);
  o.auth.max_pending = 12;  // room for the content attacks below; the idle flood goes beyond it
  o.auth.timeout_s = 1;
  TcpStore server("127.0.0.1", 0, true, 10, o);
  server.set("k", "kept");
  std::vector<int> strangers;
  auto connect = [&] {
    strangers.push_back(net::connect_to("127.0.0.1", server.port(), net::deadline_in(5)));
    return strangers.back();
  };
  // The eight 13-byte messages that killed rank 0 before (huge key length, 32-bit overflow).
  for (int i = 0; i < 8; ++i) send_raw(connect(), std::string("\x01\xfb\xff\xff\xff\0\0\0\0\0\0\0\0", 13));
  send_raw(connect(), std::string(5000, 'G'));  // garbage
  const int truncated = connect();
  send_raw(truncated, std::string(kResponseBytes - 1, '\0'));  // a truncated handshake, then half-open
  ::shutdown(truncated, SHUT_WR);
  // Each is refused on its content (before the flood below could evict it).
  for (int fd : strangers) EXPECT_TRUE(closed_within(fd, 5)) << "fd " << fd;
  EXPECT_GE(server.refused_connections(), 10u);
  for (int i = 0; i < 40; ++i) connect();  // idle connections, beyond max_pending
  // A real rank still gets in at once (the flood evicts the oldest pending strangers, not it).
  const auto t0 = net::Clock::now();
  TcpStore good("127.0.0.1", server.port(), false, 10, o);
  EXPECT_LT(std::chrono::duration<double>(net::Clock::now() - t0).count(), 2.0);
  EXPECT_EQ(good.get("k"), "kept");
  good.set("k2", "v2");
  EXPECT_EQ(server.get("k2"), "v2");
  // Every idle stranger is dropped: evicted by a newer one or at the 1 s handshake deadline.
  for (int fd : strangers) EXPECT_TRUE(closed_within(fd, 5)) << "fd " << fd;
  EXPECT_GE(server.refused_connections(), strangers.size());
  for (int fd : strangers) net::close_fd(fd);
  EXPECT_EQ(good.get("k"), "kept");
}

TEST(CommTcpAuth, AnAuthenticatedClientWithAHugeLengthOrAStalledRequestIsClosedAlone) {
  RendezvousOptions o = with_token(kToken);
  o.store.frame_timeout_s = 1;
  TcpStore server("127.0.0.1", 0, true, 10, o);
  server.set("k", "kept");
  auto insider = [&] {
    const int fd = net::connect_to("127.0.0.1", server.port(), net::deadline_in(5));
    client_handshake(fd, kToken, "primus-store", 0, 0, net::deadline_in(5), "store");
    return fd;
  };
  const int huge = insider();
  send_raw(huge, encode_store_request(StoreCmd::kSet, "x", "").substr(0, 6) +
                     std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8));
  EXPECT_TRUE(closed_within(huge, 5));
  const int stalled = insider();
  send_raw(stalled, encode_store_request(StoreCmd::kSet, "y", "value").substr(0, 10));
  EXPECT_TRUE(closed_within(stalled, 5));
  EXPECT_FALSE(server.check("x"));
  EXPECT_FALSE(server.check("y"));
  EXPECT_EQ(server.get("k"), "kept");
  EXPECT_GE(server.refused_connections(), 2u);
  net::close_fd(huge);
  net::close_fd(stalled);
  // A client's own oversized request fails before sending, naming the key.
  RendezvousOptions small = o;
  small.store.max_value_bytes = 16;
  TcpStore c("127.0.0.1", server.port(), false, 5, small);
  try {
    c.set("big", std::string(17, 'v'));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("set of 'big': value of 17 bytes exceeds the cap of 16"),
              std::string::npos)
        << e.what();
  }
}

TEST(CommTcpAuth, WithoutATokenOnlyLoopbackIsAllowed) {
  RendezvousOptions o;  // no token
  o.bind_addr = "0.0.0.0";
  EXPECT_THROW(TcpStore("127.0.0.1", 0, true, 1, o), ConfigError);
  EXPECT_THROW(TcpStore("10.255.255.1", 1, false, 1, RendezvousOptions{}), ConfigError);
  EXPECT_TRUE(is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(is_loopback_host("localhost"));
  EXPECT_TRUE(is_loopback_host("127.3.2.1"));
  EXPECT_FALSE(is_loopback_host("10.1.2.3"));
  TcpStore loopback("127.0.0.1", 0, true, 5, RendezvousOptions{});
  loopback.set("a", "b");
  EXPECT_EQ(loopback.get("a"), "b");
}

TEST(CommTcpAuth, GeneratedTokensAreRandomHex) {
  const std::string a = generate_job_token(), b = generate_job_token();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(a, b);
}

TEST(CommTcpAuth, TheDataPlaneRefusesStrangersAndFalseRankClaims) {
  RendezvousOptions o = with_token(kToken);
  o.auth.timeout_s = 2;
  auto store0 = std::make_shared<TcpStore>("127.0.0.1", 0, true, 20, o);
  const int store_port = store0->port();
  std::vector<std::string> errors(2);
  std::vector<float> results(2, 0);
  auto rank = [&](int r, std::shared_ptr<TcpStore> store) {
    try {
      auto comm = TcpCommunicator::create(store, r, 2, {0, 1}, "world", "t", 20);
      Tensor t = Tensor::from_vector<float>({static_cast<float>(r + 1)}, {1});
      comm->all_reduce(t, ReduceOp::kSum, Stream::cpu(), "sum");
      results[r] = t.data<float>()[0];
    } catch (const std::exception& e) {
      errors[r] = e.what();
    }
  };
  std::thread r0(rank, 0, store0);
  // Rank 0 now waits for rank 1 on its data-plane port; the test (which knows the token) reads the address.
  TcpStore spy("127.0.0.1", store_port, false, 20, o);
  const std::string addr = spy.get("t/addr/0");
  const int port = std::stoi(addr.substr(addr.rfind(':') + 1));
  auto dial = [&] { return net::connect_to("127.0.0.1", port, net::deadline_in(5)); };
  std::vector<int> fds;
  fds.push_back(dial());  // idle
  fds.push_back(dial());
  send_raw(fds.back(), std::string(200, '\xff'));  // garbage
  fds.push_back(dial());
  send_raw(fds.back(), std::string("\x01\x00\x00\x00", 4));  // the old 4-byte hello
  const int wrong = dial();
  EXPECT_THROW(
      client_handshake(wrong, "wrong-token-0123456789", "primus-mesh/t", 1, 0, net::deadline_in(5), "r0"),
      Error);
  fds.push_back(wrong);
  for (uint64_t claim : {uint64_t{0}, uint64_t{5}, ~uint64_t{0}}) {  // right token, impossible rank
    const int fd = dial();
    client_handshake(fd, kToken, "primus-mesh/t", claim, 0, net::deadline_in(5), "r0");
    EXPECT_TRUE(closed_within(fd, 5)) << "claim " << claim;
    fds.push_back(fd);
  }
  std::thread r1(rank, 1, std::make_shared<TcpStore>("127.0.0.1", store_port, false, 20, o));
  r0.join();
  r1.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(results[0], 3.0f);
  EXPECT_EQ(results[1], 3.0f);
  for (int fd : fds) net::close_fd(fd);
}

}  // namespace
}  // namespace primus::comm
