#pragma once
// A key-value store over TCP for rendezvous (torch's TCPStore, reduced): rank 0 serves it on
// MASTER_ADDR:MASTER_PORT from a background thread; every rank (rank 0 included) is a client. Used to share
// the NCCL unique id, the tcp backend's listening addresses, and for barriers.
//
//   TcpStore store(env.master_addr, env.master_port, /*serve=*/env.rank == 0, /*timeout_s=*/300);
//   store.set("nccl/world/id", bytes);   std::string id = store.get("nccl/world/id");   // waits
//   int64_t n = store.add("arrived", 1);
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace primus::comm {

class TcpStore {
 public:
  // serve: run the server here (port 0 = pick one; see port()). Connects as a client, retrying until
  // timeout_s. Every later call waits at most timeout_s (get: for the key to appear).
  TcpStore(const std::string& host, int port, bool serve, double timeout_s);
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

 private:
  std::string request(uint8_t cmd, const std::string& key, const std::string& value, const char* what);

  class Server;
  std::unique_ptr<Server> server_;
  std::string host_;
  int port_ = 0;
  double timeout_s_ = 300;
  int fd_ = -1;
  std::mutex mu_;
};

}  // namespace primus::comm
