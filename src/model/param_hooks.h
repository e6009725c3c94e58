#pragma once
// Called around the use of each parameter region (0 = embedding, 1..L = layers, L+1 = final norm + head) so
// that data parallelism can gather sharded parameters ahead of use (FSDP) and reduce a region's gradients as
// soon as its backward is over (DDP buckets), and the overlapped optimizer update can wait for and sum what
// it needs (train/overlapped_update.h). The head runs forward and backward together: before_forward(L+1) ...
// after_backward(L+1). Evaluation calls only the forward pair.
#include <span>
#include <vector>

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
  // A zero-bubble pipeline schedule's input-gradient pass (BI) has run the region's backward with its
  // projections' weight-gradient GEMMs queued (model/weight_grad.h): they write into the region's gradient
  // buffer and read activations and output gradients, not the weights. Called where after_backward(region)
  // would be; after_backward(region) follows once the weight-gradient pass (BW) has run the region's queue,
  // so "after_backward" keeps meaning "this micro-batch's gradient of the region is complete". FSDP releases
  // the gathered weights here and keeps the gradient buffer until then.
  virtual void backward_deferred(int region) {}
  // May compute the input embedding's lookup itself (out [N, D]) and return true: the overlapped update looks
  // rows up as its pending update will leave them (ops::embedding_forward_updated). Called after
  // before_forward(0).
  virtual bool embedding_forward(const Tensor& tokens, Tensor& out) { return false; }
};

// Several hooks on one model, called in the order added (data parallelism's gathers and reductions, the
// overlapped update's waits, ...): the model holds one ParamHooks*, the trainer composes. The first hook
// whose embedding_forward computes the lookup wins; the others are not asked.
class ParamHookChain : public ParamHooks {
 public:
  void add(ParamHooks* hook) {
    if (hook != nullptr) hooks_.push_back(hook);
  }
  bool empty() const { return hooks_.empty(); }
  void before_forward(int region) override {
    for (ParamHooks* h : hooks_) h->before_forward(region);
  }
  void after_forward(int region) override {
    for (ParamHooks* h : hooks_) h->after_forward(region);
  }
  void before_backward(int region) override {
    for (ParamHooks* h : hooks_) h->before_backward(region);
  }
  void after_backward(int region) override {
    for (ParamHooks* h : hooks_) h->after_backward(region);
  }
  void grads_final(std::span<const int> entries) override {
    for (ParamHooks* h : hooks_) h->grads_final(entries);
  }
  void backward_deferred(int region) override {
    for (ParamHooks* h : hooks_) h->backward_deferred(region);
  }
  bool embedding_forward(const Tensor& tokens, Tensor& out) override {
    for (ParamHooks* h : hooks_)
      if (h->embedding_forward(tokens, out)) return true;
    return false;
  }

 private:
  std::vector<ParamHooks*> hooks_;  // not owned
};

}  // namespace primus
