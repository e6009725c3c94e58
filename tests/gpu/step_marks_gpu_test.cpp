// The straggler measure's device marks (train/step_marks.h): a "step" of compute, a wait for a longer piece
// of work on another stream, then more compute. own_ms() must count the compute on both sides of the wait and
// not the wait: within 25% of the compute timed alone (clocks move between the two timings), far below the
// step's whole span, which holds twice as much work on the other stream.
#include <fmt/format.h>

#include <cmath>

#include "core/stream_events.h"
#include "gpu/gpu_test.h"
#include "ops/gemm.h"
#include "train/step_marks.h"

namespace primus::gputest {
namespace {

constexpr const char* kFamily = "step_marks";

void run(Context& ctx) {
  const int64_t n = 4096;
  Tensor a = ctx.to_gpu(ctx.randn_cpu({n, n}, DType::kBF16), DType::kBF16);
  Tensor b = ctx.to_gpu(ctx.randn_cpu({n, n}, DType::kBF16), DType::kBF16);
  Tensor c = Tensor::empty({n, n}, DType::kBF16, ctx.stream);
  const Stream other = make_comm_stream(ctx.stream);
  Tensor c2 = Tensor::empty({n, n}, DType::kBF16, other);
  auto gemms = [&](const Stream& s, Tensor& out, int count) {
    for (int i = 0; i < count; ++i) ops::gemm(a, false, b, true, out, 1.0f, 0.0f, s);
  };
  constexpr int kBefore = 20, kAfter = 10, kOther = 60;  // the other stream's work: twice the compute
  gemms(ctx.stream, c, 5);                               // warm-up
  // The compute alone, for the expectation.
  const double alone_ms = ctx.time_ms([&] { gemms(ctx.stream, c, kBefore + kAfter); }, 1, 5);

  // No host synchronisation inside the step: the GPU runs it as enqueued. The other stream's work starts when
  // the compute before the wait is done, so the whole of it is an exposed wait.
  CudaStepMarks marks(ctx.stream);
  auto t0 = StreamEvent::record(ctx.stream, /*timed=*/true);
  marks.step_start();
  gemms(ctx.stream, c, kBefore);
  stream_wait(other, StreamEvent::record(ctx.stream));
  gemms(other, c2, kOther);
  marks.first_collective();
  marks.wait(StreamEvent::record(other));
  gemms(ctx.stream, c, kAfter);
  marks.wait(StreamEvent::record(other));  // passed already: a zero-length wait that ends the span
  auto end = StreamEvent::record(ctx.stream, /*timed=*/true);
  stream_sync(ctx.stream);
  const double own = marks.own_ms();
  const double span = StreamEvent::elapsed_ms(t0.get(), end.get());
  const double rel = std::fabs(own - alone_ms) / alone_ms;
  ctx.record(kFamily, "own work excludes the wait", std::isfinite(own) ? rel : INFINITY, 0.25,
             fmt::format("own {:.3f} ms, compute alone {:.3f} ms", own, alone_ms));
  // The wait was real: the step's whole span holds the other stream's longer work too.
  ctx.record(kFamily, "the step's span includes the wait",
             std::isfinite(span) && span > 2 * own ? 0 : INFINITY, 0,
             fmt::format("span {:.3f} ms vs own {:.3f} ms", span, own));

  // No wait went through the marks: the measure is the span from the start to the first collective.
  CudaStepMarks plain(ctx.stream);
  plain.step_start();
  gemms(ctx.stream, c, kBefore);
  plain.first_collective();
  stream_sync(ctx.stream);
  const double first_only = plain.own_ms();
  const double expect = alone_ms * kBefore / (kBefore + kAfter);
  ctx.record(kFamily, "no wait: start to first collective",
             std::isfinite(first_only) ? std::fabs(first_only - expect) / expect : INFINITY, 0.25,
             fmt::format("{:.3f} ms, expected ~{:.3f}", first_only, expect));
}

}  // namespace
}  // namespace primus::gputest

PRIMUS_GPU_TEST(step_marks) {
  primus::gputest::run(ctx);
}
