#pragma once
// Expert parallelism's token exchange (Megatron's alltoall token dispatcher): the MoE layer routes and
// permutes its tokens as on one rank (rows grouped by global expert, ops/moe_permute.h), then
//   dispatch: each expert's block of rows travels to the rank owning that expert (all-to-all-v; the block
//             sizes are exchanged first), and the received rows are re-sorted from peer-major
//             [peer 0: e0 e1 ..][peer 1: e0 e1 ..] to local-expert-major [e0: peer 0, peer 1 ..][e1: ..],
//             the grouped GEMM's layout;
//   combine:  the inverse: local-expert-major -> peer-major -> back to the rank the row came from.
// Backward uses the same two moves the other way round: the output gradient is dispatched, the input
// gradient combined. Both are exact copies (no arithmetic), so the experts see bitwise the rows a single
// rank would give them, only in a different order.
//
// Experts are split contiguously: rank j of the ep group owns global experts [j E/ep, (j+1) E/ep), so the
// rows for a peer are one contiguous block of the permuted tensor.
#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "ops/moe_permute.h"

namespace primus::parallel {

struct ExpertDispatch {
  int64_t sent_rows = 0;            // leading rows of the permuted tensor that travel (every expert's block)
  std::vector<int64_t> send_rows;   // per peer
  std::vector<int64_t> recv_rows;   // per peer
  std::vector<int64_t> local_rows;  // per local expert, summed over peers: the grouped GEMMs' counts
  int64_t recv_total = 0;           // rows this rank's experts process
  ops::MoePermutePlan sort;         // peer-major -> local-expert-major (one slot per row)
};

// Collective over `ep`: exchanges every expert's block size (`rows`, one per global expert, on the host) and
// builds the exchange. `s`: where the sort plan lives (the layer's stream).
ExpertDispatch expert_dispatch_plan(const std::vector<int64_t>& rows, comm::Communicator& ep,
                                    const Stream& s);

// x [>= sent_rows, d] (rows grouped by global expert) -> x_local [recv_total, d] (grouped by local expert).
void expert_dispatch(const ExpertDispatch& p, const Tensor& x, Tensor& x_local, comm::Communicator& ep,
                     const Stream& s, const char* label);
// y_local [recv_total, d] -> rows [0, sent_rows) of y (rows past sent_rows are left as they are).
void expert_combine(const ExpertDispatch& p, const Tensor& y_local, Tensor& y, comm::Communicator& ep,
                    const Stream& s, const char* label);

}  // namespace primus::parallel
