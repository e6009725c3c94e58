// The TCP store and the tcp backend inside one process (one thread per rank): collectives against the
// fixed-order reference, splits, named groups, a peer that goes away, and the host reduction arithmetic.
#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "comm/host_communicator.h"
#include "comm/socket_util.h"
#include "comm/tcp_communicator.h"
#include "comm/tcp_store.h"
#include "parallel/process_groups.h"
#include "unit/tcp_ranks.h"

namespace primus::comm {
namespace {

TEST(CommTcpStore, SetGetAddBarrierAndWaitingGet) {
  TcpStore server("127.0.0.1", 0, true, 10);
  const int port = server.port();
  std::thread late([port] {
    TcpStore c("127.0.0.1", port, false, 10);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    c.set("late", "value");
  });
  EXPECT_EQ(server.get("late"), "value");  // waits for the other client
  late.join();
  server.set("k", std::string("\0bin\xff", 5));
  EXPECT_EQ(server.get("k"), std::string("\0bin\xff", 5));
  EXPECT_EQ(server.add("n", 2), 2);
  EXPECT_EQ(server.add("n", 3), 5);
  EXPECT_TRUE(server.check("k"));
  EXPECT_FALSE(server.check("missing"));
  std::vector<std::thread> ts;
  for (int i = 0; i < 3; ++i)
    ts.emplace_back([port] {
      TcpStore c("127.0.0.1", port, false, 10);
      c.barrier("b", 4);
    });
  server.barrier("b", 4);
  for (auto& t : ts) t.join();
}

TEST(CommTcpStore, GetTimesOutWithANamedError) {
  TcpStore server("127.0.0.1", 0, true, 0.3);
  try {
    server.get("never");
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("never"), std::string::npos) << e.what();
  }
}

TEST(CommTcpStore, ClientWithoutServerFails) {
  const int port = net::pick_free_port();
  EXPECT_THROW(TcpStore("127.0.0.1", port, false, 0.3), Error);
}

float input(int r, int64_t i) {
  return std::ldexp(static_cast<float>((r * 7919 + i * 104729) % 2001 - 1000) / 1000.0f,
                    static_cast<int>(i % 9) - 4);
}

TEST(CommTcp, CollectivesMatchTheFixedOrderSumBitwise) {
  for (int n : {2, 3, 4}) {
    run_ranks(n, [n](Communicator& c) {
      for (int64_t count : {1, 31, 1000}) {
        std::vector<float> v(count);
        for (int64_t i = 0; i < count; ++i) v[i] = input(c.rank(), i);
        Tensor t = Tensor::from_vector(v, {count});
        c.all_reduce(t, ReduceOp::kSum, Stream::cpu(), "test");
        for (int64_t i = 0; i < count; ++i) {
          float ref = input(0, i);
          for (int r = 1; r < n; ++r) ref = ref + input(r, i);
          ASSERT_EQ(t.data<float>()[i], ref) << "n " << n << " i " << i;
        }
        // reduce_scatter + all_gather reproduce the all_reduce.
        Tensor in =
            Tensor::from_vector(std::vector<float>(n * count, static_cast<float>(c.rank() + 1)), {n * count});
        Tensor part = Tensor::empty({count}, DType::kF32);
        c.reduce_scatter(in, part, ReduceOp::kAvg, Stream::cpu(), "rs");
        Tensor back = Tensor::empty({n * count}, DType::kF32);
        c.all_gather(part, back, Stream::cpu(), "ag");
        for (int64_t i = 0; i < n * count; ++i) ASSERT_EQ(back.data<float>()[i], (n + 1) / 2.0f);
      }
      c.barrier("end");
    });
  }
}

TEST(CommTcp, SplitAndNamedGroups) {
  run_ranks(4, [](Communicator& c) {
    auto odd = c.split(c.rank() % 2, c.rank(), "parity");
    ASSERT_TRUE(odd);
    EXPECT_EQ(odd->size(), 2);
    EXPECT_EQ(odd->rank(), c.rank() / 2);
    Tensor t = Tensor::from_vector<int32_t>({c.rank()}, {1});
    odd->all_reduce(t, ReduceOp::kSum, Stream::cpu(), "sum");
    EXPECT_EQ(t.data<int32_t>()[0], c.rank() % 2 == 0 ? 2 : 4);
    auto dims = parallel::ParallelDims::make({.dp_replicate = 2, .dp_shard = -1, .tp = 1}, 4);
    parallel::ProcessGroups g = parallel::build_groups(dims, c);
    EXPECT_EQ(g.get("dp").size(), 4);
    EXPECT_EQ(g.get("dp_shard").size(), 2);
    EXPECT_EQ(g.get("dp_replicate").size(), 2);
    EXPECT_EQ(g.get("tp").size(), 1);
    EXPECT_EQ(g.get("dp_shard").name(), "dp_shard=dp_shard_cp=edp_shard");  // one communicator for all three
    EXPECT_THROW(g.get("nope"), ConfigError);
    Tensor s = Tensor::from_vector<int32_t>({c.rank()}, {1});
    g.get("dp_replicate").all_reduce(s, ReduceOp::kMax, Stream::cpu(), "max");
    EXPECT_EQ(s.data<int32_t>()[0], c.rank() % 2 + 2);  // replicas {0,2}, {1,3}
  });
}

TEST(CommTcp, ArgumentErrorsNameRankGroupAndOp) {
  run_ranks(2, [](Communicator& c) {
    Tensor a = Tensor::empty({3}, DType::kF32), b = Tensor::empty({5}, DType::kF32);
    try {
      c.reduce_scatter(a, b, ReduceOp::kSum, Stream::cpu(), "bucket 7");
      FAIL() << "no error";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("group world, op reduce_scatter 'bucket 7'"), std::string::npos)
          << e.what();
    }
    c.barrier("after");
  });
}

TEST(CommTcp, APeerThatExitsIsNamed) {
  auto server = std::make_shared<TcpStore>("127.0.0.1", 0, true, 20);
  std::string error;
  std::thread r1([&] {
    auto store = std::make_shared<TcpStore>("127.0.0.1", server->port(), false, 20);
    auto comm = TcpCommunicator::create(store, 1, 2, {0, 1}, "world", "dead", 20);
    // Leaves without taking part: its sockets close.
  });
  auto comm = TcpCommunicator::create(server, 0, 2, {0, 1}, "world", "dead", 20);
  r1.join();
  Tensor t = Tensor::zeros({1000}, DType::kF32);
  try {
    comm->all_reduce(t, ReduceOp::kSum, Stream::cpu(), "grads");
  } catch (const CommError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("rank 0, group world, op all_reduce 'grads' (seq 1)"), std::string::npos) << error;
  EXPECT_NE(error.find("rank 1"), std::string::npos) << error;
  EXPECT_NE(error.find("that rank exited or was killed"), std::string::npos) << error;
  EXPECT_TRUE(comm->aborted());
}

TEST(CommHostReduce, Bf16AccumulatesInF32AndRoundsOnce) {
  // 1 + 3 x 2^-9: bf16 steps round every partial sum back to 1; accumulated in f32 and rounded once it is
  // 1 + 2^-7 (3 x 2^-9 is above half of bf16's 2^-7 spacing at 1).
  std::vector<bf16_t> a = {float_to_bf16(1.0f)}, b = {float_to_bf16(std::ldexp(1.0f, -9))};
  bf16_t out;
  reduce_in_order(DType::kBF16, ReduceOp::kSum, {a.data(), b.data(), b.data(), b.data()}, &out, 1, 4);
  EXPECT_EQ(bf16_to_float(out), 1.0f + std::ldexp(1.0f, -7));
  int32_t x[] = {7}, y[] = {-2}, z;
  reduce_in_order(DType::kI32, ReduceOp::kAvg, {x, y}, &z, 1, 2);
  EXPECT_EQ(z, 2);
}

}  // namespace
}  // namespace primus::comm
