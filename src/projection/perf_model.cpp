#include "projection/perf_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include "config/plan.h"
#include "core/error.h"
#include "parallel/pipeline_sim.h"

namespace primus::projection {
namespace {

// Shares of the GEMM ceiling our other kernels reach on the H100 (docs/kernels/attention.md,
// grouped_gemm.md).
// cuDNN's flash attention on the H100 (the anchor's measurements, ../shared/perf): head dim 128 at 548 / 431
// TF forward / backward, head dim 64 at 333 / 271 TF, against a 734 TF GEMM.
double attn_share(double head_dim, bool backward) {
  const double t = std::clamp((head_dim - 64) / 64, 0.0, 1.0);
  return backward ? 0.37 + t * (0.59 - 0.37) : 0.45 + t * (0.75 - 0.45);
}
constexpr double kKernelFloor = 3e-6;  // a kernel takes at least this long (launch and tail)

// Grouped-GEMM efficiency by routed rows per expert (measured at 256 / 1024 / 4096 rows, interpolated in
// log2).
double grouped_share(double rows_per_expert, bool wgrad) {
  struct P {
    double rows, fwd, wgrad;
  };
  static const P pts[] = {{64, 0.12, 0.06}, {256, 0.37, 0.18}, {1024, 0.95, 0.61}, {4096, 0.97, 0.86}};
  const double r = std::max(rows_per_expert, 1.0);
  if (r <= pts[0].rows) return wgrad ? pts[0].wgrad : pts[0].fwd;
  for (size_t i = 1; i < std::size(pts); ++i) {
    if (r <= pts[i].rows) {
      const double t = std::log2(r / pts[i - 1].rows) / std::log2(pts[i].rows / pts[i - 1].rows);
      const double a = wgrad ? pts[i - 1].wgrad : pts[i - 1].fwd, b = wgrad ? pts[i].wgrad : pts[i].fwd;
      return a + t * (b - a);
    }
  }
  return wgrad ? pts[std::size(pts) - 1].wgrad : pts[std::size(pts) - 1].fwd;
}

struct Acc {
  std::map<std::string, OpTime> ops;
  void add(const std::string& name, const std::string& kind, double seconds, double flops = 0) {
    OpTime& o = ops[name];
    o.name = name;
    o.kind = kind;
    o.seconds += seconds;
    o.flops += flops;
  }
};

// Bandwidth (bytes/s) of a group of `size` ranks whose members are `stride` ranks apart.
double group_bw(const Setup& s, const GpuSpec& gpu, const Links& links, int stride, int size) {
  const double intra = (links.intra_node_gbps > 0 ? links.intra_node_gbps : gpu.nvlink_gbps) * 1e9;
  const bool crosses = static_cast<int64_t>(stride) * size > s.nproc_per_node;
  return (crosses ? links.inter_node_gbps * 1e9 : intra) * links.efficiency;
}
double all_reduce_s(double bytes, int ranks, double bw) {
  return ranks <= 1 ? 0 : 2.0 * (ranks - 1) / ranks * bytes / bw + 20e-6;
}
double gather_s(double bytes, int ranks, double bw) {  // all-gather or reduce-scatter of `bytes` in total
  return ranks <= 1 ? 0 : static_cast<double>(ranks - 1) / ranks * bytes / bw + 15e-6;
}

}  // namespace

double gemm_seconds(const GpuSpec& gpu, double m, double n, double k, bool fp8) {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  const double ceiling = (fp8 && gpu.gemm_fp8_tflops > 0 ? gpu.gemm_fp8_tflops : gpu.gemm_bf16_tflops) * 1e12;
  const double sms = gpu.sms > 0 ? gpu.sms : 132;
  // Few output tiles and a long reduction (weight gradients of small layers): cuBLAS splits K across CTAs.
  const double out_tiles = std::ceil(m / 128) * std::ceil(n / 256);
  const double splits =
      out_tiles >= sms ? 1 : std::max(1.0, std::min(std::floor(sms / out_tiles), std::floor(k / 1024)));
  const double tiles = out_tiles * splits;
  k /= splits;
  const double waves = std::ceil(tiles / sms);
  const double wave_eff = tiles / (waves * sms);
  // a short reduction cannot fill the pipeline: K of 256 reaches about half the rate of a long one
  const double k_eff = k / (k + 256);
  const double compute =
      2 * m * n * k / (ceiling * wave_eff * std::min(1.0, k_eff / (4096.0 / (4096 + 256))));
  const double elem = fp8 ? 1.0 : 2.0;
  const double bytes = (m * k + n * k) * elem + m * n * 2;
  return std::max({compute, bytes / (gpu.stream_tbps * 1e12), kKernelFloor});
}

PerformanceProjection project_performance(const Setup& s, const GpuSpec& gpu, const Links& links,
                                          const Calibration* calibration, OpShapes* shapes) {
  if (!s.gpu)
    throw ConfigError("projection performance models GPUs; --backend cpu projects memory only",
                      "leave --backend at gpu (and pick the GPU with --gpu)");
  PerformanceProjection out;
  // A bf16 GEMM's time: measured when the calibration holds the shape, else the roofline.
  auto gemm_time = [&](double M, double N, double K, bool use_fp8) {
    const GemmShape shape{std::llround(M), std::llround(N), std::llround(K)};
    if (!use_fp8 && shapes) shapes->gemms.insert(shape);
    if (!use_fp8 && calibration)
      if (std::optional<double> t = calibration->gemm(shape.m, shape.n, shape.k)) {
        ++out.measured_ops;
        return *t;
      }
    ++out.modelled_ops;
    return gemm_seconds(gpu, M, N, K, use_fp8);
  };
  const ModelConfig& m = s.train.model;
  const config::ParamCounts pc = config::count_parameters(m);
  const double e = s.train.bf16 ? 2.0 : 4.0;
  const double tp = s.tp(), cp = s.cp(), ep = s.ep();
  const double n = static_cast<double>(s.tokens_per_rank());
  const double seq = static_cast<double>(s.train.data.seq_length),
               mbs = static_cast<double>(s.train.micro_batch_size);
  const double h = static_cast<double>(m.hidden_size);
  const double hd = static_cast<double>(
      m.kv_channels > 0 ? m.kv_channels : m.hidden_size / std::max<int64_t>(1, m.num_attention_heads));
  const double H = static_cast<double>(m.num_attention_heads) / tp;
  const double KV = std::max(
      1.0, static_cast<double>(m.num_query_groups > 0 ? m.num_query_groups : m.num_attention_heads) / tp);
  const double q = H * hd, kv = KV * hd, f = static_cast<double>(m.ffn_hidden_size) / tp;
  const double vocab = static_cast<double>(m.vocab_rows()) / tp;
  const double stream = gpu.stream_tbps * 1e12;
  const double gemm_ceiling = gpu.gemm_bf16_tflops * 1e12;
  const bool fp8 = s.train.fp8.enabled;
  const std::string& rg = s.train.recompute.granularity;

  const auto& dims = s.layout.dims;
  const int tpi = dims.tp(), cpi = dims.cp(), epi = dims.ep();
  const double bw_tp = group_bw(s, gpu, links, 1, tpi);
  const double bw_cp = group_bw(s, gpu, links, tpi, cpi);
  const double bw_ep = group_bw(s, gpu, links, tpi, epi);
  const double bw_pp = group_bw(s, gpu, links, tpi * cpi * dims.dp(), dims.pp());

  std::vector<double> fwd(s.ranks.size()), bwd(s.ranks.size());
  std::vector<Acc> acc(s.ranks.size());
  for (size_t ri = 0; ri < s.ranks.size(); ++ri) {
    const RankPlan& r = s.ranks[ri];
    Acc& a = acc[ri];
    double F = 0, B = 0;
    auto gemm3 = [&](const char* name, double M, double N, double K, bool use_fp8, bool recompute) {
      // forward, then dgrad [M,N]x[N,K] and wgrad [N,M]x[M,K] in backward
      const double tf = gemm_time(M, N, K, use_fp8);
      const double tb = gemm_time(M, K, N, use_fp8) + gemm_time(N, K, M, use_fp8);
      F += tf;
      B += tb + (recompute ? tf : 0);
      a.add(name, "compute", tf * (recompute ? 2 : 1) + tb, 6 * M * N * K + (recompute ? 2 * M * N * K : 0));
    };
    auto memory = [&](const char* name, double fwd_bytes, int kernels, bool recompute) {
      const double tf = fwd_bytes / stream + kernels * kKernelFloor;
      const double tb = 2 * tf;
      F += tf;
      B += tb + (recompute ? tf : 0);
      a.add(name, "memory", tf * (recompute ? 2 : 1) + tb);
    };
    auto comm = [&](const char* name, double fwd_s, bool recompute) {
      F += fwd_s;
      B += fwd_s + (recompute ? fwd_s : 0);
      a.add(name, "comm", fwd_s * (recompute ? 3 : 2));
    };
    int idx = 0;
    const int64_t bf16_start = s.train.fp8.bf16_layers_at_start, bf16_end = s.train.fp8.bf16_layers_at_end;
    auto layer = [&](int layer_index, bool moe, bool mtp) {
      const std::vector<int64_t>& ids = s.train.recompute.layer_ids;
      // (An MTP depth k is layer num_layers + k in recompute_layer_ids' numbering.)
      const int64_t id = mtp ? m.num_layers + (idx - static_cast<int>(r.layers.size())) : layer_index;
      const bool full =
          rg == "full" &&
          (ids.empty() ? !(s.train.recompute.method == "block" && idx >= s.train.recompute.num_layers)
                       : std::binary_search(ids.begin(), ids.end(), id));
      const bool sel = rg == "selective";
      ++idx;
      const bool lfp8 =
          fp8 && !mtp && !moe && layer_index >= bf16_start && layer_index < m.num_layers - bf16_end;
      // attention projections
      if (m.mla.enabled) {
        const MlaConfig& x = m.mla;
        const double dq = static_cast<double>(x.qk_head_dim + x.qk_pos_emb_head_dim),
                     dv = static_cast<double>(x.v_head_dim);
        if (x.q_lora_rank > 0) {
          gemm3("attention projections", n, static_cast<double>(x.q_lora_rank), h, false, full);
          gemm3("attention projections", n, H * dq, static_cast<double>(x.q_lora_rank), false, full);
        } else {
          gemm3("attention projections", n, H * dq, h, false, full);
        }
        gemm3("attention projections", n, static_cast<double>(x.kv_lora_rank + x.qk_pos_emb_head_dim), h,
              false, full);
        gemm3("attention projections", n, H * static_cast<double>(x.qk_head_dim + x.v_head_dim),
              static_cast<double>(x.kv_lora_rank), false, full);
        gemm3("attention projections", n, h, H * dv, false, full);
        const double aflops = mbs * H * seq * seq * (dq + dv) / cp;  // causal half of QK^T and PV, x2 FLOP
        const double tf = aflops / (gemm_ceiling * attn_share(dq, false)),
                     tb = 2.5 * aflops / (gemm_ceiling * attn_share(dq, true));
        F += tf;
        B += tb + (full ? tf : 0);
        a.add("attention", "compute", tf * (full ? 2 : 1) + tb, 3.5 * aflops + (full ? aflops : 0));
      } else {
        gemm3("attention projections", n, q + 2 * kv, h, lfp8, full);
        gemm3("attention projections", n, h, q, lfp8, full);
        const double aflops = 2 * mbs * H * seq * seq * hd / cp;
        double tf = aflops / (gemm_ceiling * attn_share(hd, false)),
               tb = 2.5 * aflops / (gemm_ceiling * attn_share(hd, true));
        if (cpi == 1) {  // context-parallel blocks run other shapes: the roofline there
          const AttentionShapeKey key{std::llround(mbs), std::llround(H), std::llround(KV), std::llround(seq),
                                      std::llround(hd)};
          if (shapes) shapes->attention.insert(key);
          if (calibration)
            if (auto t = calibration->attention(key)) {
              std::tie(tf, tb) = *t;
              ++out.measured_ops;
            }
        }
        F += tf;
        B += tb + (full ? tf : 0);
        a.add("attention", "compute", tf * (full ? 2 : 1) + tb, 3.5 * aflops + (full ? aflops : 0));
      }
      // norms, rope, qk-norm: read and write per token
      double elem = 2 * 2 * h + 2 * (q + kv) + (m.qk_layernorm ? 2 * (q + kv) : 0);
      if (moe) {
        const MoeConfig& x = m.moe;
        const double E = static_cast<double>(x.num_experts), k = static_cast<double>(x.topk);
        const double Fe = static_cast<double>(x.ffn_hidden_size) / tp,
                     Fs = static_cast<double>(x.shared_ffn_hidden_size) / tp;
        const double R = n * k;  // rows routed to this rank's experts (average)
        const double El = E / ep;
        gemm3("router", n, E, h, false, full);
        memory("MoE routing and permutation", n * E * 4 * 3 + 4 * R * h * e, 6, full);
        // grouped GEMMs: gate|up and down, forward / dgrad at the forward share, wgrad at its own
        const double rows = R / El;
        const double g1 = 2 * R * 2 * Fe * h, g2 = 2 * R * h * Fe;
        const double sf = grouped_share(rows, false), sw = grouped_share(rows, true);
        const double wout = 2 * El * 3 * Fe * h * 4 / stream;  // f32 weight gradients written and read
        const double tf = (g1 + g2) / (gemm_ceiling * sf);
        const double tb = (g1 + g2) / (gemm_ceiling * sf) + std::max((g1 + g2) / (gemm_ceiling * sw), wout);
        F += tf;
        B += tb + (full ? tf : 0);
        a.add("MoE grouped GEMMs", "compute", tf * (full ? 2 : 1) + tb, 3 * (g1 + g2) + (full ? g1 + g2 : 0));
        elem += 3 * Fe * k;  // swiglu over the routed rows
        if (Fs > 0) {
          gemm3("shared expert GEMMs", n, 2 * Fs, h, false, full);
          gemm3("shared expert GEMMs", n, h, Fs, false, full);
          elem += 3 * Fs;
        }
        if (epi > 1) comm("EP all-to-all", 2 * (R * h * e * (ep - 1) / ep) / bw_ep + 40e-6, full);
      } else {
        gemm3("MLP GEMMs", n, 2 * f, h, lfp8, full);
        gemm3("MLP GEMMs", n, h, f, lfp8, full);
        elem += 3 * f;
      }
      if (lfp8)
        elem += 2 * (h + h + f) + 0.5 * (h + f);  // the casts of the GEMM inputs (and their transposes)
      memory("norms, RoPE, SwiGLU, casts", n * elem * e, 14, full || sel);
      if (tpi > 1) comm("TP collectives", 2 * all_reduce_s(n * h * e, tpi, bw_tp), full);
      if (cpi > 1) comm("CP all-gather", gather_s(cp * n * 2 * kv * e, cpi, bw_cp), full);
    };
    for (int l : r.layers) layer(l, m.moe.enabled() && m.moe.is_moe_layer(l), false);
    for (int i = 0; i < r.mtp_layers; ++i) {
      layer(static_cast<int>(m.num_layers) - 1, m.moe.enabled() && m.moe.is_moe_layer(m.num_layers - 1),
            true);
      gemm3("MTP projections", n, h, 2 * h, false, false);
      gemm3("output layer", n, vocab, h, fp8 && s.train.fp8.output_layer, false);
    }
    if (r.loss) {
      const double rows = n;  // every token's logits (sequence parallelism gathers them before the head)
      gemm3("output layer", rows, vocab, h, fp8 && s.train.fp8.output_layer, false);
      memory("cross-entropy", rows * vocab * e * 2, 4, false);
      if (tpi > 1) comm("TP collectives", all_reduce_s(rows * 12, tpi, bw_tp), false);
    }
    if (r.embedding) memory("embedding", n * h * (e + 4), 2, false);
    fwd[ri] = F;
    bwd[ri] = B;
  }

  // The step: the pipeline schedule with these costs, or micro-batches one after the other.
  const double mb = static_cast<double>(s.microbatches);
  double step_compute = 0;
  int slowest = 0;
  for (size_t i = 0; i < s.ranks.size(); ++i)
    if (fwd[i] + bwd[i] > fwd[slowest] + bwd[slowest]) slowest = static_cast<int>(i);
  if (s.plan) {
    const parallel::PipelineLayout& l = s.plan->layout;
    parallel::PipelineCosts costs;
    costs.p2p = n * (s.sequence_parallel() ? h / tp : h) * e / bw_pp + 20e-6;
    costs.chunk.assign(l.pp(), std::vector<parallel::ChunkCosts>(l.vpp()));
    for (int r = 0; r < l.pp(); ++r) {
      double total = 0;
      std::vector<double> w(l.vpp());
      for (int c = 0; c < l.vpp(); ++c)
        total += w[c] = l.layer_count(r, c) + (l.at(r, c).loss ? 1.0 : 0.0) + 1e-3;
      for (int c = 0; c < l.vpp(); ++c) {
        parallel::ChunkCosts& cc = costs.chunk[r][c];
        cc.f = fwd[r] * w[c] / total;
        cc.b = bwd[r] * w[c] / total;
        cc.bi = cc.b / 2;
        cc.bw = cc.b / 2;
      }
    }
    const parallel::SimResult sim = parallel::simulate(s.plan->schedule, costs);
    step_compute = sim.step_time;
    out.bubble_s = std::max(0.0, sim.step_time - mb * (fwd[slowest] + bwd[slowest]));
    out.compute_s = step_compute - out.bubble_s;
  } else {
    step_compute = mb * (fwd[0] + bwd[0]);
    out.compute_s = step_compute;
  }
  for (size_t i = 0; i < acc.size(); ++i)
    for (auto& [name, op] : acc[i].ops) {
      op.seconds *= mb;
      op.flops *= mb;
    }

  // Data-parallel gradient reduction (and ZeRO-1's parameter gather / FSDP's per-layer gathers), hidden under
  // the backward when overlapped.
  const parallel::Sharding sh = s.layout.sharding;
  const bool fsdp = sh == parallel::Sharding::kOptimGradsParams,
             zero1 = sh == parallel::Sharding::kOptim || sh == parallel::Sharding::kOptimGrads;
  const int dpr = dims.dp() * cpi;
  const double edp = static_cast<double>(dims.dp() * cpi) / ep;
  const double bw_dp = group_bw(s, gpu, links, tpi, dpr);
  const RankParams params = rank_parameters(s, s.ranks[slowest]);
  const double p_dense = params.dense, p_expert = params.expert;
  const double gbytes = s.train.parallel.grad_reduce_in_bf16 ? 2 : 4;
  double dp_comm = 0, hidden_under = 0;
  if (dpr > 1 || edp > 1) {
    const int edpi = std::max(1, static_cast<int>(edp));
    if (fsdp) {
      const double per_mb = 2 * gather_s(p_dense * 2, dpr, bw_dp) + gather_s(p_dense * 4, dpr, bw_dp) +
                            2 * gather_s(p_expert * 2, edpi, bw_dp) + gather_s(p_expert * 4, edpi, bw_dp);
      dp_comm = mb * per_mb;
      hidden_under = 0.85 * mb * (fwd[slowest] + bwd[slowest]);
    } else if (zero1) {
      dp_comm = gather_s(p_dense * gbytes, dpr, bw_dp) + gather_s(p_expert * gbytes, edpi, bw_dp) +
                gather_s(p_dense * 2, dpr, bw_dp) + gather_s(p_expert * 2, edpi, bw_dp);
      hidden_under = (s.train.parallel.overlap_grad_reduce ? 0.8 * bwd[slowest] : 0) +
                     (s.train.parallel.overlap_param_gather ? 0.8 * fwd[slowest] : 0);
    } else {
      dp_comm = all_reduce_s(p_dense * gbytes, dpr, bw_dp) + all_reduce_s(p_expert * gbytes, edpi, bw_dp);
      hidden_under = s.train.parallel.overlap_grad_reduce ? 0.8 * bwd[slowest] : 0;
    }
    if (hidden_under > 0) {
      // The last region to finish its backward (the embedding and the first layer) reduces after the backward
      // ends, and the overlapped part slows the kernels it runs beside (NCCL's SMs and memory traffic): a
      // third of it shows (the DP 2 runs of docs/performance.md).
      const RankPlan& r = s.ranks[slowest];
      const double tail_params = (r.embedding ? static_cast<double>(pc.embedding) / tp : 0) +
                                 (r.layers.empty() ? 0 : p_dense / std::max<size_t>(1, r.layers.size() + 2));
      const double tail = fsdp ? 0 : all_reduce_s(tail_params * gbytes, dpr, bw_dp);
      out.exposed_comm_s = std::min(
          dp_comm, tail + 0.3 * std::max(0.0, dp_comm - tail) + std::max(0.0, dp_comm - tail - hidden_under));
      acc[slowest].add("data-parallel collectives", "comm", dp_comm);
    } else {
      out.exposed_comm_s = dp_comm;
      acc[slowest].add("data-parallel collectives", "comm", dp_comm);
    }
  }

  // Optimizer: the gradient norm and AdamW stream their state; one GPU and DDP run the update under the next
  // step's forward (train/overlapped_update.h), which hides the part the forward's own traffic leaves room
  // for.
  const StateShards shards = state_shards(s);
  const double local = p_dense / shards.dense + p_expert / shards.expert;
  const bool remainders = !(zero1 || fsdp);
  // Bytes per parameter of the update (ops/cuda/optimizer.cu): 30 (28 in remainders) with f32 moments; each
  // bf16 moment reads and writes 4 fewer.
  const OptimConfig& oc = s.train.optim;
  const double moment_saving =
      4.0 * ((oc.exp_avg_dtype == DType::kBF16) + (oc.exp_avg_sq_dtype == DType::kBF16));
  const double adam = local * ((remainders ? 28.0 : 30.0) - moment_saving) / stream;
  const double norm = local * 4 / stream;
  const bool overlapped = !(zero1 || fsdp) && !s.plan;
  const double hideable = overlapped ? 0.45 * fwd[slowest] * mb : 0;
  out.optimizer_s = std::max(adam - hideable, 0.15 * adam) + 0.3 * norm;
  acc[slowest].add("optimizer (AdamW + grad norm)", "optimizer", adam + norm);

  out.step_time_s = step_compute + out.exposed_comm_s + out.optimizer_s;
  for (const auto& [name, op] : acc[slowest].ops)
    if (op.kind == "comm" && name != "data-parallel collectives") out.comm_in_compute_s += op.seconds;
  const double tokens_per_step = static_cast<double>(s.train.global_batch_size) * seq;
  out.tokens_per_s_per_gpu = tokens_per_step / out.step_time_s / s.world;
  const double flops_per_token = config::flops_per_token(m, s.train.data.seq_length).causal;
  out.model_tflops_per_gpu = out.tokens_per_s_per_gpu * flops_per_token / 1e12;
  out.mfu = out.model_tflops_per_gpu / gpu.bf16_tflops;  // against the BF16 peak, FP8 runs included
  out.slowest_rank = slowest;
  for (size_t i = 0; i < s.ranks.size(); ++i) {
    RankTime rt;
    rt.pp_rank = s.ranks[i].pp_rank;
    rt.forward_s = fwd[i];
    rt.backward_s = bwd[i];
    for (auto& [name, op] : acc[i].ops) rt.ops.push_back(op);
    std::sort(rt.ops.begin(), rt.ops.end(),
              [](const OpTime& x, const OpTime& y) { return x.seconds > y.seconds; });
    out.ranks.push_back(std::move(rt));
  }
  out.assumptions.push_back(fmt::format("{}: GEMMs at up to {:.0f} TF (bf16){}, streaming at {:.2f} TB/s{}",
                                        gpu.name, gpu.gemm_bf16_tflops,
                                        fp8 ? fmt::format(", {:.0f} TF (fp8)", gpu.gemm_fp8_tflops) : "",
                                        gpu.stream_tbps, gpu.measured ? " (measured)" : " (assumed)"));
  out.assumptions.push_back(fmt::format(
      "links: {:.0f} GB/s per GPU inside a node, {:.0f} GB/s between nodes, {:.0f}% reached by collectives",
      links.intra_node_gbps > 0 ? links.intra_node_gbps : gpu.nvlink_gbps, links.inter_node_gbps,
      links.efficiency * 100));
  if (calibration)
    out.assumptions.push_back(fmt::format(
        "{} of {} GEMM / attention time lookups measured on {} ({}, {}); the rest from the roofline",
        out.measured_ops, out.measured_ops + out.modelled_ops, calibration->device, calibration->source,
        calibration->date));
  out.assumptions.push_back(
      "TP / CP / EP collectives exposed (no overlap with GEMMs); data-parallel ones overlapped "
      "with the backward when overlap_grad_reduce is on");
  return out;
}

}  // namespace primus::projection
