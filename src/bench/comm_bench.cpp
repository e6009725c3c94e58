#include "bench/comm_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "comm/world.h"
#include "core/log.h"

namespace primus::bench {

using namespace primus::comm;

double bus_factor(const std::string& op, int n) {
  if (n <= 1) return op == "sendrecv" || op == "broadcast" ? 1.0 : 0.0;
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "reduce_scatter" || op == "all_gather" || op == "all_to_all" || op == "all_to_all_v")
    return static_cast<double>(n - 1) / n;
  return 1.0;
}

std::vector<int64_t> power_of_two_sizes(int64_t min_bytes, int64_t max_bytes) {
  if (min_bytes <= 0 || max_bytes < min_bytes)
    throw ConfigError(
        fmt::format("benchmark comm: sizes {}..{} (need 0 < min <= max)", min_bytes, max_bytes));
  std::vector<int64_t> v;
  for (int64_t b = min_bytes; b <= max_bytes; b *= 2) v.push_back(b);
  return v;
}

int64_t parse_bytes(const std::string& text) {
  if (text.empty()) throw ConfigError("benchmark comm: empty size");
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    throw ConfigError(
        fmt::format("benchmark comm: size '{}' is not a number (e.g. 4096, 64K, 16M, 1G)", text));
  }
  std::string unit = text.substr(pos);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  double mult = 1;
  if (unit == "K" || unit == "k") {
    mult = 1024;
  } else if (unit == "M" || unit == "m") {
    mult = 1024.0 * 1024;
  } else if (unit == "G" || unit == "g") {
    mult = 1024.0 * 1024 * 1024;
  } else if (!unit.empty()) {
    throw ConfigError(fmt::format("benchmark comm: size '{}': unknown unit '{}' (K, M or G)", text, unit));
  }
  if (!(v > 0)) throw ConfigError(fmt::format("benchmark comm: size '{}' must be positive", text));
  return static_cast<int64_t>(v * mult);
}

void write_comm_report(const std::string& path, const std::vector<CommBenchRow>& rows) {
  std::ofstream f(path);
  if (!f) throw Error(ErrorKind::kRuntime, "benchmark comm: cannot write " + path);
  auto ends = [&](const char* ext) {
    const std::string e(ext);
    return path.size() >= e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0;
  };
  if (ends(".jsonl")) {
    for (const CommBenchRow& r : rows)
      f << nlohmann::json{{"op", r.op},
                          {"bytes", r.bytes},
                          {"count", r.count},
                          {"dtype", r.dtype},
                          {"ranks", r.ranks},
                          {"time_us", r.time_us},
                          {"algbw_gbps", r.algbw_gbps},
                          {"busbw_gbps", r.busbw_gbps},
                          {"check", r.check}}
               .dump()
        << '\n';
  } else if (ends(".csv")) {
    f << "op,bytes,count,dtype,ranks,time_us,algbw_gbps,busbw_gbps,check\n";
    for (const CommBenchRow& r : rows)
      f << fmt::format("{},{},{},{},{},{:.3f},{:.4f},{:.4f},{}\n", r.op, r.bytes, r.count, r.dtype, r.ranks,
                       r.time_us, r.algbw_gbps, r.busbw_gbps, r.check);
  } else if (ends(".md")) {
    f << "| op | bytes | count | dtype | ranks | time (us) | algbw (GB/s) | busbw (GB/s) | check |\n"
         "|---|---:|---:|---|---:|---:|---:|---:|---|\n";
    for (const CommBenchRow& r : rows)
      f << fmt::format("| {} | {} | {} | {} | {} | {:.1f} | {:.2f} | {:.2f} | {} |\n", r.op, r.bytes, r.count,
                       r.dtype, r.ranks, r.time_us, r.algbw_gbps, r.busbw_gbps, r.check);
  } else {
    throw ConfigError(fmt::format("benchmark comm: --output-file {}: use .md, .csv or .jsonl", path));
  }
}

namespace {

// Input element i of rank r for op salt k: a small integer, exact in every dtype and every summation order.
double pattern(int r, int64_t i, int salt) {
  return static_cast<double>(static_cast<int64_t>((r + 1) * 7 + i * 3 + salt) % 9) - 4.0;
}

Tensor host_tensor(DType dt, int64_t n, int r, int salt, int64_t offset = 0) {
  Tensor t = Tensor::empty({n}, dt);
  for (int64_t i = 0; i < n; ++i) {
    const double v = pattern(r, offset + i, salt);
    switch (dt) {
      case DType::kF32:
        t.data<float>()[i] = static_cast<float>(v);
        break;
      case DType::kBF16:
        t.data<bf16_t>()[i] = float_to_bf16(static_cast<float>(v));
        break;
      case DType::kI32:
        t.data<int32_t>()[i] = static_cast<int32_t>(v);
        break;
      default:
        throw ConfigError(fmt::format("benchmark comm: dtype {} (bf16, f32 or i32)", dtype_name(dt)));
    }
  }
  return t;
}

// all_to_all_v's uneven split, as an MoE dispatch makes it: rank s sends rank j base x 2k / (n - 1) elements,
// k = (s + j) % n, so every rank sends and receives base x n in all but each pair differs and one chunk per
// rank is empty (k = 0).
int64_t v_count(int s, int j, int n, int64_t base) {
  if (n <= 1) return base;
  return base * 2 * ((s + j) % n) / (n - 1);
}

struct Bufs {
  Communicator& comm;
  Stream stream;
  Tensor dev(const Tensor& host) {
    if (comm.device_type() == DeviceType::kCPU) return host;
    Tensor d = Tensor::empty(host.shape(), host.dtype(), stream);
    d.copy_from(host, stream);
    return d;
  }
  Tensor empty(int64_t n, DType dt) {
    return comm.device_type() == DeviceType::kCPU ? Tensor::zeros({n}, dt) : Tensor::zeros({n}, dt, stream);
  }
  std::vector<double> host(const Tensor& t) {
    if (t.device().is_cpu()) return t.to_vector<double>();
    stream_sync(stream);
    return t.to(Stream::cpu()).to_vector<double>();
  }
};

}  // namespace

int run_comm_benchmark(const CommBenchOptions& o) {
  if (o.warmup < 0 || o.iters <= 0)
    throw ConfigError(
        fmt::format("benchmark comm: --warmup {} --iters {} (need >= 0 and > 0)", o.warmup, o.iters));
  for (const std::string& op : o.ops)
    if (op != "all_reduce" && op != "reduce_scatter" && op != "all_gather" && op != "all_to_all" &&
        op != "all_to_all_v" && op != "sendrecv" && op != "broadcast")
      throw ConfigError(
          fmt::format("benchmark comm: unknown op '{}'", op),
          "ops: all_reduce reduce_scatter all_gather all_to_all all_to_all_v sendrecv broadcast");
  const std::vector<int64_t> sizes = o.bytes.empty() ? power_of_two_sizes(o.min_bytes, o.max_bytes) : o.bytes;
  const DType dt = dtype_from_name(o.dtype);
  if (dt != DType::kBF16 && dt != DType::kF32 && dt != DType::kI32)
    throw ConfigError(fmt::format("benchmark comm: --dtype {} (bf16, f32 or i32)", o.dtype));

  LaunchEnv env = resolve_launch_env(process_env_lookup());
  World w = init_world(env, {.backend = o.backend, .timeout_s = o.timeout_s});
  Communicator& comm = *w.comm;
  const Stream stream =
      comm.device_type() == DeviceType::kCPU ? Stream::cpu() : cuda_compute_stream(env.local_rank);
  Bufs b{comm, stream};
  const int n = comm.size(), r = comm.rank();
  const int64_t es = static_cast<int64_t>(dtype_size(dt));
  std::vector<CommBenchRow> rows;
  int failures = 0;
  log::info("{:>14} {:>12} {:>12} {:>11} {:>11} {:>6}", "op", "bytes", "time(us)", "algbw GB/s", "busbw GB/s",
            "check");
  for (const std::string& op : o.ops) {
    for (int64_t bytes : sizes) {
      // Element counts: the buffer nccl-tests sizes by S, rounded to a multiple of n where it is split.
      const bool split =
          op == "reduce_scatter" || op == "all_gather" || op == "all_to_all" || op == "all_to_all_v";
      int64_t count = std::max<int64_t>(1, bytes / es);
      if (split) count = std::max<int64_t>(n, count / n * n);
      const int64_t chunk = split ? count / n : count;
      Tensor full_in, small_in, out;
      std::vector<int64_t> send_counts(static_cast<size_t>(n)), recv_counts(static_cast<size_t>(n));
      std::vector<int64_t> recv_start(static_cast<size_t>(n) + 1, 0),
          offset_at_sender(static_cast<size_t>(n));
      if (op == "all_to_all_v") {
        for (int j = 0; j < n; ++j) {
          send_counts[j] = v_count(r, j, n, chunk);
          recv_counts[j] = v_count(j, r, n, chunk);
          recv_start[j + 1] = recv_start[j] + recv_counts[j];
          int64_t off = 0;  // where rank j's chunk for us starts in its send buffer
          for (int k = 0; k < r; ++k) off += v_count(j, k, n, chunk);
          offset_at_sender[j] = off;
        }
      }
      if (op == "all_to_all_v") {
        full_in = b.dev(host_tensor(dt, count, r, 5));
        out = b.empty(std::max<int64_t>(1, recv_start[n]), dt);
      } else if (op == "all_reduce" || op == "broadcast") {
        full_in = b.dev(host_tensor(dt, count, r, 1));
      } else if (op == "reduce_scatter" || op == "all_to_all") {
        full_in = b.dev(host_tensor(dt, count, r, 2));
        out = b.empty(op == "reduce_scatter" ? chunk : count, dt);
      } else if (op == "all_gather") {
        small_in = b.dev(host_tensor(dt, chunk, r, 3));
        out = b.empty(count, dt);
      } else {  // sendrecv
        full_in = b.dev(host_tensor(dt, count, r, 4));
        out = b.empty(count, dt);
      }
      auto once = [&] {
        if (op == "all_reduce") {
          // Re-running on its own output keeps the values growing; --check runs once on a fresh buffer.
          comm.all_reduce(full_in, ReduceOp::kSum, stream, "benchmark");
        } else if (op == "reduce_scatter") {
          comm.reduce_scatter(full_in, out, ReduceOp::kSum, stream, "benchmark");
        } else if (op == "all_gather") {
          comm.all_gather(small_in, out, stream, "benchmark");
        } else if (op == "all_to_all") {
          comm.all_to_all(full_in, out, stream, "benchmark");
        } else if (op == "all_to_all_v") {
          comm.all_to_all_v(full_in, send_counts, out, recv_counts, stream, "benchmark");
        } else if (op == "broadcast") {
          comm.broadcast(full_in, 0, stream, "benchmark");
        } else if (n > 1) {
          const int to = (r + 1) % n, from = (r - 1 + n) % n;
          if (r % 2 == 0) {
            comm.send(full_in, to, stream, "benchmark");
            comm.recv(out, from, stream, "benchmark");
          } else {
            comm.recv(out, from, stream, "benchmark");
            comm.send(full_in, to, stream, "benchmark");
          }
        }
      };
      std::string check = "-";
      if (o.check) {
        // One run on fresh inputs, every element compared with the exact expectation.
        if (op == "all_reduce" || op == "broadcast") full_in = b.dev(host_tensor(dt, count, r, 1));
        once();
        std::vector<double> got = b.host(op == "all_reduce" || op == "broadcast" ? full_in : out);
        if (op == "all_to_all_v") got.resize(static_cast<size_t>(recv_start[n]));
        bool ok = true;
        for (int64_t i = 0; i < static_cast<int64_t>(got.size()) && ok; ++i) {
          double e = 0;
          if (op == "all_reduce") {
            for (int s = 0; s < n; ++s) e += pattern(s, i, 1);
          } else if (op == "broadcast") {
            e = pattern(0, i, 1);
          } else if (op == "reduce_scatter") {
            for (int s = 0; s < n; ++s) e += pattern(s, r * chunk + i, 2);
          } else if (op == "all_to_all") {
            e = pattern(static_cast<int>(i / chunk), r * chunk + i % chunk, 2);
          } else if (op == "all_to_all_v") {
            int s_from = 0;
            while (i >= recv_start[s_from + 1]) ++s_from;
            e = pattern(s_from, offset_at_sender[s_from] + (i - recv_start[s_from]), 5);
          } else if (op == "all_gather") {
            e = pattern(static_cast<int>(i / chunk), i % chunk, 3);
          } else {
            e = n > 1 ? pattern((r - 1 + n) % n, i, 4) : 0;
          }
          if (got[i] != e) {
            ok = false;
            log::error("benchmark comm --check FAILED on rank {}: {} {} bytes element {}: got {} expected {}",
                       r, op, bytes, i, got[i], e);
          }
        }
        check = ok ? "ok" : "FAIL";
        if (!ok) ++failures;
        if (op == "all_reduce" || op == "broadcast") full_in = b.dev(host_tensor(dt, count, r, 1));
      }
      for (int i = 0; i < o.warmup; ++i) once();
      stream_sync(stream);
      comm.barrier("benchmark");
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < o.iters; ++i) once();
      stream_sync(stream);
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / o.iters;
      // all_to_all_v: S is what this rank sends (its share of the uneven split).
      int64_t sent = count;
      if (op == "all_to_all_v") {
        sent = 0;
        for (int64_t c : send_counts) sent += c;
      }
      CommBenchRow row{op, o.dtype, n, sent * es, sent, us, 0, 0, check};
      row.algbw_gbps = static_cast<double>(row.bytes) / (us * 1e-6) / 1e9;
      // The share of S that leaves the rank: (n-1)/n for even splits; all_to_all_v's own chunk varies by
      // rank.
      const double leaves = op == "all_to_all_v" && sent > 0
                                ? static_cast<double>(sent - send_counts[static_cast<size_t>(r)]) / sent
                                : bus_factor(op, n);
      row.busbw_gbps = row.algbw_gbps * leaves;
      log::info("{:>14} {:>12} {:>12.1f} {:>11.2f} {:>11.2f} {:>6}", op, row.bytes, us, row.algbw_gbps,
                row.busbw_gbps, check);
      rows.push_back(row);
    }
  }
  // Every rank's check result counts.
  Tensor fails = b.dev(Tensor::from_vector<int32_t>({failures}, {1}));
  comm.all_reduce(fails, ReduceOp::kSum, stream, "check failures");
  const int total_failures = static_cast<int>(b.host(fails)[0]);
  log::info("algbw, busbw in GB/s (nccl-tests' definitions; {} ranks, {} backend, dtype {}){}", n,
            comm.backend(), o.dtype,
            o.check ? fmt::format("; --check: {} failure(s) on all ranks", total_failures) : "");
  if (r == 0 && !o.output_file.empty()) {
    write_comm_report(o.output_file, rows);
    log::info("wrote {}", o.output_file);
  }
  return total_failures == 0 ? 0 : 1;
}

}  // namespace primus::bench
