#include "data/sentencepiece_tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "core/error.h"
#include "data/sentencepiece_abi.h"

namespace primus {

namespace {

struct Plugin {
  void* lib = nullptr;
  std::string path, error;
  primus_spm_load_fn load = nullptr;
  primus_spm_free_fn free = nullptr;
  primus_spm_size_fn size = nullptr;
  primus_spm_special_fn special = nullptr;
  primus_spm_encode_fn encode = nullptr;
  primus_spm_decode_fn decode = nullptr;
  primus_spm_free_buffer_fn free_buffer = nullptr;
};

std::filesystem::path exe_dir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path(".") : p.parent_path();
}

const Plugin& plugin() {
  static Plugin p;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("PRIMUS_SENTENCEPIECE_PLUGIN")) candidates.push_back(env);
    const auto dir = exe_dir();
    for (const auto& d : {dir, dir.parent_path(), dir.parent_path() / "lib"})
      candidates.push_back((d / "libprimus_sentencepiece.so").string());
    std::string errors;
    for (const std::string& c : candidates) {
      if (!std::filesystem::exists(c)) continue;
      void* lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib == nullptr) {
        errors += fmt::format("{}: {}; ", c, dlerror());
        continue;
      }
      p.lib = lib;
      p.path = c;
      p.load = reinterpret_cast<primus_spm_load_fn>(dlsym(lib, "primus_spm_load"));
      p.free = reinterpret_cast<primus_spm_free_fn>(dlsym(lib, "primus_spm_free"));
      p.size = reinterpret_cast<primus_spm_size_fn>(dlsym(lib, "primus_spm_size"));
      p.special = reinterpret_cast<primus_spm_special_fn>(dlsym(lib, "primus_spm_special"));
      p.encode = reinterpret_cast<primus_spm_encode_fn>(dlsym(lib, "primus_spm_encode"));
      p.decode = reinterpret_cast<primus_spm_decode_fn>(dlsym(lib, "primus_spm_decode"));
      p.free_buffer = reinterpret_cast<primus_spm_free_buffer_fn>(dlsym(lib, "primus_spm_free_buffer"));
      if (!p.load || !p.free || !p.size || !p.special || !p.encode || !p.decode || !p.free_buffer) {
        errors += fmt::format("{}: missing symbols; ", c);
        p.lib = nullptr;
        continue;
      }
      return;
    }
    p.error = errors.empty() ? fmt::format(
                                   "libprimus_sentencepiece.so not found (looked in {}, {} and "
                                   "$PRIMUS_SENTENCEPIECE_PLUGIN)",
                                   dir.string(), dir.parent_path().string())
                             : errors;
  });
  return p;
}

}  // namespace

std::string sentencepiece_plugin_path(std::string* why) {
  const Plugin& p = plugin();
  if (why != nullptr) *why = p.error;
  return p.lib != nullptr ? p.path : std::string();
}

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path, bool add_bos,
                                               const std::string& type_name)
    : add_bos_(add_bos) {
  const Plugin& p = plugin();
  if (p.lib == nullptr)
    throw ConfigError(
        fmt::format(
            "tokenizer_model {}: SentencePiece tokenizers need the libprimus_sentencepiece.so plugin and "
            "libsentencepiece.so.0, which this machine cannot load: {}",
            model_path, p.error),
        "install libsentencepiece0 (apt-get install libsentencepiece0) and keep libprimus_sentencepiece.so "
        "next to "
        "the primus binary (it is built when libsentencepiece-dev is present), or use the model's "
        "tokenizer.json "
        "with tokenizer_type HuggingFaceTokenizer");
  char err[512] = {0};
  handle_ = p.load(model_path.c_str(), err, sizeof(err));
  if (handle_ == nullptr)
    throw ConfigError(
        fmt::format("tokenizer_model: cannot load SentencePiece model {}: {}", model_path, err));
  size_ = p.size(handle_);
  bos_ = p.special(handle_, 1);
  eos_ = p.special(handle_, 2);
  name_ = fmt::format("{} ({}, {} tokens)", type_name, model_path, size_);
}

SentencePieceTokenizer::~SentencePieceTokenizer() {
  if (handle_ != nullptr) plugin().free(handle_);
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Plugin& p = plugin();
  int32_t* ids = nullptr;
  size_t n = 0;
  char err[512] = {0};
  if (p.encode(handle_, text.data(), text.size(), &ids, &n, err, sizeof(err)) != 0)
    throw Error(ErrorKind::kRuntime, fmt::format("SentencePiece encode failed: {}", err));
  std::vector<int32_t> out;
  out.reserve(n + 1);
  if (add_bos_ && add_special_tokens && bos_ >= 0) out.push_back(bos_);
  out.insert(out.end(), ids, ids + n);
  p.free_buffer(ids);
  return out;
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const Plugin& p = plugin();
  std::vector<int32_t> keep;
  keep.reserve(ids.size());
  for (int32_t id : ids)
    if (id >= 0 && id < size_ && !(skip_special_tokens && (id == bos_ || id == eos_))) keep.push_back(id);
  char* text = nullptr;
  size_t len = 0;
  char err[512] = {0};
  if (p.decode(handle_, keep.data(), keep.size(), &text, &len, err, sizeof(err)) != 0)
    throw Error(ErrorKind::kRuntime, fmt::format("SentencePiece decode failed: {}", err));
  std::string out(text, len);
  p.free_buffer(text);
  return out;
}

}  // namespace primus
