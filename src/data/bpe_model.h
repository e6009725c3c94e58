#pragma once
// The BPE model of Hugging Face tokenizers (tokenizers/src/models/bpe): a word is split into its initial
// symbols (bytes for byte-level tokenizers, else characters, with byte fallback and unknown-token handling),
// then adjacent pairs are merged lowest merge rank first (leftmost on ties) until no pair has a merge.
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace primus {

// Open-addressing map from an id pair to its merge (rank, merged id).
class MergeMap {
 public:
  struct Merge {
    int32_t rank, id;
  };
  void reserve(size_t n);
  void insert(int32_t a, int32_t b, Merge m);
  const Merge* find(int32_t a, int32_t b) const;
  size_t size() const { return count_; }

 private:
  std::vector<uint64_t> keys_;
  std::vector<Merge> values_;
  size_t mask_ = 0, count_ = 0;
};

struct BpeModel {
  // Tokens: raw bytes in byte-level mode (the ByteLevel pre-tokenizer's characters mapped back to bytes),
  // else the UTF-8 text of the token.
  std::unordered_map<std::string, int32_t> vocab;
  MergeMap merges;
  bool byte_level = false;     // initial symbols are single bytes
  bool ignore_merges = false;  // a word that is itself a token is not merged (Llama 3)
  bool byte_fallback = false;  // unknown characters become <0xXX> tokens
  bool fuse_unk = false;
  int32_t unk_id = -1;
  std::string continuing_subword_prefix, end_of_word_suffix;
  int32_t byte_token[256];   // byte-level: the id of each single byte (-1: none)
  int32_t fallback_id[256];  // <0xXX> ids (-1: none)

  BpeModel();
  // Appends the ids of one pre-tokenized word. Thread-safe; results are cached per thread.
  void tokenize(std::string_view word, std::vector<int32_t>* out) const;
  // The same without the cache (the merge loop itself).
  void tokenize_uncached(std::string_view word, std::vector<int32_t>* out) const;

 private:
  uint64_t instance_;  // keys the per-thread caches (an address could be reused by another model)
};

}  // namespace primus
