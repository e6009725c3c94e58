// Fuzzes a SentencePiece tokenizer.model. The protobuf itself is parsed by Debian's libsentencepiece; what
// Primus reads on its own is the piece count (sentencepiece_piece_count: a hand-written protobuf walk used to
// size the vocabulary without the plugin). Both are fuzzed: our walk, and, when libsentencepiece is present,
// the plugin's load path (src/data/plugin, linked directly) followed by an encode / decode of fixed text.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "data/sentencepiece_abi.h"
#include "data/tokenizer_files.h"
#include "fuzz_util.h"

#ifdef PRIMUS_FUZZ_SPM_PLUGIN
extern "C" {
void* primus_spm_load(const char* path, char* err, size_t err_len);
void primus_spm_free(void* h);
int32_t primus_spm_size(void* h);
int primus_spm_encode(void* h, const char* text, size_t len, int32_t** ids, size_t* n, char* err,
                      size_t err_len);
int primus_spm_decode(void* h, const int32_t* ids, size_t n, char** text, size_t* len, char* err,
                      size_t err_len);
void primus_spm_free_buffer(void* p);
}
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = primus::fuzz::write_file("tokenizer.model", data, size);
  int64_t pieces = -1;
  try {
    pieces = primus::sentencepiece_piece_count(path);
    if (pieces <= 0) __builtin_trap();
  } catch (const primus::Error&) {
  }
#ifdef PRIMUS_FUZZ_SPM_PLUGIN
  {
    char err[256];
    void* h = primus_spm_load(path.c_str(), err, sizeof(err));
    if (h != nullptr) {
      const std::string text = "Hello world, naïve café 1234";
      int32_t* ids = nullptr;
      size_t n = 0;
      if (primus_spm_encode(h, text.data(), text.size(), &ids, &n, err, sizeof(err)) == 0) {
        char* out = nullptr;
        size_t len = 0;
        if (primus_spm_decode(h, ids, n, &out, &len, err, sizeof(err)) == 0) primus_spm_free_buffer(out);
        primus_spm_free_buffer(ids);
      }
      primus_spm_free(h);
    }
  }
#endif
  return 0;
}
