#include "ops/optimizer.h"

#include "ops/cpu/optimizer_cpu.h"
#include "ops/op_dispatch.h"
#ifdef PRIMUS_WITH_CUDA
#include "ops/cuda/optimizer_cuda.h"
#endif

namespace primus::ops {

void adamw_step(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p,
                Tensor* param_copy, const Stream& s) {
  // An undefined param_copy counts as absent, like a null one.
  const Tensor* copy = param_copy != nullptr && param_copy->defined() ? param_copy : nullptr;
  check_same_device("adamw_step", master.device(), {&master, &grad, &m, &v, copy});
  PRIMUS_DISPATCH(master, adamw_step, master, grad, m, v, p, param_copy, s);
}

void adamw_step_split(Tensor& hi, Tensor& rem, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p,
                      const Stream& s) {
  check_same_device("adamw_step_split", hi.device(), {&hi, &rem, &grad, &m, &v});
  PRIMUS_DISPATCH(hi, adamw_step_split, hi, rem, grad, m, v, p, s);
}

void master_split(const Tensor& master, Tensor& hi, Tensor* rem, const Stream& s) {
  const Tensor* r = rem != nullptr && rem->defined() ? rem : nullptr;
  check_same_device("master_split", master.device(), {&master, &hi, r});
  PRIMUS_DISPATCH(master, master_split, master, hi, rem, s);
}

void master_join(const Tensor& hi, const Tensor& rem, Tensor& master, const Stream& s) {
  check_same_device("master_join", master.device(), {&hi, &rem, &master});
  PRIMUS_DISPATCH(master, master_join, hi, rem, master, s);
}

void sum_squares(const Tensor& x, Tensor& out, bool accumulate, const Stream& s, Tensor* scratch) {
  check_same_device("sum_squares", x.device(), {&x, &out, scratch});
  PRIMUS_DISPATCH(x, sum_squares, x, out, accumulate, s, scratch);
}

void sum_squares_chunks(const Tensor& x, int64_t chunk, Tensor& out, const Stream& s, Tensor* scratch) {
  check_same_device("sum_squares_chunks", x.device(), {&x, &out, scratch});
  PRIMUS_DISPATCH(x, sum_squares_chunks, x, chunk, out, s, scratch);
}

}  // namespace primus::ops
