#pragma once
// A thin RAII layer over cuDNN's backend descriptor API (cudnnBackendCreateDescriptor / SetAttribute /
// Finalize / Execute), used by the fused attention graphs (attention_cudnn_cuda.cpp). There is no vendored
// cudnn-frontend: the operation graphs are built here, node by node, as the cuDNN developer guide's Graph API
// chapter describes them.
//
// Version skew: we compile against the cuDNN 9.19 headers but the GPU machine runs a 9.14 library. Only
// descriptor types and enum values that exist in the runtime may be used; callers gate newer features on
// runtime_version().
//
// Host-only: include from *_cuda.cpp files (a CPU build has no cudnn.h).
#include <cudnn.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"

namespace primus::ops::cuda::cudnn {

// cudnnGetVersion() of the loaded library, e.g. 91400 for 9.14.0 (cached after the first call).
int runtime_version();
// "9.14.0"
std::string version_string(int version);
// cuDNN's detailed message for the last failure on this thread (cudnnGetLastErrorString), or "".
std::string last_error_string();

[[noreturn]] void throw_cudnn_error(cudnnStatus_t st, const char* expr, const char* file, int line,
                                    const std::string& context = {});

}  // namespace primus::ops::cuda::cudnn

// Every cuDNN call goes through this: a failure names the call, file:line, cuDNN's status string and its
// detailed last-error message.
#define PRIMUS_CUDNN_CHECK(expr)                                                                  \
  do {                                                                                            \
    cudnnStatus_t primus_cudnn_st_ = (expr);                                                      \
    if (primus_cudnn_st_ != CUDNN_STATUS_SUCCESS)                                                 \
      ::primus::ops::cuda::cudnn::throw_cudnn_error(primus_cudnn_st_, #expr, __FILE__, __LINE__); \
  } while (0)

namespace primus::ops::cuda::cudnn {

// One backend descriptor, destroyed with its owner. Move-only.
class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptorType_t type);
  ~Desc();
  Desc(Desc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Desc& operator=(Desc&& o) noexcept;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  bool defined() const { return d_ != nullptr; }

  // Each setter throws (naming `what` and the attribute) when cuDNN rejects the value.
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
            const void* value);
  Desc& set_i64(cudnnBackendAttributeName_t name, int64_t v) { return set(name, CUDNN_TYPE_INT64, 1, &v); }
  Desc& set_i64s(cudnnBackendAttributeName_t name, const std::vector<int64_t>& v) {
    return set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(v.size()), v.data());
  }
  Desc& set_bool(cudnnBackendAttributeName_t name, bool v) { return set(name, CUDNN_TYPE_BOOLEAN, 1, &v); }
  Desc& set_dtype(cudnnBackendAttributeName_t name, cudnnDataType_t v) {
    return set(name, CUDNN_TYPE_DATA_TYPE, 1, &v);
  }
  Desc& set_desc(cudnnBackendAttributeName_t name, const Desc& v) {
    cudnnBackendDescriptor_t raw = v.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  }
  // Finalize, throwing with `what` in the message on failure.
  void finalize(const std::string& what);
  // Finalize and return the status instead of throwing (for engine configs that may be refused).
  cudnnStatus_t try_finalize();

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// One cuDNN handle per device, created on first use and kept for the process (handles are expensive).
cudnnHandle_t handle(int device);

// Builds one operation graph from tensors and nodes. Tensors are named by their unique id (uid); non-virtual
// tensors get the caller's fixed uids (the variant pack binds pointers to them), virtual ones are numbered
// from 1000 up.
class GraphBuilder {
 public:
  explicit GraphBuilder(std::string name) : name_(std::move(name)) {}

  // A tensor the caller binds in the variant pack (device memory, or host memory when by_value).
  void tensor(int64_t uid, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
              cudnnDataType_t dtype, bool by_value = false);
  // A by-value f32 scalar [1,1,1,1] (bound to a host float at execute time).
  void scalar(int64_t uid) { tensor(uid, {1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, true); }
  // A virtual (never materialised) tensor; returns its uid.
  int64_t virt(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, cudnnDataType_t dtype);

  // c = a @ b (batched over the leading dims, broadcasting heads), f32 accumulation.
  void matmul(int64_t a, int64_t b, int64_t c, const char* name);
  // y = mode(x [, b] [, t]); `axis` only for GEN_INDEX. Pass -1 for unused inputs.
  void pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t b, int64_t y, const char* name,
                 cudnnDataType_t compute = CUDNN_DATA_FLOAT, int64_t axis = -1, int64_t t = -1);
  // y = reduce(x) over the dims where y has extent 1.
  void reduction(cudnnReduceTensorOp_t op, int64_t x, int64_t y, const char* name);
  void reshape(int64_t x, int64_t y, const char* name);

  // Finalizes the operation graph on `h`. Throws naming the graph on failure.
  Desc build(cudnnHandle_t h);
  const std::string& name() const { return name_; }

 private:
  const Desc& t(int64_t uid, const char* op) const;
  std::string name_;
  std::map<int64_t, Desc> tensors_;
  std::vector<Desc> helpers_;  // matmul / pointwise / reduction descriptors the ops refer to
  std::vector<Desc> ops_;
  int64_t next_virtual_ = 1000;
};

// An execution plan chosen for an operation graph, with what was learnt while choosing it.
struct Plan {
  Desc plan;
  int64_t workspace = 0;
  int64_t engine = -1;                         // CUDNN_ATTR_ENGINE_GLOBAL_INDEX of the engine behind the plan
  int candidate = 0;                           // position in the heuristic list
  std::vector<std::pair<int, int64_t>> knobs;  // (cudnnBackendKnobType_t, value) of the engine config
};

// "engine 2 {TILE_M=3, KERNEL_CFG=2}" for logs.
std::string describe(const Plan& p);

// Plans for engine `base.engine` whose knob choices differ from `base`'s in one knob at a time, each knob
// over its advertised range (at most `per_knob` values per knob, `max_plans` in all). Configs the engine
// refuses are skipped. For autotuning beyond the heuristic's pick.
std::vector<Plan> knob_variants(cudnnHandle_t h, const Desc& graph, const Plan& base, int per_knob,
                                int max_plans);

// Asks the heuristics (mode A, then FALLBACK) for engine configs and returns every plan that finalizes, in
// heuristic order, at most `max_plans`. An empty result means the graph is not supported; `report` then says
// what each candidate answered.
std::vector<Plan> make_plans(cudnnHandle_t h, const Desc& graph, int max_plans, std::string* report);

// Binds uids to pointers (device pointers; host pointers for by-value scalars) and runs the plan on h's
// stream.
void execute(cudnnHandle_t h, const Plan& plan, const std::vector<int64_t>& uids,
             const std::vector<void*>& ptrs, void* workspace);

}  // namespace primus::ops::cuda::cudnn
