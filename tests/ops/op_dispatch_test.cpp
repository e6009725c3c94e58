// The dispatchers' device checks: every tensor of a call must be defined, contiguous and on one device.
#include "ops/op_dispatch.h"

#include "op_test_util.h"
#include "ops/elementwise.h"
#include "ops/norm.h"

namespace primus::test {
namespace {

// A tensor that claims to live on a GPU. Only used where the check must reject it before any kernel runs.
Tensor fake_cuda(std::vector<float>& backing, const Shape& shape) {
  return Tensor::from_blob(backing.data(), shape, DType::kF32, Device::cuda(0));
}

TEST(OpDispatch, RejectsMixedDevicesUndefinedAndStrided) {
  std::vector<float> backing(64);
  Tensor x = Tensor::zeros({4, 4}, DType::kF32), w = Tensor::zeros({4}, DType::kF32);
  Tensor y = Tensor::zeros({4, 4}, DType::kF32), rstd = Tensor::zeros({4}, DType::kF32);
  Tensor gpu_w = fake_cuda(backing, {4});
  EXPECT_PRIMUS_ERROR(ops::rmsnorm_forward(x, gpu_w, 1e-5f, y, rstd, Stream::cpu()),
                      "rmsnorm_forward: tensor argument 2 (f32[4] on cuda:0) is not on cpu");
  Tensor undefined;
  EXPECT_PRIMUS_ERROR(ops::rmsnorm_forward(x, w, 1e-5f, undefined, rstd, Stream::cpu()),
                      "rmsnorm_forward: tensor argument 3 is undefined");
  Tensor wide = Tensor::zeros({4, 8}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::rmsnorm_forward(wide.narrow(1, 0, 4), w, 1e-5f, y, rstd, Stream::cpu()),
                      "contiguous");
  // Optional tensors left out (nullptr) are skipped.
  ops::check_same_device("test", Device::cpu(), {&x, nullptr, &w});
}

#ifndef PRIMUS_WITH_CUDA
TEST(OpDispatch, CpuOnlyBuildRejectsCudaTensors) {
  std::vector<float> backing(16);
  Tensor x = fake_cuda(backing, {16});
  EXPECT_PRIMUS_ERROR(ops::fill_(x, 1.0f, Stream::cpu()), "CUDA tensor given to a CPU-only build");
}
#endif

}  // namespace
}  // namespace primus::test
