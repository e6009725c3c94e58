// cuDNN fused flash attention for the packed qkv layout, through the backend graph API.
//
// The graphs are the composite SDPA graphs of the cuDNN developer guide (Graph API chapter, "Scaled Dot
// Product Attention" fprop/bprop): matmul, pointwise and reduction nodes that the runtime pattern-matches
// onto its fused flash-attention engines. The fused single-node SDPA operations in the 9.19 headers are not
// used: the forward node (9.13+) takes no causal mask before 9.20/9.21 (its mask subgraph attribute is newer
// than our 9.14 runtime) and the backward node needs 9.17. The node order, data types and virtual-tensor
// layouts below follow what cudnn-frontend emits for a 9.x runtime, since the engines only accept graphs of
// that exact shape.
//
// Packed layout: qkv[B, T, (H + KV) D + KV Dv] is seen as Q[B,H,T,D] with strides [T R, D, R, 1] (R = the
// row width), K the same with KV heads at element offset H D, and V[B,KV,T,Dv] with strides [T R, Dv, R, 1]
// at offset (H + KV) D; K enters the first matmul as K^T by swapping the last two dims and strides. No
// copies: cuDNN reads and writes the packed buffers in place. Dv differs from D only in multi-latent
// attention (DeepSeek: D 192, Dv 128), which Hopper's fused engines take since the d <= 256 support of
// cuDNN 9.x.
//
// Plans are cached per shape key (device, direction, B, T, H, KV, D, Dv, causal, scale): building one takes
// milliseconds to seconds, executing one microseconds of host time.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>

#include "core/cuda_check.h"
#include "core/device.h"
#include "core/env.h"
#include "core/log.h"
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/cudnn_backend.h"

namespace primus::ops::cuda {

namespace {

namespace cd = ::primus::ops::cuda::cudnn;

// Fixed uids of the tensors bound in the variant pack.
enum Uid : int64_t {
  kQ = 1,
  kK = 2,
  kV = 3,
  kO = 4,
  kStats = 5,
  kDO = 6,
  kDQ = 7,
  kDK = 8,
  kDV = 9,
  kScale = 10,
  kNegInf = 11,
  kOne = 12,
  kSoftmaxSum = 13,
  kDQAccum = 14,
};

constexpr int64_t kAlign = 256;
int64_t align_up(int64_t x) {
  return (x + kAlign - 1) / kAlign * kAlign;
}

struct Dims {
  int64_t b, t, h, kv, d, dv, r;
  explicit Dims(const AttentionShape& s)
      : b(s.batch), t(s.seq), h(s.heads), kv(s.kv_heads), d(s.head_dim), dv(s.dv()), r(s.qkv_width()) {}
  std::vector<int64_t> q_dims() const { return {b, h, t, d}; }
  std::vector<int64_t> kv_dims() const { return {b, kv, t, d}; }
  std::vector<int64_t> kvt_dims() const { return {b, kv, d, t}; }
  std::vector<int64_t> v_dims() const { return {b, kv, t, dv}; }
  std::vector<int64_t> vt_dims() const { return {b, kv, dv, t}; }
  std::vector<int64_t> o_dims() const { return {b, h, t, dv}; }
  std::vector<int64_t> packed_strides() const { return {t * r, d, r, 1}; }  // a [B,heads,T,D] view of qkv
  std::vector<int64_t> packed_t_strides() const { return {t * r, d, 1, r}; }
  std::vector<int64_t> v_strides() const { return {t * r, dv, r, 1}; }  // a [B,KV,T,Dv] view of qkv
  std::vector<int64_t> vt_strides() const { return {t * r, dv, 1, r}; }
  std::vector<int64_t> o_strides() const { return {t * h * dv, dv, h * dv, 1}; }
  int64_t v_offset() const { return (h + kv) * d; }  // elements
  std::vector<int64_t> s_dims() const { return {b, h, t, t}; }
  std::vector<int64_t> s_strides() const { return {h * t * t, t * t, t, 1}; }
  std::vector<int64_t> st_strides() const { return {h * t * t, t * t, 1, t}; }  // S^T as a view of S
  std::vector<int64_t> row_dims() const { return {b, h, t, 1}; }
  std::vector<int64_t> row_strides() const { return {h * t, t, 1, 1}; }
  std::vector<int64_t> bhsd_strides() const { return {h * t * d, t * d, d, 1}; }
  std::vector<int64_t> bhsdv_strides() const { return {h * t * dv, t * dv, dv, 1}; }
};

// Adds the causal mask (keep column <= row, else the lowest float) to the score tensor `s`; returns the
// masked tensor. The comparison is row >= col with both indices generated on the score tensor, as cuDNN's
// fused engines expect.
int64_t add_causal_mask(cd::GraphBuilder& g, const Dims& dm, int64_t s) {
  const int64_t row = g.virt(dm.s_dims(), dm.s_strides(), CUDNN_DATA_INT32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, -1, row, "gen_row_index", CUDNN_DATA_FLOAT, 2);
  const int64_t col = g.virt(dm.s_dims(), dm.s_strides(), CUDNN_DATA_INT32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, -1, col, "gen_col_index", CUDNN_DATA_FLOAT, 3);
  const int64_t keep = g.virt(dm.s_dims(), dm.s_strides(), CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, keep, "row_greater_than_col", CUDNN_DATA_BOOLEAN);
  const int64_t out = g.virt(dm.s_dims(), dm.s_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, kNegInf, out, "binary_select", CUDNN_DATA_FLOAT, -1, keep);
  return out;
}

// Forward: O = softmax(mask(scale Q K^T)) V, Stats = max + log(sum exp) per query row (= lse).
void build_forward(cd::GraphBuilder& g, const Dims& dm, bool causal) {
  g.tensor(kQ, dm.q_dims(), dm.packed_strides(), CUDNN_DATA_BFLOAT16);
  g.tensor(kK, dm.kvt_dims(), dm.packed_t_strides(), CUDNN_DATA_BFLOAT16);
  g.tensor(kV, dm.v_dims(), dm.v_strides(), CUDNN_DATA_BFLOAT16);
  g.tensor(kO, dm.o_dims(), dm.o_strides(), CUDNN_DATA_BFLOAT16);
  g.tensor(kStats, dm.row_dims(), dm.row_strides(), CUDNN_DATA_FLOAT);
  g.scalar(kScale);
  if (causal) g.scalar(kNegInf);

  const int64_t s1 = g.virt(dm.s_dims(), dm.s_strides(), CUDNN_DATA_FLOAT);
  g.matmul(kQ, kK, s1, "bmm1");
  int64_t s = g.virt(dm.s_dims(), dm.s_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, s1, kScale, s, "attn_scale");
  if (causal) s = add_causal_mask(g, dm, s);

  // Softmax with statistics, as the composite softmax of the Graph API chapter.
  const int64_t mx = g.virt(dm.row_dims(), dm.row_strides(), CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s, mx, "max");
  const int64_t sub = g.virt(dm.s_dims(), dm.s_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_SUB, s, mx, sub, "sub");
  const int64_t ex = g.virt(dm.s_dims(), dm.s_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_EXP, sub, -1, ex, "exp");
  const int64_t sum = g.virt(dm.row_dims(), dm.row_strides(), CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, ex, sum, "sum");
  const int64_t lg = g.virt(dm.row_dims(), dm.row_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_LOG, sum, -1, lg, "log");
  g.pointwise(CUDNN_POINTWISE_ADD, mx, lg, kStats, "add");
  // The probabilities enter the second matmul in the io type (bf16).
  const int64_t p = g.virt(dm.s_dims(), dm.s_strides(), CUDNN_DATA_BFLOAT16);
  g.pointwise(CUDNN_POINTWISE_DIV, ex, sum, p, "div");
  g.matmul(p, kV, kO, "bmm2");
}

// Backward (FA2 style, recomputing P from Stats): dV = P^T dO, dP = dO V^T, dS = P (dP - sum(dO O)) scale,
// dK = dS^T Q, dQ = dS K. For GQA the full-head dK/dV are reduced over each group's heads inside the graph.
// A non-virtual f32 dQ accumulator is how the graph asks for the default engine, whose thread blocks add
// their dQ contributions into it concurrently (fast, not bitwise reproducible). Without it (`deterministic`)
// the engine runs its dP-workspace variant, which writes dQ without cross-block accumulation.
void build_backward(cd::GraphBuilder& g, const Dims& dm, bool causal, bool deterministic) {
  const bool gqa = dm.h != dm.kv;
  g.tensor(kQ, dm.q_dims(), dm.packed_strides(), CUDNN_DATA_BFLOAT16);
  g.tensor(kK, dm.kvt_dims(), dm.packed_t_strides(), CUDNN_DATA_BFLOAT16);
  g.tensor(kV, dm.vt_dims(), dm.vt_strides(), CUDNN_DATA_BFLOAT16);
  g.tensor(kO, dm.o_dims(), dm.o_strides(), CUDNN_DATA_BFLOAT16);
  g.tensor(kStats, dm.row_dims(), dm.row_strides(), CUDNN_DATA_FLOAT);
  g.tensor(kDO, dm.o_dims(), dm.o_strides(), CUDNN_DATA_BFLOAT16);
  g.tensor(kDQ, dm.q_dims(), dm.packed_strides(), CUDNN_DATA_BFLOAT16);
  g.tensor(kDK, dm.kv_dims(), dm.packed_strides(), CUDNN_DATA_BFLOAT16);
  g.tensor(kDV, dm.v_dims(), dm.v_strides(), CUDNN_DATA_BFLOAT16);
  g.scalar(kScale);
  g.scalar(kOne);
  if (causal) g.scalar(kNegInf);
  // Workspace tensors of the graph (ours, not cuDNN's): sum(dO * O) per row and the f32 dQ accumulator.
  g.tensor(kSoftmaxSum, dm.row_dims(), dm.row_strides(), CUDNN_DATA_FLOAT);
  if (!deterministic) g.tensor(kDQAccum, dm.q_dims(), dm.bhsd_strides(), CUDNN_DATA_FLOAT);

  // softmax_sum = sum_d(dO * O) * 1
  const int64_t dOO =
      g.virt(dm.o_dims(), {dm.h * dm.t * dm.dv, dm.t * dm.dv, dm.h * dm.dv, 1}, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, kDO, kO, dOO, "mul_dO_O");
  const int64_t red = g.virt(dm.row_dims(), dm.row_strides(), CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, dOO, red, "reduce_dO_o");
  g.pointwise(CUDNN_POINTWISE_MUL, red, kOne, kSoftmaxSum, "scale_dropout_inv");

  // P = exp(mask(scale Q K^T) - Stats)
  const int64_t s1 = g.virt(dm.s_dims(), dm.s_strides(), CUDNN_DATA_FLOAT);
  g.matmul(kQ, kK, s1, "matmul_Q_KT");
  const int64_t s2 = g.virt(dm.s_dims(), dm.s_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, s1, kScale, s2, "mul_s_attn_scale");
  int64_t s3 = g.virt(dm.s_dims(), dm.s_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_SUB, s2, kStats, s3, "sub_s_m");
  if (causal) s3 = add_causal_mask(g, dm, s3);
  const int64_t p = g.virt(dm.s_dims(), dm.s_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_EXP, s3, -1, p, "exp_s");

  // dV = P^T dO (summed over the group's heads for GQA)
  const int64_t pt = g.virt({dm.b, dm.h, dm.t, dm.t}, dm.st_strides(), CUDNN_DATA_BFLOAT16);
  g.reshape(p, pt, "reshape_p");
  if (gqa) {
    const int64_t dv_full = g.virt(dm.o_dims(), dm.bhsdv_strides(), CUDNN_DATA_BFLOAT16);
    g.matmul(pt, kDO, dv_full, "matmul_pT_dO");
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, dv_full, kDV, "red_dV_head");
  } else {
    g.matmul(pt, kDO, kDV, "matmul_pT_dO");
  }

  // dS = P (dO V^T - softmax_sum) scale
  const int64_t dp = g.virt(dm.s_dims(), dm.s_strides(), CUDNN_DATA_FLOAT);
  g.matmul(kDO, kV, dp, "matmul_dO_VT");
  const int64_t dp2 = g.virt(dm.s_dims(), dm.s_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, kSoftmaxSum, dp2, "sub_dP_softmax_sum");
  const int64_t dp3 = g.virt(dm.s_dims(), dm.s_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, dp2, p, dp3, "mul_dP_exp_s");
  const int64_t ds = g.virt(dm.s_dims(), dm.s_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, dp3, kScale, ds, "mul_dS_attn_scale");

  // dK = dS^T Q
  const int64_t dst = g.virt({dm.b, dm.h, dm.t, dm.t}, dm.st_strides(), CUDNN_DATA_BFLOAT16);
  g.reshape(ds, dst, "reshape_dS");
  if (gqa) {
    const int64_t dk_full = g.virt(dm.q_dims(), dm.bhsd_strides(), CUDNN_DATA_BFLOAT16);
    g.matmul(dst, kQ, dk_full, "matmul_dST_Q");
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, dk_full, kDK, "red_dK_head");
  } else {
    g.matmul(dst, kQ, kDK, "matmul_dST_Q");
  }

  // dQ = dS K: accumulated in f32 then cast, or (deterministic) written directly
  const int64_t k = g.virt(dm.kv_dims(), dm.packed_strides(), CUDNN_DATA_FLOAT);
  g.reshape(kK, k, "reshape_k");
  if (deterministic) {
    g.matmul(ds, k, kDQ, "matmul_dS_K");
    return;
  }
  g.matmul(ds, k, kDQAccum, "matmul_dS_K");
  g.pointwise(CUDNN_POINTWISE_IDENTITY, kDQAccum, -1, kDQ, "identity_dQ");
}

struct Key {
  int device;
  bool backward;
  int64_t b, t, h, kv, d, dv;
  bool causal;
  uint32_t scale_bits;
  bool deterministic;  // backward only (the forward has no cross-block accumulation)
  auto tie() const {
    return std::tie(device, backward, b, t, h, kv, d, dv, causal, scale_bits, deterministic);
  }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
  std::string str() const {
    return fmt::format("{} B={} T={} H={} KV={} D={}{} causal={} scale={}{}", backward ? "bwd" : "fwd", b, t,
                       h, kv, d, dv != d ? fmt::format(" Dv={}", dv) : "", causal,
                       std::bit_cast<float>(scale_bits), deterministic ? " deterministic" : "");
  }
};

struct Entry {
  bool supported = false;
  std::string why;  // refusal details when !supported
  cd::Desc graph;
  std::vector<cd::Plan> plans;  // plans[0] is the one executed (after tuning, if enabled)
  bool tuned = false;
  int64_t softmax_sum_off = 0, dq_accum_off = 0, cudnn_ws_off = 0, ws_bytes = 0;
};

std::mutex& cache_mutex() {
  static std::mutex mu;
  return mu;
}
std::map<Key, std::shared_ptr<Entry>>& cache() {
  static std::map<Key, std::shared_ptr<Entry>> c;
  return c;
}

Key make_key(const AttentionShape& s, bool backward, int device) {
  uint32_t bits;
  std::memcpy(&bits, &s.scale, 4);
  return Key{device,
             backward,
             s.batch,
             s.seq,
             s.heads,
             s.kv_heads,
             s.head_dim,
             s.dv(),
             s.causal,
             bits,
             backward && deterministic_attention()};
}

// PRIMUS_CUDNN_AUTOTUNE: 0/unset = the heuristic's first plan; 1 = time the heuristic's plans on the first
// call; 2 = also time knob variants of the best heuristic engine (one knob at a time).
int autotune_level() {
  return env_int("PRIMUS_CUDNN_AUTOTUNE", 0, 0, 2);
}

std::shared_ptr<Entry> build_entry(const Key& key, const AttentionShape& s) {
  auto e = std::make_shared<Entry>();
  const Dims dm(s);
  cudnnHandle_t h = cd::handle(key.device);
  cd::GraphBuilder g(fmt::format("sdpa_{}", key.str()));
  try {
    if (key.backward)
      build_backward(g, dm, s.causal, key.deterministic);
    else
      build_forward(g, dm, s.causal);
    e->graph = g.build(h);
  } catch (const Error& err) {
    // A graph cuDNN will not even finalize is a refusal of the shape (NOT_SUPPORTED / BAD_PARAM on a node).
    e->why = fmt::format("graph for {} refused: {}", key.str(), err.what());
    return e;
  }
  std::string report;
  try {
    const int level = autotune_level();
    e->plans = cd::make_plans(h, e->graph, level > 0 ? 6 : 1, &report);
    if (level >= 2 && !e->plans.empty()) {
      auto more = cd::knob_variants(h, e->graph, e->plans[0], 12, 64);
      for (auto& p : more) e->plans.push_back(std::move(p));
    }
  } catch (const Error& err) {
    e->why = fmt::format("plan search for {} failed: {}{}", key.str(), err.what(), report);
    return e;
  }
  if (e->plans.empty()) {
    e->why = fmt::format("no cuDNN {} engine accepts {} (runtime {}):{}", key.backward ? "bprop" : "fprop",
                         key.str(), cd::version_string(cd::runtime_version()), report);
    return e;
  }
  e->supported = true;
  int64_t off = 0;
  if (key.backward) {
    e->softmax_sum_off = off;
    off = align_up(off + dm.b * dm.h * dm.t * 4);
    if (!key.deterministic) {
      e->dq_accum_off = off;
      off = align_up(off + dm.b * dm.h * dm.t * dm.d * 4);
    }
  }
  e->cudnn_ws_off = off;
  int64_t max_ws = 0;
  for (const auto& p : e->plans) max_ws = std::max(max_ws, p.workspace);
  e->ws_bytes = off + max_ws;
  log::debug("cudnn attention {}: {} (candidate {}), workspace {} B, {} plan(s) kept", key.str(),
             cd::describe(e->plans[0]), e->plans[0].candidate, e->ws_bytes, e->plans.size());
  return e;
}

std::shared_ptr<Entry> get_entry(const AttentionShape& s, bool backward, int device) {
  const Key key = make_key(s, backward, device);
  std::lock_guard<std::mutex> lock(cache_mutex());
  auto it = cache().find(key);
  if (it != cache().end()) return it->second;
  auto e = build_entry(key, s);
  cache().emplace(key, e);
  return e;
}

// Runs `e`'s plan with the given bindings; on the first call with several candidate plans, times each and
// keeps the fastest (PRIMUS_CUDNN_AUTOTUNE=1). Each candidate computes the same outputs, so the last run
// leaves them right.
void run(Entry& e, const Key& key, std::vector<int64_t> uids, std::vector<void*> ptrs, const Stream& st) {
  cudnnHandle_t h = cd::handle(st.device.index);
  std::lock_guard<std::mutex> lock(cache_mutex());  // one handle per device: serialise its use
  PRIMUS_CUDNN_CHECK(cudnnSetStream(h, cuda_stream(st)));
  char* ws = e.ws_bytes > 0 ? static_cast<char*>(device_alloc(static_cast<size_t>(e.ws_bytes), st)) : nullptr;
  if (key.backward) {  // the backward graph's own workspace tensors (the forward has none)
    uids.push_back(kSoftmaxSum);
    ptrs.push_back(ws + e.softmax_sum_off);
    if (!key.deterministic) {
      uids.push_back(kDQAccum);
      ptrs.push_back(ws + e.dq_accum_off);
    }
  }
  void* cudnn_ws = ws ? ws + e.cudnn_ws_off : nullptr;
  if (!e.tuned && e.plans.size() > 1) {
    cudaEvent_t a, b;
    PRIMUS_CUDA_CHECK(cudaEventCreate(&a));
    PRIMUS_CUDA_CHECK(cudaEventCreate(&b));
    size_t best = 0;
    float best_ms = 1e30f;
    std::string times;
    // Two rounds, keeping each plan's better time: the first round also absorbs clock ramp-up.
    std::vector<float> best_of(e.plans.size(), 1e30f);
    for (int round = 0; round < 2; ++round) {
      for (size_t i = 0; i < e.plans.size(); ++i) {
        try {
          cd::execute(h, e.plans[i], uids, ptrs, cudnn_ws);  // warm-up
        } catch (const Error& err) {
          log::warn("cudnn attention autotune {}: {} failed to run: {}", key.str(), cd::describe(e.plans[i]),
                    err.what());
          continue;
        }
        PRIMUS_CUDA_CHECK(cudaEventRecord(a, cuda_stream(st)));
        for (int r = 0; r < 3; ++r) cd::execute(h, e.plans[i], uids, ptrs, cudnn_ws);
        PRIMUS_CUDA_CHECK(cudaEventRecord(b, cuda_stream(st)));
        PRIMUS_CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        PRIMUS_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        best_of[i] = std::min(best_of[i], ms / 3);
      }
    }
    for (size_t i = 0; i < e.plans.size(); ++i) {
      times += fmt::format(" {}: {:.3f} ms;", cd::describe(e.plans[i]), best_of[i]);
      if (best_of[i] < best_ms) best_ms = best_of[i], best = i;
    }
    PRIMUS_CUDA_CHECK(cudaEventDestroy(a));
    PRIMUS_CUDA_CHECK(cudaEventDestroy(b));
    std::swap(e.plans[0], e.plans[best]);
    e.plans.resize(1);
    log::info("cudnn attention autotune {}:{} keeping {}", key.str(), times, cd::describe(e.plans[0]));
  }
  e.tuned = true;
  cd::execute(h, e.plans[0], uids, ptrs, cudnn_ws);
  if (ws) device_free(ws, st);
}

}  // namespace

bool cudnn_attention_supported(const AttentionShape& s, bool backward, std::string* why) {
  const int v = cd::runtime_version();
  auto no = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return false;
  };
  if (v < 90000) return no(fmt::format("cuDNN runtime {} is older than 9.0", cd::version_string(v)));
  // Packed sequences need a document mask (per-token first key), which this graph has no node for: cuDNN's
  // ragged (THD) layout would need cu_seqlens offsets and per-sample padding masks on the 9.14 runtime.
  // Those shapes run on our flash kernels, which skip the key blocks before a query block's first sample.
  if (s.segmented()) return no("packed sequences (seg_starts) run on the flash kernels");
  // Hopper's fused engines take head dims up to 256 (d_qk 192 / d_v 128 for MLA) on cuDNN 9.x; a runtime
  // that refuses a shape says so when its plan is built, and the flash kernels take it instead.
  if (s.head_dim % 8 != 0 || s.dv() % 8 != 0 || s.head_dim > 256 || s.dv() > 256)
    return no(fmt::format("head dims {}/{} (cuDNN fused attention needs multiples of 8, at most 256)",
                          s.head_dim, s.dv()));
  // Before 9.16 the fused bprop needs s_kv % 128 == 0 unless a padding mask with per-batch lengths is added
  // (what cudnn-frontend does as a workaround); such shapes go to our flash kernel instead.
  if (backward && v < 91600 && s.seq % 128 != 0)
    return no(fmt::format("seq {} is not a multiple of 128 (cuDNN {} bprop)", s.seq, cd::version_string(v)));
  return true;
}

bool cudnn_attention_prepare(const AttentionShape& s, bool backward, int device, std::string* why) {
  auto e = get_entry(s, backward, device);
  if (!e->supported && why) *why = e->why;
  return e->supported;
}

void cudnn_attention_forward(const AttentionShape& s, const void* qkv, void* out, float* lse,
                             const Stream& st) {
  const Key key = make_key(s, false, st.device.index);
  auto e = get_entry(s, false, st.device.index);
  PRIMUS_CHECK(e->supported, "cudnn attention forward: {}", e->why);
  const Dims dm(s);
  auto* base = static_cast<char*>(const_cast<void*>(qkv));
  float scale = s.scale;
  float neg_inf = std::numeric_limits<float>::lowest();  // what cudnn-frontend binds
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kStats, kScale};
  std::vector<void*> ptrs = {base, base + 2 * dm.h * dm.d, base + 2 * dm.v_offset(), out, lse, &scale};
  if (s.causal) uids.push_back(kNegInf), ptrs.push_back(&neg_inf);
  run(*e, key, uids, ptrs, st);
}

void cudnn_attention_backward(const AttentionShape& s, const void* dout, const void* qkv, const void* out,
                              const float* lse, void* dqkv, const Stream& st) {
  const Key key = make_key(s, true, st.device.index);
  auto e = get_entry(s, true, st.device.index);
  PRIMUS_CHECK(e->supported, "cudnn attention backward: {}", e->why);
  const Dims dm(s);
  auto* base = static_cast<char*>(const_cast<void*>(qkv));
  auto* dbase = static_cast<char*>(dqkv);
  float scale = s.scale, one = 1.0f;
  float neg_inf = std::numeric_limits<float>::lowest();            // what cudnn-frontend binds
  const int64_t koff = 2 * dm.h * dm.d, voff = 2 * dm.v_offset();  // bytes
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kScale, kOne};
  std::vector<void*> ptrs = {base,
                             base + koff,
                             base + voff,
                             const_cast<void*>(out),
                             const_cast<float*>(lse),
                             const_cast<void*>(dout),
                             dbase,
                             dbase + koff,
                             dbase + voff,
                             &scale,
                             &one};
  if (s.causal) uids.push_back(kNegInf), ptrs.push_back(&neg_inf);
  run(*e, key, uids, ptrs, st);
}

}  // namespace primus::ops::cuda
