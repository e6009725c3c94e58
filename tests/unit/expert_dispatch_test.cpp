// Expert parallelism's token exchange (parallel/expert_dispatch.h) on a 3-rank tcp world inside the test: 6
// global experts, 2 per rank, block sizes that include empty blocks and a rank whose experts get no row at
// all. Dispatch delivers every row to its expert's owner in local-expert-major order (peer order inside an
// expert), bit for bit; combine brings the processed rows back to where they came from; rows past the sent
// ones are neither sent nor written.
#include <gtest/gtest.h>

#include "parallel/expert_dispatch.h"
#include "unit/tcp_ranks.h"

namespace primus {
namespace {

constexpr int kRanks = 3;
constexpr int64_t kDispatchExperts = 6, kDispatchLocal = 2, kDispatchD = 4, kDispatchSlack = 3;

// Rows rank r sends to global expert e; rank 2's experts (4, 5) get none from anyone.
int64_t rows_of(int r, int64_t e) {
  static const int64_t kRows[kRanks][kDispatchExperts] = {
      {2, 0, 1, 3, 0, 0}, {0, 1, 4, 0, 0, 0}, {3, 2, 0, 1, 0, 0}};
  return kRows[r][e];
}

// The value of column c of row j of (rank r, expert e)'s block: every element distinct.
float value(int r, int64_t e, int64_t j, int64_t c) {
  return static_cast<float>(r * 10000 + e * 1000 + j * 10 + c);
}

TEST(ExpertDispatch, RowsReachTheirExpertsOwnerAndComeBack) {
  comm::run_ranks(kRanks, [](comm::Communicator& ep) {
    const int me = ep.rank();
    std::vector<int64_t> rows(kDispatchExperts);
    int64_t sent = 0;
    for (int64_t e = 0; e < kDispatchExperts; ++e) sent += rows[e] = rows_of(me, e);
    // x: this rank's rows grouped by global expert, then slack rows (a dropless layout's unused tail).
    std::vector<float> xv;
    for (int64_t e = 0; e < kDispatchExperts; ++e)
      for (int64_t j = 0; j < rows[e]; ++j)
        for (int64_t c = 0; c < kDispatchD; ++c) xv.push_back(value(me, e, j, c));
    for (int64_t i = 0; i < kDispatchSlack * kDispatchD; ++i) xv.push_back(-1.0f);
    Tensor x = Tensor::from_vector(xv, {sent + kDispatchSlack, kDispatchD});

    const parallel::ExpertDispatch p = parallel::expert_dispatch_plan(rows, ep, Stream::cpu());
    EXPECT_EQ(p.sent_rows, sent);
    std::vector<float> want;
    std::vector<int64_t> local(kDispatchLocal, 0);
    for (int64_t el = 0; el < kDispatchLocal; ++el)
      for (int peer = 0; peer < kRanks; ++peer) {
        const int64_t e = me * kDispatchLocal + el;
        local[el] += rows_of(peer, e);
        for (int64_t j = 0; j < rows_of(peer, e); ++j)
          for (int64_t c = 0; c < kDispatchD; ++c) want.push_back(value(peer, e, j, c));
      }
    EXPECT_EQ(p.local_rows, local);
    EXPECT_EQ(p.recv_total, static_cast<int64_t>(want.size()) / kDispatchD);
    if (me == 2) EXPECT_EQ(p.recv_total, 0);  // nothing for experts 4 and 5

    Tensor x_local = Tensor::empty({p.recv_total, kDispatchD}, DType::kF32);
    parallel::expert_dispatch(p, x, x_local, ep, Stream::cpu(), "test dispatch");
    EXPECT_EQ(x_local.to_vector<float>(), want);

    // The "experts": row -> 2 * row + 1, then back to the senders.
    std::vector<float> yv = x_local.to_vector<float>();
    for (float& v : yv) v = 2 * v + 1;
    Tensor y_local = Tensor::from_vector(yv, {p.recv_total, kDispatchD});
    Tensor y = Tensor::from_vector(std::vector<float>((sent + kDispatchSlack) * kDispatchD, 7.0f),
                                   {sent + kDispatchSlack, kDispatchD});
    parallel::expert_combine(p, y_local, y, ep, Stream::cpu(), "test combine");
    const std::vector<float> got = y.to_vector<float>();
    for (int64_t i = 0; i < (sent + kDispatchSlack) * kDispatchD; ++i)
      EXPECT_EQ(got[i], i < sent * kDispatchD ? 2 * xv[i] + 1 : 7.0f) << "rank " << me << " element " << i;
  });
}

TEST(ExpertDispatch, ExpertsMustSplitOverTheGroup) {
  comm::run_ranks(2, [](comm::Communicator& ep) {
    EXPECT_THROW(parallel::expert_dispatch_plan({1, 2, 3}, ep, Stream::cpu()), Error);
  });
}

}  // namespace
}  // namespace primus
