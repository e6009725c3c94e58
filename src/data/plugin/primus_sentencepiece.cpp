// libprimus_sentencepiece.so: a C wrapper around libsentencepiece (see data/sentencepiece_abi.h). Built only
// when libsentencepiece-dev is installed; not part of primus_lib.
#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "data/sentencepiece_abi.h"

namespace {
void set_err(char* err, size_t n, const std::string& msg) {
  if (err == nullptr || n == 0) return;
  std::strncpy(err, msg.c_str(), n - 1);
  err[n - 1] = '\0';
}
}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* primus_spm_load(const char* path, char* err, size_t err_len) {
  auto* sp = new sentencepiece::SentencePieceProcessor();
  sentencepiece::util::Status status;
  // libsentencepiece reports most damage through its status, but a few pieces make its trie builder (Darts)
  // throw instead, e.g. a piece holding a NUL byte: that must not escape a C interface (std::terminate).
  try {
    status = sp->Load(path);
  } catch (const std::exception& e) {
    set_err(err, err_len, std::string("damaged model: ") + e.what());
    delete sp;
    return nullptr;
  }
  if (!status.ok()) {
    set_err(err, err_len, status.ToString());
    delete sp;
    return nullptr;
  }
  return sp;
}

__attribute__((visibility("default"))) void primus_spm_free(void* h) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(h);
}

__attribute__((visibility("default"))) int32_t primus_spm_size(void* h) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(h)->GetPieceSize();
}

__attribute__((visibility("default"))) int32_t primus_spm_special(void* h, int which) {
  auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(h);
  switch (which) {
    case 0:
      return sp->unk_id();
    case 1:
      return sp->bos_id();
    case 2:
      return sp->eos_id();
    default:
      return sp->pad_id();
  }
}

__attribute__((visibility("default"))) int32_t primus_spm_piece_to_id(void* h, const char* piece) {
  auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(h);
  const int id = sp->PieceToId(piece);
  return id == sp->unk_id() && std::string(piece) != sp->IdToPiece(id) ? -1 : id;
}

__attribute__((visibility("default"))) int primus_spm_encode(void* h, const char* text, size_t len,
                                                             int32_t** ids, size_t* n, char* err,
                                                             size_t err_len) {
  std::vector<int> out;
  const auto status =
      static_cast<sentencepiece::SentencePieceProcessor*>(h)->Encode(std::string_view(text, len), &out);
  if (!status.ok()) {
    set_err(err, err_len, status.ToString());
    return 1;
  }
  *n = out.size();
  *ids = static_cast<int32_t*>(std::malloc(sizeof(int32_t) * (out.size() + 1)));
  for (size_t i = 0; i < out.size(); ++i) (*ids)[i] = out[i];
  return 0;
}

__attribute__((visibility("default"))) int primus_spm_decode(void* h, const int32_t* ids, size_t n,
                                                             char** text, size_t* len, char* err,
                                                             size_t err_len) {
  std::vector<int> in(ids, ids + n);
  std::string out;
  const auto status = static_cast<sentencepiece::SentencePieceProcessor*>(h)->Decode(in, &out);
  if (!status.ok()) {
    set_err(err, err_len, status.ToString());
    return 1;
  }
  *len = out.size();
  *text = static_cast<char*>(std::malloc(out.size() + 1));
  std::memcpy(*text, out.data(), out.size());
  (*text)[out.size()] = '\0';
  return 0;
}

__attribute__((visibility("default"))) void primus_spm_free_buffer(void* p) {
  std::free(p);
}
}
