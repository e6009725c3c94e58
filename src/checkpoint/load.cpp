#include "checkpoint/load.h"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>

#include "checkpoint/hf_weights.h"
#include "checkpoint/publish.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/log.h"

namespace fs = std::filesystem;

namespace primus::ckpt {

namespace {

// Checks the sizes and hashes of every listed file; appends problems.
void check_files(const std::string& dir, const Manifest& m, Verification& v) {
  for (const FileRecord& r : m.files) {
    const std::string path = dir + "/" + r.name;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      v.problems.push_back(
          {path, fmt::format("missing (the manifest lists {} bytes, xxh3 {})", r.bytes, hex64(r.xxh3))});
      continue;
    }
    const uint64_t size = fs::file_size(path, ec);
    if (ec) {
      v.problems.push_back({path, "cannot stat: " + ec.message()});
      continue;
    }
    if (size != r.bytes) {
      v.problems.push_back(
          {path, size < r.bytes ? fmt::format("truncated: {} bytes, expected {} (bytes [{}, {}) missing)",
                                              size, r.bytes, size, r.bytes)
                                : fmt::format("{} bytes, expected {} (bytes [{}, {}) are extra)", size,
                                              r.bytes, r.bytes, size)});
      continue;
    }
    FileDigest d;
    try {
      d = digest_file(path, m.chunk_bytes);
    } catch (const Error& e) {
      v.problems.push_back({path, e.what()});
      continue;
    }
    v.bytes += d.bytes;
    if (d.xxh3 == r.xxh3 && d.chunks == r.chunks) continue;
    bool named = false;
    for (size_t c = 0; c < r.chunks.size() && c < d.chunks.size(); ++c) {
      if (r.chunks[c] == d.chunks[c]) continue;
      const uint64_t b = c * m.chunk_bytes, e = std::min<uint64_t>(r.bytes, b + m.chunk_bytes);
      v.problems.push_back(
          {path, fmt::format("checksum mismatch in bytes [{}, {}): expected xxh3 {}, actual {}", b, e,
                             hex64(r.chunks[c]), hex64(d.chunks[c]))});
      named = true;
    }
    if (!named)
      v.problems.push_back(
          {path, fmt::format("checksum mismatch in bytes [0, {}): expected xxh3 {}, actual {}", r.bytes,
                             hex64(r.xxh3), hex64(d.xxh3))});
  }
}

// Every safetensors file parses under the §1.3 rules and holds the tensors the index says, as indexed.
void check_index(const std::string& dir, const Manifest& m, Verification& v) {
  std::map<std::string, StHeader> headers;
  for (const FileRecord& r : m.files) {
    if (!r.name.ends_with(".safetensors")) continue;
    try {
      FileReader f(dir + "/" + r.name);
      headers[r.name] = read_safetensors_header(f);
    } catch (const Error& e) {
      v.problems.push_back({dir + "/" + r.name, e.what()});
    }
  }
  for (const auto& [group, entries] : m.tensors) {
    for (const auto& [name, e] : entries) {
      int64_t covered = 0;
      for (const ShardRef& s : e.shards) {
        auto h = headers.find(s.file);
        if (h == headers.end()) {
          v.problems.push_back({dir + "/" + s.file, fmt::format("holds no readable header for {}", name)});
          continue;
        }
        const StEntry* st = h->second.find(s.name);
        bool in_bounds = s.offset.size() == e.global_shape.size() && s.shape.size() == e.global_shape.size();
        for (size_t d = 0; in_bounds && d < s.shape.size(); ++d)
          in_bounds = s.offset[d] >= 0 && s.shape[d] >= 0 && s.offset[d] + s.shape[d] <= e.global_shape[d];
        if (st == nullptr || st->dtype != e.dtype || st->shape != s.shape || !in_bounds) {
          v.problems.push_back(
              {dir + "/" + s.file,
               fmt::format("tensor {} ({} {}) does not match the manifest ({} {} at offset {})", s.name,
                           st ? st->dtype : "absent", st ? shape_str(st->shape) : "", e.dtype,
                           shape_str(s.shape), shape_str(s.offset))});
          continue;
        }
        covered += shape_numel(s.shape);
      }
      if (covered != shape_numel(e.global_shape))
        v.problems.push_back(
            {dir + "/" + kManifestName, fmt::format("shards of {}/{} cover {} of {} elements", group, name,
                                                    covered, shape_numel(e.global_shape))});
    }
  }
}

}  // namespace

Verification verify_checkpoint(const std::string& dir) {
  const auto t0 = std::chrono::steady_clock::now();
  Verification v;
  v.dir = dir;
  const std::string mpath = dir + "/" + kManifestName;
  std::error_code ec;
  if (!fs::is_regular_file(mpath, ec)) {
    v.problems.push_back({mpath, "missing (an interrupted or foreign directory)"});
    return v;
  }
  try {
    v.manifest = parse_manifest(read_text_file(mpath), mpath);
  } catch (const Error& e) {
    v.problems.push_back({mpath, e.what()});
    return v;
  }
  check_files(dir, v.manifest, v);
  if (v.problems.empty()) check_index(dir, v.manifest, v);
  if (v.problems.empty()) {
    const std::string spath = dir + "/" + kStateName;
    if (v.manifest.file(kStateName) == nullptr) {
      v.problems.push_back({spath, "not listed in the manifest"});
    } else {
      try {
        v.state = state_from_json(read_text_file(spath), spath);
        if (v.state.iteration != v.manifest.iteration)
          v.problems.push_back({spath, fmt::format("iteration {} but the manifest says {}", v.state.iteration,
                                                   v.manifest.iteration)});
      } catch (const Error& e) {
        v.problems.push_back({spath, e.what()});
      }
    }
  }
  v.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  v.ok = v.problems.empty();
  return v;
}

PathKind classify_path(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return PathKind::kMissing;
  if (!fs::is_directory(path, ec)) return PathKind::kUnknown;
  if (fs::exists(path + "/" + kManifestName, ec)) return PathKind::kCheckpoint;
  if (fs::exists(path + "/config.json", ec) &&
      (fs::exists(path + "/model.safetensors", ec) || fs::exists(path + "/model.safetensors.index.json", ec)))
    return PathKind::kHuggingFace;
  if (fs::exists(path + "/" + kLatestName, ec) || !list_checkpoint_dirs(path).empty())
    return PathKind::kSaveRoot;
  // An iter_* directory whose manifest went missing is still a (broken) checkpoint, not an empty root.
  if (parse_iter_dir_name(fs::path(path).filename().string())) return PathKind::kCheckpoint;
  return PathKind::kUnknown;
}

std::optional<Selection> select_newest_valid(const std::string& root) {
  Selection sel;
  const std::vector<std::string> dirs = list_checkpoint_dirs(root);
  const std::optional<std::string> latest = read_latest_pointer(root);
  for (const std::string& d : dirs) {
    Verification v = verify_checkpoint(d);
    if (v.ok) {
      if (latest && fs::path(*latest).filename() != fs::path(d).filename())
        log::info("checkpoint: {} names {}, but the newest valid checkpoint is {}", root + "/" + kLatestName,
                  *latest, d);
      sel.verification = std::move(v);
      return sel;
    }
    for (const Problem& p : v.problems) {
      log::warn("checkpoint: {} is not usable: {}", d, p.str());
      sel.rejected.push_back(p);
    }
    sel.rejected_dirs.push_back(d);
  }
  return std::nullopt;
}

std::vector<std::string> quarantine(const std::vector<std::string>& dirs) {
  std::vector<std::string> out;
  for (const std::string& d : dirs) {
    const fs::path p(d);
    std::string target = (p.parent_path() / ("corrupt-" + p.filename().string())).string();
    std::error_code ec;
    for (int k = 1; fs::exists(target, ec); ++k)
      target = (p.parent_path() / fmt::format("corrupt-{}-{}", p.filename().string(), k)).string();
    try {
      rename_path(d, target);
      fsync_dir(p.parent_path().string());
      log::warn("checkpoint: moved the unusable {} to {} (kept for inspection)", d, target);
      out.push_back(target);
    } catch (const Error& e) {
      log::warn("checkpoint: could not move the unusable {} aside: {}", d, e.what());
    }
  }
  return out;
}

Selection select_explicit(const std::string& path) {
  std::string dir = path;
  if (classify_path(path) == PathKind::kSaveRoot) {
    std::optional<std::string> latest = read_latest_pointer(path);
    if (!latest)
      throw Error(
          ErrorKind::kRuntime, fmt::format("{}/{} is missing or unreadable", path, kLatestName), {},
          "name a checkpoint directory (iter_NNNNNNN), or resume with auto_continue_train / --resume auto");
    dir = *latest;
  }
  Verification v = verify_checkpoint(dir);
  if (!v.ok) {
    std::string msg = fmt::format("checkpoint {} failed verification:", dir);
    for (const Problem& p : v.problems) msg += "\n    " + p.str();
    throw Error(ErrorKind::kRuntime, msg, {},
                "nothing was loaded; auto_continue_train / --resume auto falls back to the newest valid "
                "checkpoint of the save directory");
  }
  Selection sel;
  sel.verification = std::move(v);
  return sel;
}

struct CheckpointReader::Impl {
  const Verification& v;
  std::map<std::string, std::unique_ptr<FileReader>> files;
  std::map<std::string, StHeader> headers;
  explicit Impl(const Verification& ver) : v(ver) {}
  const StHeader& header(const std::string& file, FileReader** reader) {
    auto it = files.find(file);
    if (it == files.end()) {
      auto r = std::make_unique<FileReader>(v.dir + "/" + file);
      headers[file] = read_safetensors_header(*r);
      it = files.emplace(file, std::move(r)).first;
    }
    *reader = it->second.get();
    return headers[file];
  }
};

CheckpointReader::CheckpointReader(const Verification& v) : impl_(new Impl(v)) {
  PRIMUS_CHECK(v.ok, "reading an unverified checkpoint {}", v.dir);
}
CheckpointReader::~CheckpointReader() {
  delete impl_;
}

bool CheckpointReader::has(const std::string& group, const std::string& name) const {
  auto g = impl_->v.manifest.tensors.find(group);
  return g != impl_->v.manifest.tensors.end() && g->second.count(name) > 0;
}

const TensorIndexEntry& CheckpointReader::entry(const std::string& group, const std::string& name) const {
  PRIMUS_CHECK(has(group, name), "checkpoint {} has no {} tensor {}", impl_->v.dir, group, name);
  return impl_->v.manifest.tensors.at(group).at(name);
}

std::vector<std::string> CheckpointReader::names(const std::string& group) const {
  std::vector<std::string> out;
  auto g = impl_->v.manifest.tensors.find(group);
  if (g == impl_->v.manifest.tensors.end()) return out;
  for (const auto& kv : g->second) out.push_back(kv.first);
  return out;
}

Tensor CheckpointReader::read(const std::string& group, const std::string& name) {
  const TensorIndexEntry& e = entry(group, name);
  DType dt;
  PRIMUS_CHECK(st_dtype_to_primus(e.dtype, &dt), "{}: unsupported dtype {} of {}", impl_->v.dir, e.dtype,
               name);
  Tensor out = Tensor::empty(e.global_shape, dt);
  const size_t item = dtype_size(dt);
  const int nd = static_cast<int>(e.global_shape.size());
  for (const ShardRef& s : e.shards) {
    FileReader* r = nullptr;
    const StHeader& h = impl_->header(s.file, &r);
    const StEntry* st = h.find(s.name);
    PRIMUS_CHECK(st != nullptr, "{}: {} vanished after verification", s.file, s.name);
    if (s.shape == e.global_shape) {  // the whole tensor in one shard (every single-process save)
      if (st->bytes() > 0) r->read_at(h.data_start() + st->begin, out.data_ptr(), st->bytes());
      continue;
    }
    // A block of the global tensor: copy it row by row (rows along the last dim are contiguous).
    Tensor block = read_st_tensor(*r, h, *st);
    if (block.numel() == 0) continue;
    const int64_t inner = nd == 0 ? 1 : s.shape[nd - 1];
    const int64_t rows = block.numel() / inner;
    const char* src = static_cast<const char*>(block.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    for (int64_t row = 0; row < rows; ++row) {
      // Global element index of this block row's first element.
      int64_t rem = row, gidx = 0, stride = 1;
      std::vector<int64_t> coord(static_cast<size_t>(nd), 0);
      for (int d = nd - 2; d >= 0; --d) {
        coord[d] = rem % s.shape[d];
        rem /= s.shape[d];
      }
      for (int d = nd - 1; d >= 0; --d) {
        gidx += (coord[d] + s.offset[d]) * stride;
        stride *= e.global_shape[d];
      }
      std::memcpy(dst + static_cast<size_t>(gidx) * item, src + static_cast<size_t>(row * inner) * item,
                  static_cast<size_t>(inner) * item);
    }
  }
  return out;
}

void copy_into_param(ParamStore& params, int i, const std::string& which, const Tensor& src_in,
                     const Stream& s, bool allow_row_padding) {
  const ParamEntry& e = params.entry(i);
  Tensor src = src_in;
  if (src.shape() != e.shape) {
    const bool pad_ok = allow_row_padding && src.ndim() == 2 && e.shape.size() == 2 &&
                        src.size(1) == e.shape[1] && src.size(0) <= e.shape[0];
    if (!pad_ok)
      throw Error(ErrorKind::kRuntime,
                  fmt::format("checkpoint tensor {} has shape {}, the model expects {}", e.name,
                              shape_str(src.shape()), shape_str(e.shape)),
                  {}, "the checkpoint was saved from a different model configuration");
    // Finetuning from a checkpoint with fewer vocabulary rows: the extra (padding) rows start at zero.
    Tensor padded = Tensor::zeros(e.shape, src.dtype());
    std::memcpy(padded.data_ptr(), src.data_ptr(), src.nbytes());
    src = padded;
  }
  if (src.dtype() == DType::kF16) src = to_f32(src);  // cpu_cast has no f16 (no buffer is f16)
  if (which == "master") {
    // An f32 master buffer or (masters in remainders) the split into compute copy + remainder.
    params.set_master(i, src, s);
    return;
  }
  Tensor flat = which == "compute" ? params.compute_flat()
                : which == "m"     ? params.adam_m_flat()
                                   : params.adam_v_flat();
  Tensor dst = flat.slice(e.offset, e.offset + e.numel).view(e.shape);
  if (src.dtype() != dst.dtype()) src = cpu_cast(src, dst.dtype());
  dst.copy_from(src, s);
}

LoadReport load_into_params(const Verification& v, ParamStore& params, const Stream& s,
                            const LoadOptions& o) {
  CheckpointReader r(v);
  LoadReport rep;
  // Names must match exactly: a missing or extra tensor means a different model configuration.
  std::vector<std::string> missing, extra;
  for (const ParamEntry& e : params.entries())
    if (!r.has("model", e.name)) missing.push_back(e.name);
  for (const std::string& n : r.names("model"))
    if (params.find(n) < 0) extra.push_back(n);
  if (!missing.empty() || !extra.empty())
    throw Error(ErrorKind::kRuntime,
                fmt::format("checkpoint {} does not match the model: missing [{}], unexpected [{}]", v.dir,
                            fmt::join(missing, ", "), fmt::join(extra, ", ")),
                {},
                "the checkpoint was saved from a different model configuration (qk_layernorm, add_qkv_bias, "
                "untie_embeddings_and_output_weights, num_layers)");
  rep.loaded_master = !r.names("master").empty();
  // With masters in remainders the compute copy is the master's upper half, written by the master's split;
  // a file's compute copy is the same bits (one rounding in every mode, core/master_split.h).
  const bool compute_separate = !params.compute_aliases_master() && !params.master_in_remainders();
  const int n = static_cast<int>(params.entries().size());
  bool all_compute_from_file = true;
  for (int i = 0; i < n; ++i) {
    const std::string& name = params.entry(i).name;
    Tensor model = r.read("model", name);
    Tensor master = rep.loaded_master ? r.read("master", name) : model;
    copy_into_param(params, i, "master", master, s, o.weights_only);
    // The compute copy is taken from the file when it has the compute dtype (bitwise what training used);
    // otherwise every compute tensor is cast from the master weights below.
    if (compute_separate && model.dtype() == params.compute_flat().dtype()) {
      copy_into_param(params, i, "compute", model, s, o.weights_only);
    } else {
      all_compute_from_file = false;
    }
  }
  if (compute_separate && !all_compute_from_file) {
    params.sync_compute_copy(s);
    rep.notes.push_back("compute copy cast from the master weights");
  }
  if (params.frozen()) {  // a frozen store (LoRA's base model) takes the weights only
    stream_sync(s);
    return rep;
  }
  params.adam_m_flat().zero_(s);
  params.adam_v_flat().zero_(s);
  if (o.load_optim && v.state.has_optimizer) {
    for (int i = 0; i < n; ++i) {
      const std::string& name = params.entry(i).name;
      copy_into_param(params, i, "m", r.read("optim", name + ".exp_avg"), s, false);
      copy_into_param(params, i, "v", r.read("optim", name + ".exp_avg_sq"), s, false);
    }
    rep.loaded_optim = true;
  }
  stream_sync(s);
  return rep;
}

}  // namespace primus::ckpt
