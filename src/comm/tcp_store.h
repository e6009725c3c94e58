#pragma once
// A key-value store over TCP for rendezvous (torch's TCPStore, reduced): rank 0 serves it on
// MASTER_ADDR:MASTER_PORT from a background thread; every rank (rank 0 included) is a client. Used to share
// the NCCL unique id, the tcp backend's listening addresses, and for barriers.
//
//   TcpStore store(env.master_addr, env.master_port, /*serve=*/env.rank == 0, /*timeout_s=*/300);
//   store.set("nccl/world/id", bytes);   std::string id = store.get("nccl/world/id");   // waits
//   int64_t n = store.add("arrived", 1);
//
// Security (comm/job_auth.h, docs/distributed.md "Security"): the server listens on the job's address only
// (MASTER_ADDR, or PRIMUS_BIND_ADDR), every connection proves the job token before a byte of it is parsed
// as a request, requests are parsed with checked 64-bit lengths against caps (comm/store_protocol.h), and
// half-open, slow and unauthenticated connections are bounded in number and time. A connection that breaks
// a rule is closed and logged with its address; the data and the other connections are untouched.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "comm/job_auth.h"

namespace primus::comm {

class TcpStore {
 public:
  // serve: run the server here (port 0 = pick one; see port()). Connects as a client, retrying until
  // timeout_s. Every later call waits at most timeout_s (get: for the key to appear). Throws ConfigError when
  // the store would be reachable beyond loopback without a token.
  TcpStore(const std::string& host, int port, bool serve, double timeout_s,
           RendezvousOptions options = RendezvousOptions::from_env());
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::string& value);
  std::string get(const std::string& key);  // blocks until the key exists (or the timeout)
  int64_t add(const std::string& key, int64_t delta);
  bool check(const std::string& key);
  // Every one of `n` participants calls it with the same name; returns when all have arrived.
  void barrier(const std::string& name, int n);

  int port() const { return port_; }
  const std::string& host() const { return host_; }
  // The local address of the client connection (the interface the master reaches this host on).
  std::string local_address() const;
  double timeout_s() const { return timeout_s_; }
  // The token and limits this store was built with: the tcp data plane uses the same.
  const RendezvousOptions& options() const { return options_; }
  // Connections the server refused (wrong token, garbage, bad requests, timeouts); 0 on clients.
  uint64_t refused_connections() const;

 private:
  std::string request(StoreCmd cmd, const std::string& key, const std::string& value, const char* what);

  class Server;
  RendezvousOptions options_;
  std::unique_ptr<Server> server_;
  std::string host_;
  int port_ = 0;
  double timeout_s_ = 300;
  int fd_ = -1;
  std::mutex mu_;
};

}  // namespace primus::comm
