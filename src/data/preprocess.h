#pragma once
// `primus data preprocess`: Megatron's tools/preprocess_data.py in C++. Documents are read on one thread,
// tokenized by --workers threads, and written in input order to `<output_prefix>_<key>_document.{bin,idx}`
// (one dataset per json key), so the output does not depend on the number of workers.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/document_reader.h"
#include "data/tokenizer.h"

namespace primus {

struct PreprocessOptions {
  std::string input;
  InputFormat format = InputFormat::kAuto;
  std::vector<std::string> json_keys{"text"};
  std::string output_prefix;
  int workers = 1;
  bool append_eod = false;
  bool add_special_tokens = true;  // HF's default (Megatron's tokenize() keeps it)
};

struct PreprocessProgress {
  int64_t docs = 0, tokens = 0, bytes = 0, total_bytes = 0;
  double seconds = 0;
  bool final = false;
};

struct PreprocessStats {
  int64_t docs = 0;         // documents with tokens
  int64_t skipped = 0;      // documents without tokens (written empty, as Megatron does)
  int64_t tokens = 0;       // tokens written over all keys
  int64_t input_bytes = 0;  // bytes of input read
  int64_t text_bytes = 0;   // bytes of text tokenized
  int64_t repaired = 0;     // invalid UTF-8 sequences replaced by U+FFFD
  double seconds = 0;
  std::vector<std::string> outputs;  // prefixes written
  InputFormat format = InputFormat::kAuto;
};

// Runs the pipeline. `progress` is called from the calling thread after each written batch and once at the
// end.
PreprocessStats preprocess(const Tokenizer& tok, const PreprocessOptions& opt,
                           const std::function<void(const PreprocessProgress&)>& progress = {});

// Megatron's output naming: <prefix>_<key>_document.
std::string preprocess_output_prefix(const std::string& prefix, const std::string& key);

}  // namespace primus
