#include "parallel/comm_selftest.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>

#include "comm/world.h"
#include "core/log.h"
#include "parallel/process_groups.h"

namespace primus::parallel {

using namespace primus::comm;

namespace {

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// Input element `i` of rank `r` for test case `salt`, as a double (exactly representable in the dtype).
// Magnitudes span 2^-4 .. 2^4 so that a different summation order would change f32 results.
double value_of(DType dt, uint64_t salt, int r, int64_t i) {
  uint64_t h =
      mix(salt * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(r) * 1000003ULL + static_cast<uint64_t>(i));
  if (dt == DType::kI32 || dt == DType::kI64)
    return static_cast<double>(static_cast<int64_t>(h % 2001) - 1000);
  double u = static_cast<double>(h >> 11) / static_cast<double>(1ULL << 53) * 2.0 - 1.0;
  double v = std::ldexp(u, static_cast<int>((h >> 3) % 9) - 4);
  if (dt == DType::kF32) return static_cast<float>(v);
  if (dt == DType::kBF16) return bf16_to_float(float_to_bf16(static_cast<float>(v)));
  return v;
}

// A host tensor of `n` elements of rank r's inputs.
Tensor make_input(DType dt, uint64_t salt, int r, int64_t n, int64_t offset = 0) {
  Tensor t = Tensor::empty({n}, dt);
  for (int64_t i = 0; i < n; ++i) {
    double v = value_of(dt, salt, r, offset + i);
    switch (dt) {
      case DType::kF32:
        t.data<float>()[i] = static_cast<float>(v);
        break;
      case DType::kF64:
        t.data<double>()[i] = v;
        break;
      case DType::kBF16:
        t.data<bf16_t>()[i] = float_to_bf16(static_cast<float>(v));
        break;
      case DType::kI32:
        t.data<int32_t>()[i] = static_cast<int32_t>(v);
        break;
      case DType::kI64:
        t.data<int64_t>()[i] = static_cast<int64_t>(v);
        break;
      default:
        PRIMUS_FAIL("selftest: dtype {}", dtype_name(dt));
    }
  }
  return t;
}

// The fixed-order reference (communicator.h): ((x_0 + x_1) + x_2) ..., f32 accumulation for bf16.
double reference_reduce(DType dt, ReduceOp op, uint64_t salt, const std::vector<int>& ranks, int64_t i) {
  auto acc_add = [&](double a, double b) -> double {
    if (dt == DType::kF32 || dt == DType::kBF16)
      return static_cast<float>(static_cast<float>(a) + static_cast<float>(b));
    return a + b;
  };
  double acc = value_of(dt, salt, ranks[0], i);
  for (size_t k = 1; k < ranks.size(); ++k) {
    double v = value_of(dt, salt, ranks[k], i);
    if (op == ReduceOp::kMax) {
      acc = std::max(acc, v);
    } else if (op == ReduceOp::kMin) {
      acc = std::min(acc, v);
    } else {
      acc = acc_add(acc, v);
    }
  }
  const double n = static_cast<double>(ranks.size());
  if (op == ReduceOp::kAvg) {
    if (dt == DType::kF32 || dt == DType::kBF16) {
      acc = static_cast<float>(static_cast<float>(acc) / static_cast<float>(n));
    } else if (dt == DType::kF64) {
      acc = acc / n;
    } else {
      acc = static_cast<double>(static_cast<int64_t>(acc) / static_cast<int64_t>(n));
    }
  }
  if (dt == DType::kBF16) acc = bf16_to_float(float_to_bf16(static_cast<float>(acc)));
  return acc;
}

struct Checker {
  Communicator& comm;
  bool exact;  // host backends: bitwise; nccl: tolerance
  Stream stream;
  int passed = 0, failed = 0;

  Tensor to_dev(const Tensor& host) {
    if (comm.device_type() == DeviceType::kCPU) return host;
    Tensor d = Tensor::empty(host.shape(), host.dtype(), stream);
    d.copy_from(host, stream);
    return d;
  }
  Tensor to_host(const Tensor& t) {
    if (t.device().is_cpu()) return t;
    stream_sync(stream);
    return t.to(Stream::cpu());
  }
  Tensor empty(const Shape& s, DType dt) {
    return comm.device_type() == DeviceType::kCPU ? Tensor::empty(s, dt) : Tensor::empty(s, dt, stream);
  }

  // Compares out[i] with expect(i) for every i; tolerance scaled by `scale(i)` for inexact backends.
  template <typename Expect>
  void check(const std::string& what, const Tensor& out_any, Expect expect, double magnitude = 1.0) {
    Tensor out = to_host(out_any);
    std::vector<double> got = out.to_vector<double>();
    const double tol = out.dtype() == DType::kBF16 ? 1e-2 : (out.dtype() == DType::kF32 ? 1e-5 : 1e-12);
    int64_t bad = -1;
    for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i) {
      double e = expect(i);
      bool ok = exact || !is_floating(out.dtype())
                    ? (got[i] == e || (std::isnan(got[i]) && std::isnan(e)))
                    : std::fabs(got[i] - e) <= tol * magnitude * (1 + std::fabs(e));
      if (!ok) {
        bad = i;
        break;
      }
    }
    if (bad < 0) {
      ++passed;
      return;
    }
    ++failed;
    log::error("selftest FAILED on rank {}: {} element {}: got {} expected {}", comm.world_rank(), what, bad,
               got[bad], expect(bad));
  }
};

void run_case(Checker& c, DType dt, int64_t k, uint64_t salt) {
  Communicator& comm = c.comm;
  const int n = comm.size(), r = comm.rank();
  std::vector<int> all(n);
  for (int i = 0; i < n; ++i) all[i] = i;
  const std::string tag = fmt::format("{} x {}", dtype_name(dt), k);
  const double mag = 16.0 * n;

  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    Tensor t = c.to_dev(make_input(dt, salt, r, k));
    comm.all_reduce(t, op, c.stream, "selftest");
    c.check(
        fmt::format("all_reduce {} {}", reduce_op_name(op), tag), t,
        [&](int64_t i) { return reference_reduce(dt, op, salt, all, i); }, mag);
  }
  {  // bitwise repeatability
    Tensor a = c.to_dev(make_input(dt, salt + 1, r, k)), b = c.to_dev(make_input(dt, salt + 1, r, k));
    comm.all_reduce(a, ReduceOp::kSum, c.stream, "repeat 1");
    comm.all_reduce(b, ReduceOp::kSum, c.stream, "repeat 2");
    Tensor ha = c.to_host(a), hb = c.to_host(b);
    bool same = std::memcmp(ha.data_ptr(), hb.data_ptr(), ha.nbytes()) == 0;
    if (same) {
      ++c.passed;
    } else {
      ++c.failed;
      log::error("selftest FAILED on rank {}: all_reduce {} is not bitwise repeatable", comm.world_rank(),
                 tag);
    }
  }
  {  // reduce_scatter: input [n*k] of rank r = elements [0, n*k) of its stream; out = chunk r
    Tensor in = c.to_dev(make_input(dt, salt + 2, r, n * k));
    Tensor out = c.empty({k}, dt);
    comm.reduce_scatter(in, out, ReduceOp::kSum, c.stream, "selftest");
    c.check(
        "reduce_scatter sum " + tag, out,
        [&](int64_t i) { return reference_reduce(dt, ReduceOp::kSum, salt + 2, all, r * k + i); }, mag);
  }
  {
    Tensor in = c.to_dev(make_input(dt, salt + 3, r, k));
    Tensor out = c.empty({n * k}, dt);
    comm.all_gather(in, out, c.stream, "selftest");
    c.check("all_gather " + tag, out,
            [&](int64_t i) { return value_of(dt, salt + 3, static_cast<int>(i / k), i % k); });
  }
  {  // all_to_all: chunk j of rank r's input = its stream at [j*k, (j+1)*k)
    Tensor in = c.to_dev(make_input(dt, salt + 4, r, n * k));
    Tensor out = c.empty({n * k}, dt);
    comm.all_to_all(in, out, c.stream, "selftest");
    c.check("all_to_all " + tag, out,
            [&](int64_t i) { return value_of(dt, salt + 4, static_cast<int>(i / k), r * k + i % k); });
  }
  {  // all_to_all_v: rank s sends (s + j) % 3 * k' elements to rank j (some chunks empty)
    auto cnt = [&](int s, int j) -> int64_t { return ((s + j) % 3) * std::max<int64_t>(1, k / 2); };
    std::vector<int64_t> sc(n), rc(n);
    int64_t ns = 0, nr = 0;
    for (int j = 0; j < n; ++j) {
      sc[j] = cnt(r, j);
      rc[j] = cnt(j, r);
      ns += sc[j];
      nr += rc[j];
    }
    Tensor in = c.to_dev(make_input(dt, salt + 5, r, std::max<int64_t>(ns, 1)));
    Tensor out = c.empty({std::max<int64_t>(nr, 1)}, dt);
    comm.all_to_all_v(in, sc, out, rc, c.stream, "selftest");
    // Expected: for each source s in order, its chunk for r starts at the sum of cnt(s, j < r).
    std::vector<std::pair<int, int64_t>> src(nr);  // (source rank, element index in its stream)
    int64_t pos = 0;
    for (int s = 0; s < n; ++s) {
      int64_t off = 0;
      for (int j = 0; j < r; ++j) off += cnt(s, j);
      for (int64_t e = 0; e < cnt(s, r); ++e) src[pos++] = {s, off + e};
    }
    if (nr > 0)
      c.check("all_to_all_v " + tag, out.slice(0, nr),
              [&](int64_t i) { return value_of(dt, salt + 5, src[i].first, src[i].second); });
  }
  {
    const int root = n - 1;
    Tensor t = c.to_dev(make_input(dt, salt + 6, r, k));
    comm.broadcast(t, root, c.stream, "selftest");
    c.check("broadcast " + tag, t, [&](int64_t i) { return value_of(dt, salt + 6, root, i); });
  }
  if (n > 1) {  // send/recv around the ring, even ranks first (no cycle of blocked senders)
    const int to = (r + 1) % n, from = (r - 1 + n) % n;
    Tensor mine = c.to_dev(make_input(dt, salt + 7, r, k));
    Tensor got = c.empty({k}, dt);
    if (r % 2 == 0) {
      comm.send(mine, to, c.stream, "ring");
      comm.recv(got, from, c.stream, "ring");
    } else {
      comm.recv(got, from, c.stream, "ring");
      comm.send(mine, to, c.stream, "ring");
    }
    c.check("send/recv " + tag, got, [&](int64_t i) { return value_of(dt, salt + 7, from, i); });
  }
}

DType parse_dtype(const std::string& s) {
  DType dt = dtype_from_name(s);
  if (dt != DType::kF32 && dt != DType::kF64 && dt != DType::kBF16 && dt != DType::kI32 && dt != DType::kI64)
    throw ConfigError(fmt::format("comm selftest: dtype {} is not one the collectives reduce", s));
  return dt;
}

Stream stream_for(const World& w) {
  if (w.comm->device_type() == DeviceType::kCPU) return Stream::cpu();
  return cuda_compute_stream(w.comm->device_type() == DeviceType::kCUDA ? w.env.local_rank : 0);
}

}  // namespace

int run_comm_selftest(const SelftestOptions& o) {
  LaunchEnv env = resolve_launch_env(process_env_lookup());
  World w = init_world(env, {.backend = o.backend, .timeout_s = o.timeout_s});
  Communicator& world = *w.comm;
  Checker c{world, std::string(world.backend()) != "nccl", stream_for(w)};
  world.barrier("start");

  if (!o.fault.empty() && o.fault_rank == world.rank()) {
    if (o.fault == "die") {
      log::error("selftest: rank {} kills itself (--fault die)", world.rank());
      kill(getpid(), SIGKILL);
    } else if (o.fault == "hang") {
      log::error("selftest: rank {} stops answering (--fault hang)", world.rank());
      for (;;) pause();
    } else {
      throw ConfigError(fmt::format("--fault '{}': expected die or hang", o.fault));
    }
  }
  if (!o.fault.empty()) {
    // The others enter a collective that can never finish.
    Tensor t = c.to_dev(make_input(DType::kF32, 99, world.rank(), 1 << 16));
    world.all_reduce(t, ReduceOp::kSum, c.stream, "fault injection");
    stream_sync(c.stream);
    log::error("selftest: the collective with a dead/hung rank returned; expected a failure");
    return 1;
  }

  uint64_t salt = 1;
  for (const std::string& name : o.dtypes) {
    DType dt = parse_dtype(name);
    for (int64_t k : o.sizes) {
      run_case(c, dt, k, salt);
      salt += 100;
    }
  }
  // Split: even and odd world ranks, ordered by descending rank (key = -rank).
  {
    auto sub = world.split(world.rank() % 2, -world.rank(), "parity");
    std::vector<int> members;
    for (int r = world.size() - 1; r >= 0; --r)
      if (r % 2 == world.rank() % 2) members.push_back(r);
    const int expect_rank =
        static_cast<int>(std::find(members.begin(), members.end(), world.rank()) - members.begin());
    if (!sub || sub->size() != static_cast<int>(members.size()) || sub->rank() != expect_rank) {
      ++c.failed;
      log::error("selftest FAILED on rank {}: split gave rank {} of {}, expected {} of {}", world.rank(),
                 sub ? sub->rank() : -1, sub ? sub->size() : 0, expect_rank, members.size());
    } else {
      ++c.passed;
      Checker sc{*sub, c.exact, c.stream};
      for (DType dt : {DType::kF32, DType::kBF16}) {
        Tensor t = sc.to_dev(make_input(dt, 777, world.rank(), 1000));
        sub->all_reduce(t, ReduceOp::kSum, c.stream, "split");
        sc.check(
            fmt::format("split all_reduce {}", dtype_name(dt)), t,
            [&](int64_t i) { return reference_reduce(dt, ReduceOp::kSum, 777, members, i); },
            16.0 * members.size());
      }
      c.passed += sc.passed;
      c.failed += sc.failed;
    }
    // color -1: no group.
    auto none = world.split(world.rank() == 0 ? -1 : 1, world.rank(), "without rank 0");
    if ((world.rank() == 0) != (none == nullptr)) {
      ++c.failed;
      log::error("selftest FAILED on rank {}: split with color -1", world.rank());
    } else {
      ++c.passed;
    }
  }
  // Every named group of a layout that fits the world (TP 2 when even, HSDP replicas 2 when divisible by 4).
  {
    const int n = world.size();
    ParallelDims dims = ParallelDims::make(
        {.dp_replicate = n % 4 == 0 ? 2 : 1, .dp_shard = -1, .tp = n % 2 == 0 && n != 4 ? 2 : 1}, n);
    ProcessGroups groups = build_groups(dims, world);
    for (const std::string& name : ParallelDims::group_names()) {
      Communicator& g = groups.get(name);
      const std::vector<int> members = dims.group_ranks(name, world.rank());
      const int expect_rank =
          static_cast<int>(std::find(members.begin(), members.end(), world.rank()) - members.begin());
      Checker gc{g, c.exact, c.stream};
      if (g.size() != static_cast<int>(members.size()) || g.rank() != expect_rank) {
        ++gc.failed;
        log::error("selftest FAILED on rank {}: group {} is rank {} of {}, expected {} of {}", world.rank(),
                   name, g.rank(), g.size(), expect_rank, members.size());
      } else {
        Tensor t = gc.to_dev(make_input(DType::kF32, 4242, world.rank(), 257));
        g.all_reduce(t, ReduceOp::kSum, c.stream, "group check");
        gc.check(
            fmt::format("group {} all_reduce", name), t,
            [&](int64_t i) { return reference_reduce(DType::kF32, ReduceOp::kSum, 4242, members, i); },
            16.0 * members.size());
      }
      c.passed += gc.passed;
      c.failed += gc.failed;
    }
    log::info("groups of {} checked: {}", dims.describe(), fmt::join(ParallelDims::group_names(), ", "));
  }
  world.barrier("end");

  // Every rank reports; the job fails if any rank failed.
  Tensor fails = c.to_dev(Tensor::from_vector<int32_t>({c.failed}, {1}));
  world.all_reduce(fails, ReduceOp::kSum, c.stream, "failure count");
  const int total_failed = c.to_host(fails).to_vector<int32_t>()[0];
  log::info("comm selftest ({} backend, {} ranks): {} checks passed on rank 0, {} failed on all ranks",
            world.backend(), world.size(), c.passed, total_failed);
  return total_failed == 0 ? 0 : 1;
}

}  // namespace primus::parallel
