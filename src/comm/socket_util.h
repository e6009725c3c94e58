#pragma once
// Small TCP helpers shared by the TCP store and the tcp backend. Every blocking call takes a deadline and
// throws primus::Error naming the peer on a timeout, a reset or a closed connection.
#include <chrono>
#include <cstddef>
#include <string>

namespace primus::comm::net {

using Clock = std::chrono::steady_clock;

// Clock::time_point for `seconds` from now.
Clock::time_point deadline_in(double seconds);

// Listens on `host` (an IPv4 address or a name resolving to one; "" or "0.0.0.0": every interface); port 0
// picks a free port. Returns the fd; *bound_port gets the port. Errors name the address and port.
int listen_on(const std::string& host, int port, int* bound_port);
// Connects to host:port, retrying refused connections until the deadline (the listener may start later).
int connect_to(const std::string& host, int port, Clock::time_point deadline);
// The local address of a connected socket ("10.0.0.3"): the interface peers can reach us on.
std::string local_address(int fd);

// Blocking send/recv of exactly `n` bytes. `what` names the peer in errors. recv_exact returns false on a
// clean EOF before the first byte when `eof_ok`.
void send_all(int fd, const void* buf, size_t n, Clock::time_point deadline, const std::string& what);
bool recv_exact(int fd, void* buf, size_t n, Clock::time_point deadline, const std::string& what,
                bool eof_ok = false);

void set_nonblocking(int fd, bool on);
void close_fd(int fd);

// A free TCP port on this host (bind to 0, read, close): for tests and `primus launch --master-port 0`.
int pick_free_port();

}  // namespace primus::comm::net
