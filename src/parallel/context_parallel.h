#pragma once
// Context parallelism (CP): the sequence is split over the cp ranks. Each sequence of T tokens is cut into
// 2·CP chunks of C = T / (2·CP); rank i holds chunks i and 2·CP−1−i (the causal load balance: an early chunk
// with little to attend to and a late one with much), and everything but attention works on those tokens
// alone. A rank lays its tokens out chunk-major: row h·B + b of its [2·B, C] batch is chunk(h) of sequence b,
// so each chunk of the whole micro-batch is a contiguous [B·C] block of rows.
//
// Attention (this file): the key/value columns of every rank's chunks are all-gathered (cp_comm_type
// all_gather, Megatron's name); local query chunk c attends to key chunks 0..c one block at a time (chunks
// before c without a mask, chunk c causally) with the ordinary attention kernels, and the partial results are
// folded together by their log-sum-exp (ops::attention_merge), in f32. Backward runs each block's attention
// backward against the merged output and log-sum-exp (the exact gradient of the whole softmax), accumulates
// dQ locally and dK/dV for every chunk, and reduce-scatters dK/dV back to the chunks' owners. On a GPU the
// all-gather (the forward's and the backward's re-gather) runs on a stream of its own while the blocks whose
// keys are this rank's own chunks compute (its two diagonals, and its late query chunk against its early
// key chunk); the other blocks follow once the keys are there. (A ring with every transfer under a block is
// not implemented.)
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/stream_events.h"
#include "core/tensor.h"
#include "ops/attention.h"

namespace primus::parallel {

class ContextParallel {
 public:
  explicit ContextParallel(comm::Communicator& cp);  // not owned; outlives this

  int size() const { return cp_.size(); }
  int rank() const { return cp_.rank(); }
  comm::Communicator& group() const { return cp_; }
  // The global chunk index of this rank's chunk h (0 or 1).
  int64_t chunk(int h) const { return h == 0 ? rank() : 2 * size() - 1 - rank(); }
  // Host i32 [B, T] (every rank's whole micro-batch) -> this rank's [2B, T / (2 CP)], chunk-major (above).
  Tensor local_tokens(const Tensor& full) const;

  // shape: one chunk of the local batch (batch B, seq C, causal ignored); qkv [2B·C, qkv width] after RoPE at
  // the tokens' global positions; out [2B·C, out width]; lse [2, B, H, C] (f32; f64 for f64 activations).
  void attention_forward(const Tensor& qkv, const ops::AttentionShape& shape, Tensor& out, Tensor& lse,
                         const Stream& s) const;
  // d_qkv [2B·C, qkv width] (overwritten) from d_out, with the forward's qkv, out and lse.
  void attention_backward(const Tensor& d_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                          const ops::AttentionShape& shape, Tensor& d_qkv, const Stream& s) const;

 private:
  // The key/value columns of every rank's rows into `all`, [CP · 2B·C, kv width]: chunk c's rows are block
  // (owner(c) · 2 + half(c)) of B·C rows. On a GPU the gather runs on a side stream: the returned event
  // marks its end (null: done on `s`).
  std::shared_ptr<StreamEvent> gather_kv_async(const Tensor& kv, Tensor& all, const Stream& s) const;
  int64_t block_of_chunk(int64_t c) const;
  // The (query half, key chunk) blocks of this rank in the order they run: own key chunks first. own: the
  // local half holding the key chunk (-1: another rank's).
  struct Block {
    int half;
    int64_t key;
    int own;
  };
  std::vector<Block> blocks() const;
  comm::Communicator& cp_;
  mutable Stream side_;  // the gathers' stream (made on first use)
  mutable bool side_made_ = false;
};

}  // namespace primus::parallel
