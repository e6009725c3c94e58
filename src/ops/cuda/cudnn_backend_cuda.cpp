// cuDNN backend-API plumbing (see cudnn_backend.h).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstring>
#include <mutex>

#include "core/cuda_check.h"
#include "core/device.h"
#include "ops/cuda/cudnn_backend.h"

// The 9.19 headers mark the HANDLE attributes deprecated in favour of device-property descriptors, which
// the 9.14 runtime does not need; the old attributes are what every 9.x runtime accepts.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace primus::ops::cuda::cudnn {

int runtime_version() {
  static const int v = static_cast<int>(cudnnGetVersion());
  return v;
}

std::string version_string(int v) {
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

std::string last_error_string() {
  char buf[2048] = {0};
  cudnnGetLastErrorString(buf, sizeof(buf));
  return std::string(buf);
}

void throw_cudnn_error(cudnnStatus_t st, const char* expr, const char* file, int line,
                       const std::string& context) {
  std::string detail = last_error_string();
  const char* base = std::strrchr(file, '/');
  std::string msg =
      fmt::format("{}:{}: cuDNN call failed: {} -> {} ({}){}{}", base ? base + 1 : file, line, expr,
                  cudnnGetErrorString(st), static_cast<int>(st), context.empty() ? "" : " [" + context + "]",
                  detail.empty() ? "" : "; cuDNN says: " + detail);
  throw Error(ErrorKind::kRuntime, msg, fmt::format("{}:{}", file, line),
              fmt::format("cuDNN runtime {}, headers {}", version_string(runtime_version()),
                          version_string(CUDNN_VERSION)));
}

Desc::Desc(cudnnBackendDescriptorType_t type) {
  cudnnStatus_t st = cudnnBackendCreateDescriptor(type, &d_);
  if (st != CUDNN_STATUS_SUCCESS)
    throw_cudnn_error(st, "cudnnBackendCreateDescriptor", __FILE__, __LINE__,
                      fmt::format("descriptor type {}", static_cast<int>(type)));
}

Desc::~Desc() {
  if (d_) cudnnBackendDestroyDescriptor(d_);
}

Desc& Desc::operator=(Desc&& o) noexcept {
  if (this != &o) {
    if (d_) cudnnBackendDestroyDescriptor(d_);
    d_ = o.d_;
    o.d_ = nullptr;
  }
  return *this;
}

Desc& Desc::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                const void* value) {
  cudnnStatus_t st = cudnnBackendSetAttribute(d_, name, type, count, value);
  if (st != CUDNN_STATUS_SUCCESS)
    throw_cudnn_error(st, "cudnnBackendSetAttribute", __FILE__, __LINE__,
                      fmt::format("attribute {} (type {}, count {})", static_cast<int>(name),
                                  static_cast<int>(type), count));
  return *this;
}

void Desc::finalize(const std::string& what) {
  cudnnStatus_t st = cudnnBackendFinalize(d_);
  if (st != CUDNN_STATUS_SUCCESS) throw_cudnn_error(st, "cudnnBackendFinalize", __FILE__, __LINE__, what);
}

cudnnStatus_t Desc::try_finalize() {
  return cudnnBackendFinalize(d_);
}

cudnnHandle_t handle(int device) {
  static std::mutex mu;
  static std::map<int, cudnnHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  int prev = 0;
  PRIMUS_CUDA_CHECK(cudaGetDevice(&prev));
  PRIMUS_CUDA_CHECK(cudaSetDevice(device));
  cudnnHandle_t h = nullptr;
  cudnnStatus_t st = cudnnCreate(&h);
  PRIMUS_CUDA_CHECK(cudaSetDevice(prev));
  if (st != CUDNN_STATUS_SUCCESS)
    throw_cudnn_error(st, "cudnnCreate(&h)", __FILE__, __LINE__, fmt::format("device {}", device));
  handles[device] = h;
  return h;
}

// ---------------------------------------------------------------------------------------------------------------
// GraphBuilder

void GraphBuilder::tensor(int64_t uid, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                          cudnnDataType_t dtype, bool by_value) {
  PRIMUS_CHECK(!tensors_.count(uid), "{}: tensor uid {} defined twice", name_, uid);
  Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  d.set_dtype(CUDNN_ATTR_TENSOR_DATA_TYPE, dtype)
      .set_i64s(CUDNN_ATTR_TENSOR_DIMENSIONS, dims)
      .set_i64s(CUDNN_ATTR_TENSOR_STRIDES, strides)
      .set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
      .set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16)
      .set_bool(CUDNN_ATTR_TENSOR_IS_VIRTUAL, false);
  if (by_value) d.set_bool(CUDNN_ATTR_TENSOR_IS_BY_VALUE, true);
  d.finalize(fmt::format("{}: tensor uid {}", name_, uid));
  tensors_.emplace(uid, std::move(d));
}

int64_t GraphBuilder::virt(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                           cudnnDataType_t dtype) {
  const int64_t uid = next_virtual_++;
  Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  d.set_dtype(CUDNN_ATTR_TENSOR_DATA_TYPE, dtype)
      .set_i64s(CUDNN_ATTR_TENSOR_DIMENSIONS, dims)
      .set_i64s(CUDNN_ATTR_TENSOR_STRIDES, strides)
      .set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
      .set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16)
      .set_bool(CUDNN_ATTR_TENSOR_IS_VIRTUAL, true);
  d.finalize(fmt::format("{}: virtual tensor uid {}", name_, uid));
  tensors_.emplace(uid, std::move(d));
  return uid;
}

const Desc& GraphBuilder::t(int64_t uid, const char* op) const {
  auto it = tensors_.find(uid);
  PRIMUS_CHECK(it != tensors_.end(), "{}: node {} refers to undefined tensor uid {}", name_, op, uid);
  return it->second;
}

void GraphBuilder::matmul(int64_t a, int64_t b, int64_t c, const char* name) {
  Desc md(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  md.set_dtype(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT);
  md.finalize(fmt::format("{}: matmul descriptor of {}", name_, name));
  Desc op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, t(a, name))
      .set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, t(b, name))
      .set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, t(c, name))
      .set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, md);
  op.finalize(fmt::format("{}: matmul node {}", name_, name));
  helpers_.push_back(std::move(md));
  ops_.push_back(std::move(op));
}

void GraphBuilder::pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t b, int64_t y, const char* name,
                             cudnnDataType_t compute, int64_t axis, int64_t tt) {
  Desc pd(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pd.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  pd.set_dtype(CUDNN_ATTR_POINTWISE_MATH_PREC, compute);
  if (axis >= 0) pd.set_i64(CUDNN_ATTR_POINTWISE_AXIS, axis);
  pd.finalize(fmt::format("{}: pointwise descriptor of {}", name_, name));
  Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pd);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, t(x, name));
  if (b >= 0) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, t(b, name));
  if (tt >= 0) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t(tt, name));
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, t(y, name));
  op.finalize(fmt::format("{}: pointwise node {}", name_, name));
  helpers_.push_back(std::move(pd));
  ops_.push_back(std::move(op));
}

void GraphBuilder::reduction(cudnnReduceTensorOp_t red, int64_t x, int64_t y, const char* name) {
  Desc rd(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  rd.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &red);
  rd.set_dtype(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT);
  rd.finalize(fmt::format("{}: reduction descriptor of {}", name_, name));
  Desc op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, t(x, name))
      .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, t(y, name))
      .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd);
  op.finalize(fmt::format("{}: reduction node {}", name_, name));
  helpers_.push_back(std::move(rd));
  ops_.push_back(std::move(op));
}

void GraphBuilder::reshape(int64_t x, int64_t y, const char* name) {
  Desc op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, t(x, name))
      .set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, t(y, name));
  op.finalize(fmt::format("{}: reshape node {}", name_, name));
  ops_.push_back(std::move(op));
}

Desc GraphBuilder::build(cudnnHandle_t h) {
  std::vector<cudnnBackendDescriptor_t> raw;
  raw.reserve(ops_.size());
  for (const auto& op : ops_) raw.push_back(op.get());
  Desc g(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  g.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  g.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw.size()),
        raw.data());
  g.finalize(fmt::format("operation graph {} ({} nodes)", name_, raw.size()));
  return g;
}

// ---------------------------------------------------------------------------------------------------------------
// Heuristics, plans, execution

namespace {

const char* status_name(cudnnStatus_t st) {
  return cudnnGetErrorString(st);
}

// Engine configs the heuristics propose for `graph` in `mode` (empty when the query itself is refused).
std::vector<Desc> engine_configs(const Desc& graph, cudnnBackendHeurMode_t mode, std::string* report) {
  std::vector<Desc> cfgs;
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  cudnnBackendDescriptor_t g = graph.get();
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  cudnnStatus_t st = heur.try_finalize();
  if (st != CUDNN_STATUS_SUCCESS) {
    *report += fmt::format(" heuristics mode {} refused: {} ({});", static_cast<int>(mode), status_name(st),
                           last_error_string());
    return cfgs;
  }
  int64_t count = 0;
  st = cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                &count, nullptr);
  if (st != CUDNN_STATUS_SUCCESS || count <= 0) {
    *report += fmt::format(" heuristics mode {} returned {} configs ({});", static_cast<int>(mode), count,
                           st == CUDNN_STATUS_SUCCESS ? "ok" : status_name(st));
    return cfgs;
  }
  std::vector<cudnnBackendDescriptor_t> raw(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw[static_cast<size_t>(i)] = cfgs.back().get();
  }
  int64_t got = 0;
  PRIMUS_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()));
  cfgs.resize(static_cast<size_t>(got));
  return cfgs;
}

// Knob (type, value) pairs of an engine config.
std::vector<std::pair<int, int64_t>> read_knobs(const Desc& cfg) {
  std::vector<std::pair<int, int64_t>> out;
  constexpr int kMax = 64;
  std::vector<Desc> choices;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int i = 0; i < kMax; ++i) {
    choices.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    raw.push_back(choices.back().get());
  }
  int64_t n = 0;
  if (cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               kMax, &n, raw.data()) != CUDNN_STATUS_SUCCESS)
    return out;
  for (int64_t i = 0; i < n && i < kMax; ++i) {
    cudnnBackendKnobType_t type;
    int64_t value = 0, cnt = 0;
    if (cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &cnt,
                                 &type) == CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &cnt,
                                 &value) == CUDNN_STATUS_SUCCESS)
      out.emplace_back(static_cast<int>(type), value);
  }
  return out;
}

int64_t engine_index(const Desc& cfg) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t n = 0;
  if (cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                               &raw) != CUDNN_STATUS_SUCCESS)
    return -1;
  int64_t idx = -1;
  if (cudnnBackendGetAttribute(raw, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &idx) !=
      CUDNN_STATUS_SUCCESS)
    return -1;
  return idx;
}

}  // namespace

std::vector<Plan> make_plans(cudnnHandle_t h, const Desc& graph, int max_plans, std::string* report) {
  std::vector<Plan> plans;
  std::string local;
  std::string& rep = report ? *report : local;
  int candidate = 0;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<Desc> cfgs = engine_configs(graph, mode, &rep);
    for (auto& cfg : cfgs) {
      if (static_cast<int>(plans.size()) >= max_plans) return plans;
      const int64_t eng = engine_index(cfg);
      Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
      cudnnBackendDescriptor_t raw = cfg.get();
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
      cudnnStatus_t st = plan.try_finalize();
      if (st != CUDNN_STATUS_SUCCESS) {
        rep += fmt::format(" engine {} (mode {}): {} ({});", eng, static_cast<int>(mode), status_name(st),
                           last_error_string());
        ++candidate;
        continue;
      }
      Plan p;
      p.knobs = read_knobs(cfg);
      int64_t n = 0;
      PRIMUS_CUDNN_CHECK(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                  CUDNN_TYPE_INT64, 1, &n, &p.workspace));
      p.plan = std::move(plan);
      p.engine = eng;
      p.candidate = candidate++;
      plans.push_back(std::move(p));
    }
    // The fallback list is only worth asking for when mode A produced nothing that runs.
    if (!plans.empty()) break;
  }
  return plans;
}

std::string describe(const Plan& p) {
  std::string s = fmt::format("engine {} {{", p.engine);
  for (size_t i = 0; i < p.knobs.size(); ++i)
    s += fmt::format("{}k{}={}", i ? " " : "", p.knobs[i].first, p.knobs[i].second);
  return s + "}";
}

std::vector<Plan> knob_variants(cudnnHandle_t h, const Desc& graph, const Plan& base, int per_knob,
                                int max_plans) {
  std::vector<Plan> plans;
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t g = graph.get();
  engine.set(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g);
  engine.set_i64(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, base.engine);
  if (engine.try_finalize() != CUDNN_STATUS_SUCCESS) return plans;
  // The knobs the engine has and their ranges.
  constexpr int kMax = 64;
  std::vector<Desc> infos;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int i = 0; i < kMax; ++i) {
    infos.emplace_back(CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR);
    raw.push_back(infos.back().get());
  }
  int64_t n = 0;
  if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_KNOB_INFO, CUDNN_TYPE_BACKEND_DESCRIPTOR, kMax,
                               &n, raw.data()) != CUDNN_STATUS_SUCCESS)
    return plans;
  struct Range {
    int type;
    int64_t lo, hi, stride;
  };
  std::vector<Range> ranges;
  for (int64_t i = 0; i < n && i < kMax; ++i) {
    cudnnBackendKnobType_t type;
    Range r{};
    int64_t cnt = 0;
    if (cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_INFO_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &cnt, &type) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE, CUDNN_TYPE_INT64, 1, &cnt,
                                 &r.lo) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE, CUDNN_TYPE_INT64, 1, &cnt,
                                 &r.hi) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_INFO_STRIDE, CUDNN_TYPE_INT64, 1, &cnt, &r.stride) !=
            CUDNN_STATUS_SUCCESS)
      continue;
    r.type = static_cast<int>(type);
    if (r.stride <= 0) r.stride = 1;
    ranges.push_back(r);
  }
  for (const Range& r : ranges) {
    int tried = 0;
    for (int64_t v = r.lo; v <= r.hi && tried < per_knob; v += r.stride, ++tried) {
      if (static_cast<int>(plans.size()) >= max_plans) return plans;
      std::vector<std::pair<int, int64_t>> knobs = base.knobs;
      bool present = false, same = false;
      for (auto& k : knobs) {
        if (k.first != r.type) continue;
        present = true;
        same = k.second == v;
        k.second = v;
      }
      if (same) continue;  // the base config itself
      if (!present) knobs.emplace_back(r.type, v);
      std::vector<Desc> choices;
      std::vector<cudnnBackendDescriptor_t> craw;
      bool ok = true;
      for (const auto& [type, value] : knobs) {
        choices.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
        auto t = static_cast<cudnnBackendKnobType_t>(type);
        ok = ok && cudnnBackendSetAttribute(choices.back().get(), CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                            CUDNN_TYPE_KNOB_TYPE, 1, &t) == CUDNN_STATUS_SUCCESS;
        ok = ok && cudnnBackendSetAttribute(choices.back().get(), CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                                            CUDNN_TYPE_INT64, 1, &value) == CUDNN_STATUS_SUCCESS;
        ok = ok && choices.back().try_finalize() == CUDNN_STATUS_SUCCESS;
        craw.push_back(choices.back().get());
      }
      if (!ok) continue;
      Desc cfg(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      cudnnBackendDescriptor_t e = engine.get();
      if (cudnnBackendSetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                   &e) != CUDNN_STATUS_SUCCESS ||
          cudnnBackendSetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(craw.size()),
                                   craw.data()) != CUDNN_STATUS_SUCCESS ||
          cfg.try_finalize() != CUDNN_STATUS_SUCCESS)
        continue;
      Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
      cudnnBackendDescriptor_t c = cfg.get();
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
      if (plan.try_finalize() != CUDNN_STATUS_SUCCESS) continue;
      Plan p;
      int64_t cnt = 0;
      if (cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                   &cnt, &p.workspace) != CUDNN_STATUS_SUCCESS)
        continue;
      p.plan = std::move(plan);
      p.engine = base.engine;
      p.candidate = -1;
      p.knobs = std::move(knobs);
      plans.push_back(std::move(p));
    }
  }
  return plans;
}

void execute(cudnnHandle_t h, const Plan& plan, const std::vector<int64_t>& uids,
             const std::vector<void*>& ptrs, void* workspace) {
  PRIMUS_CHECK(uids.size() == ptrs.size(), "cudnn::execute: {} uids but {} pointers", uids.size(),
               ptrs.size());
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()),
           uids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()),
           ptrs.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize("variant pack");
  PRIMUS_CUDNN_CHECK(cudnnBackendExecute(h, plan.plan.get(), pack.get()));
}

}  // namespace primus::ops::cuda::cudnn
