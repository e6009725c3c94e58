#pragma once
// Called around the use of each parameter region (0 = embedding, 1..L = layers, L+1 = final norm + head) so
// that data parallelism can gather sharded parameters ahead of use (FSDP) and reduce a region's gradients as
// soon as its backward is over (DDP buckets), and the overlapped optimizer update can wait for and sum what
// it needs (train/overlapped_update.h). The head runs forward and backward together: before_forward(L+1) ...
// after_backward(L+1). Evaluation calls only the forward pair.
#include <span>

namespace primus {

class Tensor;

class ParamHooks {
 public:
  virtual ~ParamHooks() = default;
  virtual void before_forward(int region) = 0;
  virtual void after_forward(int region) = 0;
  virtual void before_backward(int region) = 0;
  virtual void after_backward(int region) = 0;
  // Inside a layer's backward, as soon as these entries' gradients of the micro-batch are complete: the
  // MLP's (or MoE's) matrices, before the attention's backward starts. Lets the gradient norm of the bulk of
  // a layer start while the rest of the layer's backward runs; after_backward(region) still follows.
  virtual void grads_final(std::span<const int> entries) {}
  // May compute the input embedding's lookup itself (out [N, D]) and return true: the overlapped update looks
  // rows up as its pending update will leave them (ops::embedding_forward_updated). Called after
  // before_forward(0).
  virtual bool embedding_forward(const Tensor& tokens, Tensor& out) { return false; }
};

}  // namespace primus
