#include "comm/job_auth.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "comm/sha256.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"

namespace primus::comm {

namespace {

constexpr char kMagic[4] = {'P', 'R', 'A', '1'};
// A token shorter than this is guessable in a brute-force search against the handshake.
constexpr size_t kMinTokenChars = 16;

void append_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t read_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

// The MAC input: role, then every field length-prefixed or fixed-size, so no two inputs can collide.
std::string mac_input(const char* role, const std::string& label, std::string_view nonce_s,
                      std::string_view nonce_c, uint64_t claim, uint64_t server_claim) {
  std::string m = role;
  append_u64(m, label.size());
  m += label;
  m.append(nonce_s);
  m.append(nonce_c);
  append_u64(m, claim);
  append_u64(m, server_claim);
  return m;
}

std::string mac(std::string_view key, const std::string& input) {
  const Sha256Digest d = hmac_sha256(key, input);
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

bool equal_macs(std::string_view a, std::string_view b) {
  Sha256Digest x{}, y{};
  std::memcpy(x.data(), a.data(), 32);
  std::memcpy(y.data(), b.data(), 32);
  return digests_equal(x, y);
}

std::string random_string(size_t n) {
  std::string s(n, '\0');
  random_bytes(s.data(), n);
  return s;
}

}  // namespace

void random_bytes(void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t k = getrandom(p, n, 0);
    if (k < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorKind::kRuntime, fmt::format("getrandom failed: {}", std::strerror(errno)));
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
}

std::string generate_job_token() {
  uint8_t b[32];
  random_bytes(b, sizeof(b));
  return to_hex(b, sizeof(b));
}

RendezvousOptions RendezvousOptions::from_env() {
  RendezvousOptions o;
  if (const char* t = std::getenv("PRIMUS_JOB_TOKEN"); t != nullptr && *t != '\0') {
    o.token = t;
    if (o.token.size() < kMinTokenChars)
      // The value is not printed: it is a secret even when it is a bad one.
      throw ConfigError(fmt::format("environment: PRIMUS_JOB_TOKEN has {} characters (at least {} needed)",
                                    o.token.size(), kMinTokenChars),
                        "use a random value, e.g. PRIMUS_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | "
                        "tr -d ' \\n'), the same on every node");
  }
  if (const char* b = std::getenv("PRIMUS_BIND_ADDR"); b != nullptr) o.bind_addr = b;
  o.auth.timeout_s = env_int("PRIMUS_AUTH_TIMEOUT_S", static_cast<int>(o.auth.timeout_s), 1, 3600);
  o.auth.max_pending = env_int("PRIMUS_AUTH_MAX_PENDING", o.auth.max_pending, 1, 100000);
  o.store.max_key_bytes = static_cast<uint64_t>(
      env_int("PRIMUS_STORE_MAX_KEY_BYTES", static_cast<int>(o.store.max_key_bytes), 1, 1 << 20));
  o.store.max_value_bytes = static_cast<uint64_t>(
      env_int("PRIMUS_STORE_MAX_VALUE_BYTES", static_cast<int>(o.store.max_value_bytes), 8, INT32_MAX));
  o.store.frame_timeout_s =
      env_int("PRIMUS_STORE_FRAME_TIMEOUT_S", static_cast<int>(o.store.frame_timeout_s), 1, 86400);
  return o;
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost") return true;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return false;
  bool all_loopback = true;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
    if ((ntohl(in->sin_addr.s_addr) >> 24) != 127) all_loopback = false;
  }
  freeaddrinfo(res);
  return all_loopback;
}

void require_token_beyond_loopback(const RendezvousOptions& o, const std::string& host,
                                   const std::string& what) {
  if (!o.token.empty() || is_loopback_host(host)) return;
  throw ConfigError(
      fmt::format("{} on {} would be reachable from other hosts, but PRIMUS_JOB_TOKEN is not set: anyone "
                  "who can reach the port could join or disrupt the job",
                  what, host),
      "`primus launch` sets a token itself; under srun/torchrun/mpirun export the same random "
      "PRIMUS_JOB_TOKEN (16+ characters) to every rank, e.g. PRIMUS_JOB_TOKEN=$(head -c 32 /dev/urandom | "
      "od -An -tx1 | tr -d ' \\n')");
}

ServerHandshake::ServerHandshake(std::string_view key, std::string label, uint64_t server_claim)
    : key_(key), label_(std::move(label)), nonce_s_(random_string(32)), server_claim_(server_claim) {
  challenge_.assign(kMagic, 4);
  challenge_ += nonce_s_;
}

ServerHandshake::State ServerHandshake::take(std::string& in) {
  if (in.size() < kResponseBytes) return State::kNeedMore;
  const std::string_view r(in.data(), kResponseBytes);
  const std::string_view nonce_c = r.substr(0, 32);
  claim_ = read_u64(r.data() + 32);
  const std::string want = mac(key_, mac_input("client", label_, nonce_s_, nonce_c, claim_, server_claim_));
  const bool ok = equal_macs(want, r.substr(40, 32));
  if (ok) proof_ = mac(key_, mac_input("server", label_, nonce_s_, nonce_c, claim_, server_claim_));
  in.erase(0, kResponseBytes);
  return ok ? State::kAccepted : State::kRefused;
}

void client_handshake(int fd, std::string_view key, const std::string& label, uint64_t claim,
                      uint64_t server_claim, net::Clock::time_point deadline, const std::string& peer) {
  char challenge[kChallengeBytes];
  try {
    net::recv_exact(fd, challenge, sizeof(challenge), deadline, peer);
  } catch (const Error& e) {
    throw Error(ErrorKind::kRuntime, fmt::format("authenticating with {}: {}", peer, e.what()), {},
                "is it a primus rendezvous of this job (and not another service on that port)?");
  }
  if (std::memcmp(challenge, kMagic, 4) != 0)
    throw Error(ErrorKind::kRuntime,
                fmt::format("{} is not a primus rendezvous (its first bytes are not the handshake)", peer),
                {}, "another program holds that port, or a different primus version");
  const std::string nonce_s(challenge + 4, 32), nonce_c = random_string(32);
  std::string response = nonce_c;
  append_u64(response, claim);
  response += mac(key, mac_input("client", label, nonce_s, nonce_c, claim, server_claim));
  char proof[kProofBytes];
  try {
    net::send_all(fd, response.data(), response.size(), deadline, peer);
    net::recv_exact(fd, proof, sizeof(proof), deadline, peer);
  } catch (const Error& e) {
    throw Error(ErrorKind::kRuntime, fmt::format("{} refused this rank's job token ({})", peer, e.what()), {},
                "every rank needs the same PRIMUS_JOB_TOKEN (rank 0's log names the refused address)");
  }
  const std::string want = mac(key, mac_input("server", label, nonce_s, nonce_c, claim, server_claim));
  if (!equal_macs(want, std::string_view(proof, sizeof(proof))))
    throw Error(ErrorKind::kRuntime,
                fmt::format("{} could not prove this job's token: it belongs to another job", peer), {},
                "another job's rendezvous on that port, or a different PRIMUS_JOB_TOKEN");
}

std::string peer_address(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "an unknown peer";
  char buf[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof(buf));
  return fmt::format("{}:{}", buf, ntohs(addr.sin_port));
}

AuthGate::AuthGate(std::string key, std::string label, uint64_t server_claim, AuthLimits limits,
                   std::string service)
    : key_(std::move(key)),
      label_(std::move(label)),
      service_(std::move(service)),
      server_claim_(server_claim),
      limits_(limits) {}

AuthGate::~AuthGate() {
  for (Pending& p : pending_) net::close_fd(p.fd);
}

void AuthGate::refuse(int fd, const std::string& peer, const std::string& why) {
  ++refused_;
  if (refused_ <= 20 || refused_ % 100 == 0)
    log::warn("{}: refused a connection from {}: {}{}", service_, peer, why,
              refused_ > 20 ? fmt::format(" ({} refused so far)", refused_) : "");
  net::close_fd(fd);
}

void AuthGate::drop(Pending& p, const std::string& why) {
  refuse(p.fd, p.peer, why);
  p.fd = -1;
}

void AuthGate::accept_all(int listen_fd) {
  for (;;) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN: none left (or a transient error: the listener stays)
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (pending_.size() >= static_cast<size_t>(limits_.max_pending)) {
      drop(pending_.front(),
           fmt::format("still unauthenticated while {} newer connections waited (PRIMUS_AUTH_MAX_PENDING)",
                       limits_.max_pending));
      pending_.pop_front();
    }
    Pending p{fd, peer_address(fd), ServerHandshake(key_, label_, server_claim_), "",
              net::deadline_in(limits_.timeout_s)};
    // 36 bytes into a fresh socket's empty send buffer: never partial.
    if (::send(fd, p.hs.challenge().data(), p.hs.challenge().size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
        static_cast<ssize_t>(p.hs.challenge().size())) {
      net::close_fd(fd);
      continue;
    }
    pending_.push_back(std::move(p));
  }
}

void AuthGate::add_pollfds(std::vector<pollfd>& fds) const {
  for (const Pending& p : pending_) fds.push_back({p.fd, POLLIN, 0});
}

std::vector<AuthGate::Admitted> AuthGate::service(const std::vector<pollfd>& fds, size_t first) {
  std::vector<Admitted> admitted;
  const auto now = net::Clock::now();
  for (size_t i = 0; i < pending_.size(); ++i) {
    Pending& p = pending_[i];
    const short revents = first + i < fds.size() && fds[first + i].fd == p.fd ? fds[first + i].revents : 0;
    if (revents != 0) {
      char buf[kResponseBytes];
      // Never more than the response: bytes after it belong to the protocol that follows.
      const ssize_t k = ::recv(p.fd, buf, kResponseBytes - p.in.size(), MSG_DONTWAIT);
      if (k == 0) {
        drop(p, p.in.empty()
                    ? "closed without answering the challenge"
                    : fmt::format("closed after {} of the {} handshake bytes", p.in.size(), kResponseBytes));
        continue;
      }
      if (k < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
          drop(p, fmt::format("receive failed ({})", std::strerror(errno)));
        continue;
      }
      p.in.append(buf, static_cast<size_t>(k));
      const auto state = p.hs.take(p.in);
      if (state == ServerHandshake::State::kRefused) {
        drop(p, key_.empty() ? "bad handshake (this job has no token: the peer sent one, or garbage)"
                             : "wrong job token (or garbage instead of the handshake)");
        continue;
      }
      if (state == ServerHandshake::State::kAccepted) {
        const std::string& proof = p.hs.proof();
        if (::send(p.fd, proof.data(), proof.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
            static_cast<ssize_t>(proof.size())) {
          drop(p, "went away during the handshake");
          continue;
        }
        admitted.push_back({p.fd, p.peer, p.hs.claim()});
        p.fd = -1;
        continue;
      }
    }
    if (now >= p.deadline)
      drop(p, fmt::format("did not complete the handshake within {:g} s (PRIMUS_AUTH_TIMEOUT_S); {} bytes "
                          "received",
                          limits_.timeout_s, p.in.size()));
  }
  std::erase_if(pending_, [](const Pending& p) { return p.fd < 0; });
  return admitted;
}

}  // namespace primus::comm
