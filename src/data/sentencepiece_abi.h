#pragma once
// The C interface of libprimus_sentencepiece.so, the plugin that wraps Debian's libsentencepiece. The plugin
// is loaded with dlopen only when a SentencePiece tokenizer is requested, so the `primus` binary itself needs
// no libsentencepiece (the GPU machines do not have it).
#include <stddef.h>
#include <stdint.h>

extern "C" {
// Returns a handle, or null with a message in err.
typedef void* (*primus_spm_load_fn)(const char* path, char* err, size_t err_len);
typedef void (*primus_spm_free_fn)(void* handle);
typedef int32_t (*primus_spm_size_fn)(void* handle);  // vocabulary size
// The id of a special piece: which = 0 unk, 1 bos, 2 eos, 3 pad (-1: none).
typedef int32_t (*primus_spm_special_fn)(void* handle, int which);
typedef int32_t (*primus_spm_piece_to_id_fn)(void* handle, const char* piece);
// Encodes text into ids; *ids is malloc'ed (free with primus_spm_free_buffer). 0 on success.
typedef int (*primus_spm_encode_fn)(void* handle, const char* text, size_t len, int32_t** ids, size_t* n,
                                    char* err, size_t err_len);
typedef int (*primus_spm_decode_fn)(void* handle, const int32_t* ids, size_t n, char** text, size_t* len,
                                    char* err, size_t err_len);
typedef void (*primus_spm_free_buffer_fn)(void* p);
}
