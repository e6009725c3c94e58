#include "comm/socket_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace primus::comm::net {

namespace {

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 1000 ? 1000 : static_cast<int>(left);  // wake up at least once a second
}

[[noreturn]] void sys_fail(const std::string& what, int err) {
  throw Error(ErrorKind::kRuntime, fmt::format("{}: {}", what, std::strerror(err)));
}

}  // namespace

Clock::time_point deadline_in(double seconds) {
  return Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

void set_nonblocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

void close_fd(int fd) {
  if (fd >= 0) ::close(fd);
}

namespace {

// The IPv4 address of `host` ("" and "0.0.0.0": INADDR_ANY).
in_addr_t resolve_ipv4(const std::string& host) {
  if (host.empty() || host == "0.0.0.0") return htonl(INADDR_ANY);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr)
    throw Error(ErrorKind::kRuntime, fmt::format("cannot resolve host '{}': {}", host, gai_strerror(rc)), {},
                "check MASTER_ADDR / --master-addr (or PRIMUS_BIND_ADDR)");
  const in_addr_t a = reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr.s_addr;
  freeaddrinfo(res);
  return a;
}

}  // namespace

int listen_on(const std::string& host, int port, int* bound_port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = resolve_ipv4(host);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) sys_fail("socket", errno);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const std::string where = host.empty() ? fmt::format("port {}", port) : fmt::format("{}:{}", host, port);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int e = errno;
    ::close(fd);
    std::string hint;
    if (e == EADDRINUSE)
      hint =
          "another job (or a previous run still exiting) holds the port: pick another MASTER_PORT / "
          "--master-port";
    if (e == EADDRNOTAVAIL)
      hint = fmt::format(
          "'{}' is not an address of this host: name this host in MASTER_ADDR / --master-addr, "
          "or set PRIMUS_BIND_ADDR (0.0.0.0 listens on every interface)",
          host);
    throw Error(ErrorKind::kRuntime, fmt::format("cannot listen on {}: {}", where, std::strerror(e)), {},
                hint);
  }
  // The backlog holds connections not yet accepted; strangers beyond it wait in the kernel, not in memory.
  if (::listen(fd, 1024) != 0) sys_fail("listen", errno);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (bound_port) *bound_port = ntohs(addr.sin_port);
  return fd;
}

int connect_to(const std::string& host, int port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || res == nullptr)
    throw Error(ErrorKind::kRuntime, fmt::format("cannot resolve host '{}': {}", host, gai_strerror(rc)), {},
                "check MASTER_ADDR (the first host of the job)");
  int last_err = 0;
  for (;;) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) sys_fail("socket", errno);
    if (::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
      freeaddrinfo(res);
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    last_err = errno;
    ::close(fd);
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  freeaddrinfo(res);
  throw Error(ErrorKind::kRuntime,
              fmt::format("cannot connect to {}:{}: {}", host, port, std::strerror(last_err)), {},
              "is rank 0 running, and do MASTER_ADDR/MASTER_PORT name it?");
}

std::string local_address(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "127.0.0.1";
  char buf[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof(buf));
  return buf;
}

void send_all(int fd, const void* buf, size_t n, Clock::time_point deadline, const std::string& what) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      sys_fail(fmt::format("send to {}", what), errno);
    pollfd pf{fd, POLLOUT, 0};
    ::poll(&pf, 1, remaining_ms(deadline));
    if (Clock::now() >= deadline) throw Error(ErrorKind::kRuntime, fmt::format("send to {} timed out", what));
  }
}

bool recv_exact(int fd, void* buf, size_t n, Clock::time_point deadline, const std::string& what,
                bool eof_ok) {
  char* p = static_cast<char*>(buf);
  size_t got = 0;
  while (got < n) {
    ssize_t k = ::recv(fd, p + got, n - got, MSG_DONTWAIT);
    if (k > 0) {
      got += static_cast<size_t>(k);
      continue;
    }
    if (k == 0) {
      if (eof_ok && got == 0) return false;
      throw Error(ErrorKind::kRuntime, fmt::format("{} closed the connection", what));
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      sys_fail(fmt::format("recv from {}", what), errno);
    pollfd pf{fd, POLLIN, 0};
    ::poll(&pf, 1, remaining_ms(deadline));
    if (Clock::now() >= deadline)
      throw Error(ErrorKind::kRuntime, fmt::format("recv from {} timed out", what));
  }
  return true;
}

int pick_free_port() {
  int port = 0;
  int fd = listen_on("", 0, &port);
  ::close(fd);
  return port;
}

}  // namespace primus::comm::net
