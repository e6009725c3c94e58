#pragma once
// The optimizer update of step n running under the forward of step n + 1 (one GPU, or each rank of a DDP /
// expert-parallel run with whole-model buffers: the trainer launches it once the gradients are reduced).
//
// Why: AdamW is memory-bound (30 bytes per parameter: 17 ms per step on the llama3.2-1B shape, 7% of it) and
// the forward is mostly compute-bound GEMMs. The update is enqueued on a low-priority stream region by region
// (embedding, layer 1 .. L, head), each region in pieces (train/update_pieces.h) with an event after each
// piece; the next forward waits for a piece's event just before it reads a weight inside it (the store's
// read gate, ParamReadGate), so a layer's GEMMs run while the rest of its update, of layers r + 1 .. L and
// of the head goes on beside them. The head (with the MTP depths) is waited for as a whole: it comes last in
// the update and first in the backward. While updates are in flight the GEMMs may leave `sm_reserve`
// SMs to the update stream (cuBLASLt's SM count target). Each step measures (timed events) during which
// layer's forward the update ended, and the next step gives the GEMMs every SM again from the layer after
// that one (at the latest for the head, which comes after every update): reserved SMs that no update uses are
// lost.
//
// With untied embeddings the input embedding's update (the first region the forward needs: 262 M of the 1B
// shape's 1.5 G parameters) is not waited for at all: the forward's lookup computes its rows as the pending
// update will leave them (ops::embedding_forward_updated, the optimizer's own element update), and the
// table's update is enqueued on the update stream right after that lookup, to finish before the embedding's
// backward (before_backward(0) waits for it).
//
// The same kernels run in the same order on the same data, so results are bitwise those of the serial update.
// Only the host's order of launches changes: launch() enqueues the first regions' updates and the forward of
// region r those of the regions a few places ahead of it (PRIMUS_UPDATE_LOOKAHEAD), so the next forward's
// first kernels are not queued behind ~100 launches of the host; whatever reads parameters first enqueues
// what it needs (before_read, wait_region, finish).
// The gradient norm moves to the background too: armed for a step's last micro-batch, each piece's squares
// are summed (ChunkedGradNorm) as soon as its gradients are complete -- a layer's MLP matrices when the
// MLP's backward is over (grads_final), the rest of the region when the region's backward is over -- so the
// step's end waits only for the input embedding's share and the last layer's attention.
// The next step's gradient zeroing runs on the update stream too, region by region right after the region's
// update read its gradients and before the region's event, so nothing of the next step writes one early.
// Anything else that reads parameters or optimizer state (evaluation, checkpoints, the end of training) calls
// finish() first.
#include <memory>
#include <utility>
#include <vector>

#include "core/stream_events.h"
#include "model/llama_model.h"
#include "model/param_store.h"
#include "train/grad_norm.h"
#include "train/optimizer.h"
#include "train/update_pieces.h"

namespace primus {

class OverlappedUpdate : public ParamHooks, public ParamReadGate {
 public:
  // compute: the trainer's stream (the model runs on it). sm_reserve: SMs the forward GEMMs leave to the
  // update while it runs (0 = none).
  OverlappedUpdate(ParamStore& params, AdamW& optim, ChunkedGradNorm& norm, const Stream& compute,
                   int sm_reserve);
  ~OverlappedUpdate() override;

  // Enqueues the update of the step whose gradients `compute` has just finished, and the zeroing of the next
  // step's accumulated gradients. Returns at once.
  void launch(double lr, float grad_scale);
  // True once after a launch(): it also zeroed the next step's accumulated gradients (the trainer then skips
  // ParamStore::begin_grad_step).
  bool take_grads_prepared() { return std::exchange(grads_prepared_, false); }
  // `compute` waits for every pending region (before evaluation, checkpoints, parameter reads).
  void finish();

  // The next backward is the step's last: sum each region's squares when its backward ends.
  void arm_norm();
  // True when every region's squares were launched since arm_norm().
  bool norm_complete() const;
  // The compute stream waits for the background's norm work, and the arming ends.
  void join_norm();

  void before_forward(int region) override;
  void after_forward(int) override {}
  void before_backward(int region) override;
  void after_backward(int region) override;
  void grads_final(std::span<const int> entries) override;
  bool embedding_forward(const Tensor& tokens, Tensor& out) override;
  // ParamReadGate: the compute stream waits for the piece that writes entry i, if still pending.
  void before_read(int entry) override;

  // The region from which the GEMMs get every SM again (adapted each step; ParamStore::head_region() = the
  // head).
  int release_region() const { return release_at_; }

 private:
  void release_sms();
  // Enqueues the updates of order_[next_ .. pos] (clamped to the end), in order; records update_end_ after
  // the last region.
  void launch_until(int pos);
  // Region r's update and the zeroing of its accumulated gradients for the next step, then r's event.
  void update_region(int r);
  // The compute stream waits for all of region r's update (the grads zeroing included); its pieces are done.
  void wait_region(int r);
  // Region r and the expert regions it owns (expert parallelism: a layer's experts live in a region of their
  // own, updated right after the layer and waited for with it).
  void wait_owned(int r);
  // From the last step's timed events: the update ended during the forward of region r - 1, where r is the
  // first region that started after it; the reservation then ends one region later, r + 1.
  void adapt_release();

  ParamStore& params_;
  AdamW& optim_;
  ChunkedGradNorm& norm_;
  Stream compute_;
  Stream update_;
  // Where the gradient norm's squares run: a stream of their own (PRIMUS_NORM_STREAM, default 1), so
  // they do not queue behind the input embedding's deferred update, which occupies the update stream for the
  // whole backward and pushed every region's squares into the step's tail (8B-4L: 2.8 ms, 21:58Z profile).
  Stream norm_stream_;
  int sm_reserve_;
  bool sms_reserved_ = false;
  bool grads_prepared_ = false;
  std::vector<std::shared_ptr<StreamEvent>> pending_;  // per region; null once the compute stream waited
  std::vector<std::vector<UpdatePiece>> pieces_;       // per region, in update order
  std::vector<std::shared_ptr<StreamEvent>> entry_pending_;  // per entry: its piece's event, or null
  int release_at_;                                           // see release_region()
  int head_;                                                 // the head region (the last the hooks name)
  std::vector<std::vector<int>> owned_;                      // per hook region: its expert regions
  std::vector<int> order_;                                   // regions in update (= forward) order
  std::vector<int> position_;                                // per region: its index in order_
  int next_ = 0;                                      // order_[next_ ..] are not enqueued yet for this step
  int lookahead_ = 2;                                 // PRIMUS_UPDATE_LOOKAHEAD
  bool timing_ = false;                               // the forward after launch() records its region starts
  std::vector<std::shared_ptr<StreamEvent>> starts_;  // timed, per region, on the compute stream
  std::shared_ptr<StreamEvent> update_end_;           // timed, on the update stream
  int embed_entry_ = -1;                 // the input embedding, when its update can be deferred (untied)
  bool embedding_deferred_ = false;      // region 0's update is not enqueued yet
  bool embedding_after_lookup_ = false;  // the lookup ran: region 0's update follows the last other region
  double lr_ = 0;
  float grad_scale_ = 1;
  bool norm_armed_ = false;
  std::vector<char> norm_launched_;                     // per region, since arm_norm()
  std::vector<std::vector<char>> piece_norm_launched_;  // per region and norm piece, since arm_norm()
  std::vector<char> entry_final_;                       // per entry: grads_final() since arm_norm()
  bool early_norm_ = true;                              // PRIMUS_EARLY_NORM
};

// PRIMUS_OVERLAP_UPDATE (default on for one CUDA process), PRIMUS_UPDATE_SM_RESERVE (default below) and
// PRIMUS_UPDATE_PIECES (default 1; 0: each region is one piece, so a layer's forward waits for its whole
// update, as before pieces): the A/B switches of docs/performance.md.
// PRIMUS_EARLY_NORM (default 1; 0: a region's norm starts only when its whole backward is over).
// PRIMUS_NORM_STREAM (default 1: the norm's squares on a stream of their own; 2: that stream at the highest
// priority, so the squares do not wait for SMs behind the backward's GEMMs; 0: on the update stream, as
// before).
// PRIMUS_UPDATE_LOOKAHEAD (default 2): how many regions' updates launch() enqueues at once; the forward of
// region r then enqueues those up to r + lookahead. 0: every region at once (as before): the host spent
// ~1 ms on those launches before the next forward's first one (124M: 3% of the step, 21:58Z profile).
bool overlap_update_enabled();
int update_lookahead();
bool update_in_pieces();
bool early_norm_enabled();
int norm_stream_mode();
int update_sm_reserve();

}  // namespace primus
