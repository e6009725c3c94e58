#pragma once
// A tcp world inside one test process: one thread per rank (tests of collectives and of what runs on them).
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/tcp_communicator.h"
#include "comm/tcp_store.h"

namespace primus::comm {

// Runs body(comm) on `n` threads, each a rank of a tcp world; a rank's exception fails the test, naming it.
inline void run_ranks(int n, const std::function<void(Communicator&)>& body) {
  auto server = std::make_shared<TcpStore>("127.0.0.1", 0, true, 20);
  std::vector<int> world(n);
  for (int i = 0; i < n; ++i) world[i] = i;
  std::vector<std::thread> ts;
  std::vector<std::string> errors(n);
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      try {
        auto store = r == 0 ? server : std::make_shared<TcpStore>("127.0.0.1", server->port(), false, 20);
        auto comm = TcpCommunicator::create(store, r, n, world, "world", "t", 20);
        body(*comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

}  // namespace primus::comm
