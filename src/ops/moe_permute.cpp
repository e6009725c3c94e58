#include "ops/moe_permute.h"

#include "ops/cpu/moe_permute_cpu.h"
#include "ops/op_dispatch.h"
#ifdef PRIMUS_WITH_CUDA
#include "ops/cuda/moe_permute_cuda.h"
#endif

namespace primus::ops {
namespace {
void check_plan_device(const char* op, Device dev, const MoePermutePlan& plan) {
  check_same_device(op, dev, {&plan.counts, &plan.offsets, &plan.row_src, &plan.slot_row});
}
}  // namespace

MoePermutePlan moe_permute_plan(const Tensor& ids, int64_t num_experts, int64_t capacity, const Stream& s) {
  check_same_device("moe_permute_plan", ids.device(), {&ids});
  PRIMUS_DISPATCH(ids, moe_permute_plan, ids, num_experts, capacity, s);
}

void moe_permute(const Tensor& x, const MoePermutePlan& plan, Tensor& x_perm, const Stream& s) {
  check_same_device("moe_permute", x.device(), {&x, &x_perm});
  check_plan_device("moe_permute", x.device(), plan);
  PRIMUS_DISPATCH(x, moe_permute, x, plan, x_perm, s);
}

void moe_permute_backward(const Tensor& dx_perm, const MoePermutePlan& plan, Tensor& dx, const Stream& s) {
  check_same_device("moe_permute_backward", dx_perm.device(), {&dx_perm, &dx});
  check_plan_device("moe_permute_backward", dx_perm.device(), plan);
  PRIMUS_DISPATCH(dx_perm, moe_permute_backward, dx_perm, plan, dx, s);
}

void moe_unpermute(const Tensor& y_perm, const MoePermutePlan& plan, const Tensor& probs, Tensor& out,
                   const Stream& s) {
  check_same_device("moe_unpermute", y_perm.device(), {&y_perm, &probs, &out});
  check_plan_device("moe_unpermute", y_perm.device(), plan);
  PRIMUS_DISPATCH(y_perm, moe_unpermute, y_perm, plan, probs, out, s);
}

void moe_unpermute_backward(const Tensor& dout, const Tensor& y_perm, const MoePermutePlan& plan,
                            const Tensor& probs, Tensor& dy_perm, Tensor& dprobs, const Stream& s) {
  check_same_device("moe_unpermute_backward", dout.device(), {&dout, &y_perm, &probs, &dy_perm, &dprobs});
  check_plan_device("moe_unpermute_backward", dout.device(), plan);
  PRIMUS_DISPATCH(dout, moe_unpermute_backward, dout, y_perm, plan, probs, dy_perm, dprobs, s);
}

}  // namespace primus::ops
