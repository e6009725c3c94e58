#include "train/overlapped_update.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/env.h"
#include "core/error.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/row_sparse_grad.h"
#include "profile/trace.h"

namespace primus {

namespace {
// The SMs the forward GEMMs leave to the update while it runs. Measured on the H100 (docs/performance.md,
// "Overlapped optimizer update", 07:28Z, adaptive release and background norm in): 16 / 24 / 32 / 40 SMs gave
// 235 / 234 / 237 / 238 ms on the 1B shape (serial update 239) and 137 / 135 / 135 / 140 ms on 8B-4L
// (serial 142).
constexpr int kDefaultSmReserve = 24;
}  // namespace

bool update_in_pieces() {
  return env_int("PRIMUS_UPDATE_PIECES", 1, 0, 1) == 1;
}

bool early_norm_enabled() {
  return env_int("PRIMUS_EARLY_NORM", 1, 0, 1) == 1;
}

int norm_stream_mode() {
  return env_int("PRIMUS_NORM_STREAM", 1, 0, 2);
}

int update_lookahead() {
  return env_int("PRIMUS_UPDATE_LOOKAHEAD", 2, 0, 1 << 20);
}

bool overlap_update_enabled() {
  return env_int("PRIMUS_OVERLAP_UPDATE", 1, 0, 1) == 1;
}
int update_sm_reserve() {
  return env_int("PRIMUS_UPDATE_SM_RESERVE", kDefaultSmReserve, 0, 64);
}

OverlappedUpdate::OverlappedUpdate(ParamStore& params, AdamW& optim, ChunkedGradNorm& norm,
                                   const Stream& compute, int sm_reserve)
    : params_(params),
      optim_(optim),
      norm_(norm),
      compute_(compute),
      update_(make_background_stream(compute)),
      norm_stream_(norm_stream_mode() == 0   ? update_
                   : norm_stream_mode() == 2 ? make_comm_stream(compute)
                                             : make_background_stream(compute)),
      sm_reserve_(sm_reserve),
      pending_(params.regions().size()),
      release_at_(params.head_region()),
      head_(params.head_region()),
      owned_(static_cast<size_t>(params.head_region() + 1)),
      starts_(params.regions().size()),
      norm_launched_(params.regions().size(), 0) {
  PRIMUS_CHECK(compute.device.is_cuda(), "the overlapped optimizer update needs a CUDA stream, got {}",
               compute.device.str());
  const int64_t min_piece = update_in_pieces() ? kUpdatePieceElems : std::numeric_limits<int64_t>::max();
  for (int r = 0; r < static_cast<int>(params.regions().size()); ++r)
    pieces_.push_back(update_pieces(params, r, min_piece));
  entry_pending_.resize(params.entries().size());
  entry_final_.assign(params.entries().size(), 0);
  for (int r = 0; r < static_cast<int>(params.regions().size()); ++r)
    piece_norm_launched_.emplace_back(static_cast<size_t>(norm.pieces(r)), 0);
  early_norm_ = early_norm_enabled();
  for (int r = head_ + 1; r < static_cast<int>(params.regions().size()); ++r) {
    const int owner = params.regions()[r].owner;
    PRIMUS_CHECK(owner >= 0 && owner <= head_, "region {} (experts) has no owner among the hook regions", r);
    owned_[owner].push_back(r);
  }
  // Forward order: the embedding, a layer, then its experts (their own regions under expert parallelism),
  // ..., the head.
  position_.assign(params.regions().size(), -1);
  for (int r = 0; r <= head_; ++r) {
    position_[static_cast<size_t>(r)] = static_cast<int>(order_.size());
    order_.push_back(r);
    for (int x : owned_[r]) {
      position_[static_cast<size_t>(x)] = static_cast<int>(order_.size());
      order_.push_back(x);
    }
  }
  next_ = static_cast<int>(order_.size());  // nothing pending before the first launch()
  lookahead_ = update_lookahead();
  params_.set_read_gate(this);
  // Deferrable when region 0 is the input embedding alone (its decaying span) and the head does not use it.
  const int e = params.find("embed_tokens.weight");
  const ParamRegion& r0 = params.regions().front();
  if (e >= 0 && params.find("lm_head.weight") >= 0 && !params.compute_aliases_master() &&
      params.entry(e).offset == r0.begin && params.entry(e).offset + params.entry(e).numel == r0.decay_end)
    embed_entry_ = e;
}

OverlappedUpdate::~OverlappedUpdate() {
  params_.set_read_gate(nullptr);
  // The GEMM SM target is process-wide: never leave it reduced behind.
  if (sms_reserved_) ops::reserve_gemm_sms(compute_, 0);
}

void OverlappedUpdate::launch(double lr, float grad_scale) {
  finish();  // a previous update not yet waited for (a step without forward) comes first
  adapt_release();
  // The update reads what the compute stream wrote: gradients, and the gradient norm before them; it zeroes
  // gradients the norm's squares read.
  stream_wait(update_, StreamEvent::record(compute_));
  if (norm_stream_.handle != update_.handle) stream_wait(update_, StreamEvent::record(norm_stream_));
  PRIMUS_TRACE_RANGE("optimizer (overlapped)");
  lr_ = lr;
  grad_scale_ = grad_scale;
  optim_.begin_step();
  embedding_deferred_ = embed_entry_ >= 0;
  next_ = embedding_deferred_ && !order_.empty() && order_.front() == 0 ? 1 : 0;
  update_end_ = nullptr;
  if (sm_reserve_ > 0) {
    std::fill(starts_.begin(), starts_.end(), nullptr);
    timing_ = true;
    ops::reserve_gemm_sms(compute_, sm_reserve_);
    sms_reserved_ = true;
  }
  // The first regions now; the rest as the forward reaches them (before_forward), so the host's launches of
  // the update and of the forward interleave instead of the forward's first kernel waiting for all of them.
  launch_until(lookahead_ > 0 ? next_ + lookahead_ - 1 : static_cast<int>(order_.size()) - 1);
  grads_prepared_ = true;
}

void OverlappedUpdate::launch_until(int pos) {
  pos = std::min(pos, static_cast<int>(order_.size()) - 1);
  while (next_ <= pos) update_region(order_[static_cast<size_t>(next_++)]);
  if (next_ < static_cast<int>(order_.size())) return;
  if (timing_ && !update_end_) update_end_ = StreamEvent::record(update_, /*timed=*/true);
  if (embedding_after_lookup_) {
    embedding_after_lookup_ = false;
    update_region(0);
  }
}

void OverlappedUpdate::update_region(int r) {
  for (const UpdatePiece& p : pieces_[r]) {
    optim_.launch_span(p.begin, p.end, p.decay, lr_, grad_scale_, update_);
    auto done = StreamEvent::record(update_);
    for (int e : p.entries) entry_pending_[e] = done;
  }
  // Region r's gradients were read: its accumulated ones (norms, biases, an untied embedding) are zeroed for
  // the next step before r's event, so the next backward cannot write them early.
  params_.begin_region_grads(r, update_);
  pending_[r] = StreamEvent::record(update_);
}

bool OverlappedUpdate::embedding_forward(const Tensor& tokens, Tensor& out) {
  if (!embedding_deferred_) return false;
  const ParamEntry& e = params_.entry(embed_entry_);
  const int64_t b = e.offset, end = e.offset + e.numel;
  auto table = [&](Tensor& flat) { return flat.slice(b, end).view(e.shape); };
  const ops::AdamWParams p = optim_.kernel_params(lr_, grad_scale_, e.decay);
  if (params_.sparse_entry() == embed_entry_) {  // the table's gradient is row-sparse
    const ops::RowSparseGrad& g = params_.sparse_grad();
    if (params_.master_in_remainders()) {
      ops::embedding_forward_updated_split_sparse(
          tokens, table(params_.compute_flat()), table(params_.remainder_flat()), g,
          table(params_.adam_m_flat()), table(params_.adam_v_flat()), p, out, compute_);
    } else {
      ops::embedding_forward_updated_sparse(tokens, table(params_.master_flat()), g,
                                            table(params_.adam_m_flat()), table(params_.adam_v_flat()), p,
                                            out, compute_);
    }
  } else if (params_.master_in_remainders()) {
    ops::embedding_forward_updated_split(
        tokens, table(params_.compute_flat()), table(params_.remainder_flat()), table(params_.grad_flat()),
        table(params_.adam_m_flat()), table(params_.adam_v_flat()), p, out, compute_);
  } else {
    ops::embedding_forward_updated(tokens, table(params_.master_flat()), table(params_.grad_flat()),
                                   table(params_.adam_m_flat()), table(params_.adam_v_flat()), p, out,
                                   compute_);
  }
  // The table's update may overwrite what the lookup read only after the lookup; it is enqueued after every
  // other region's (launch_until), so the layers' updates that the forward waits for do not queue behind it.
  stream_wait(update_, StreamEvent::record(compute_));
  embedding_deferred_ = false;
  embedding_after_lookup_ = true;
  launch_until(next_ - 1);  // enqueues it now if every other region already is
  return true;
}

void OverlappedUpdate::before_read(int entry) {
  launch_until(position_[static_cast<size_t>(params_.region_of_entry(entry))]);
  std::shared_ptr<StreamEvent>& e = entry_pending_[entry];
  if (!e) return;
  stream_wait(compute_, e);
  e = nullptr;
}

void OverlappedUpdate::wait_region(int region) {
  // Region 0 deferred: nothing of it is enqueued yet; after the lookup it is enqueued after every other.
  if (region != 0 || !embedding_deferred_)
    launch_until(region == 0 && embed_entry_ >= 0 ? static_cast<int>(order_.size()) - 1
                                                  : position_[static_cast<size_t>(region)]);
  if (pending_[region]) {
    stream_wait(compute_, pending_[region]);
    pending_[region] = nullptr;
  }
  for (const UpdatePiece& p : pieces_[region])
    for (int e : p.entries) entry_pending_[e] = nullptr;
}

void OverlappedUpdate::wait_owned(int region) {
  wait_region(region);
  for (int x : owned_[region]) wait_region(x);
}

void OverlappedUpdate::before_backward(int region) {
  // Region r's backward writes the gradients its update read and zeroed for this step (the embedding's: its
  // deferred update); the forward waited only for the pieces it read.
  if (region >= 0 && region <= head_) wait_owned(region);
}

void OverlappedUpdate::adapt_release() {
  if (!update_end_) return;
  const int head = head_;
  for (int r = 1; r <= head; ++r) {
    const double after = StreamEvent::elapsed_ms(update_end_.get(), starts_[r].get());
    if (std::isnan(after)) return;  // not measured (evaluation came between, or a region was skipped)
    if (after >= 0) {
      release_at_ = std::min(head, r + 1);
      return;
    }
  }
}

void OverlappedUpdate::before_forward(int region) {
  if (region < 0 || region > head_) return;
  if (lookahead_ > 0) launch_until(position_[static_cast<size_t>(region)] + lookahead_);
  const int head = head_;
  // Layers wait piece by piece as they read (before_read); the head, whose backward follows at once, whole.
  if (region == head) wait_owned(region);
  if (timing_) {
    starts_[region] = StreamEvent::record(compute_, /*timed=*/true);
    if (region == head) timing_ = false;
  }
  if (region >= release_at_) release_sms();  // release_at_ <= head, which comes after every update
}

void OverlappedUpdate::arm_norm() {
  norm_armed_ = true;
  std::fill(norm_launched_.begin(), norm_launched_.end(), 0);
  std::fill(entry_final_.begin(), entry_final_.end(), 0);
  for (auto& v : piece_norm_launched_) std::fill(v.begin(), v.end(), 0);
}

bool OverlappedUpdate::norm_complete() const {
  return norm_armed_ &&
         std::all_of(norm_launched_.begin(), norm_launched_.end(), [](char c) { return c != 0; });
}

void OverlappedUpdate::join_norm() {
  if (norm_armed_) stream_wait(compute_, StreamEvent::record(norm_stream_));
  norm_armed_ = false;
}

void OverlappedUpdate::after_backward(int region) {
  if (!norm_armed_ || region < 0 || region >= static_cast<int>(norm_launched_.size())) return;
  // Region r's gradients are final: a listed entry no GEMM wrote is zeroed now (end_grad_step would do it
  // later), then the background sums the squares while the compute stream goes on with the backward.
  params_.end_region_grads(region, compute_);
  stream_wait(norm_stream_, StreamEvent::record(compute_));
  for (int p = 0; p < norm_.pieces(region); ++p)
    if (!piece_norm_launched_[region][p]) norm_.launch_piece(region, p, norm_stream_);
  norm_launched_[region] = 1;
}

void OverlappedUpdate::grads_final(std::span<const int> entries) {
  if (!norm_armed_ || !early_norm_ || entries.empty()) return;
  params_.end_entry_grads(entries, compute_);  // as end_region_grads, for these entries only
  for (int e : entries) entry_final_[e] = 1;
  const int r = params_.region_of_entry(entries.front());
  bool waited = false;
  for (int p = 0; p < norm_.pieces(r); ++p) {
    const std::vector<int>& in = norm_.piece_entries(r, p);
    if (piece_norm_launched_[r][p] || in.empty() ||
        !std::all_of(in.begin(), in.end(), [&](int e) { return entry_final_[e] != 0; }))
      continue;
    if (!waited) stream_wait(norm_stream_, StreamEvent::record(compute_));
    waited = true;
    norm_.launch_piece(r, p, norm_stream_);
    piece_norm_launched_[r][p] = 1;
  }
}

void OverlappedUpdate::finish() {
  launch_until(static_cast<int>(order_.size()) - 1);
  if (embedding_deferred_) {  // no forward came: the embedding's update goes after the others
    update_region(0);
    embedding_deferred_ = false;
  }
  for (int r = 0; r < static_cast<int>(pending_.size()); ++r) wait_region(r);
  timing_ = false;  // a forward after this (evaluation) is not the one the update ran under
  release_sms();
}

void OverlappedUpdate::release_sms() {
  if (!sms_reserved_) return;
  ops::reserve_gemm_sms(compute_, 0);
  sms_reserved_ = false;
}

}  // namespace primus
