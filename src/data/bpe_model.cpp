#include "data/bpe_model.h"

#include <queue>

#include "data/unicode.h"

namespace primus {

namespace {
uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  return k;
}
constexpr uint64_t kEmpty = ~0ull;
std::atomic<uint64_t> g_next_instance{1};
}  // namespace

void MergeMap::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  keys_.assign(cap, kEmpty);
  values_.assign(cap, Merge{0, 0});
  mask_ = cap - 1;
  count_ = 0;
}

void MergeMap::insert(int32_t a, int32_t b, Merge m) {
  if ((count_ + 1) * 2 > keys_.size()) {
    std::vector<uint64_t> old_keys = std::move(keys_);
    std::vector<Merge> old_values = std::move(values_);
    reserve(std::max<size_t>(16, count_ * 2 + 2));
    for (size_t i = 0; i < old_keys.size(); ++i)
      if (old_keys[i] != kEmpty)
        insert(static_cast<int32_t>(old_keys[i] >> 32), static_cast<int32_t>(old_keys[i]), old_values[i]);
  }
  const uint64_t k = pair_key(a, b);
  size_t i = mix(k) & mask_;
  while (keys_[i] != kEmpty && keys_[i] != k) i = (i + 1) & mask_;
  if (keys_[i] == kEmpty) ++count_;
  keys_[i] = k;
  values_[i] = m;
}

const MergeMap::Merge* MergeMap::find(int32_t a, int32_t b) const {
  if (keys_.empty()) return nullptr;
  const uint64_t k = pair_key(a, b);
  size_t i = mix(k) & mask_;
  while (keys_[i] != kEmpty) {
    if (keys_[i] == k) return &values_[i];
    i = (i + 1) & mask_;
  }
  return nullptr;
}

BpeModel::BpeModel() : instance_(g_next_instance.fetch_add(1)) {
  for (int i = 0; i < 256; ++i) byte_token[i] = fallback_id[i] = -1;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  // Per-thread cache of word -> ids, as HF's BPE cache (words longer than 256 bytes are not cached).
  struct Cache {
    uint64_t instance = 0;
    std::unordered_map<std::string, std::vector<int32_t>> map;
  };
  thread_local Cache cache;
  if (cache.instance != instance_) {
    cache.map.clear();
    cache.instance = instance_;
  }
  if (word.size() <= 256) {
    auto it = cache.map.find(std::string(word));
    if (it != cache.map.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t before = out->size();
  tokenize_uncached(word, out);
  if (word.size() <= 256) {
    if (cache.map.size() > 200000) cache.map.clear();
    cache.map.emplace(std::string(word),
                      std::vector<int32_t>(out->begin() + static_cast<std::ptrdiff_t>(before), out->end()));
  }
}

void BpeModel::tokenize_uncached(std::string_view word, std::vector<int32_t>* out) const {
  if (ignore_merges) {
    auto it = vocab.find(std::string(word));
    if (it != vocab.end()) {
      out->push_back(it->second);
      return;
    }
  }
  // Initial symbols.
  std::vector<int32_t> sym;
  sym.reserve(word.size());
  if (byte_level && continuing_subword_prefix.empty() && end_of_word_suffix.empty()) {
    for (unsigned char c : word)
      if (byte_token[c] >= 0) sym.push_back(byte_token[c]);  // a byte without a token is dropped, as in HF
  } else {
    int32_t pending_unk = -1;  // fuse_unk: consecutive unknown characters become one <unk>
    size_t i = 0;
    std::string s;
    while (i < word.size()) {
      size_t n = byte_level ? 1 : utf8::valid_sequence_length(word, i);
      if (n == 0) n = 1;
      const bool first = i == 0, last = i + n == word.size();
      s.assign(word.substr(i, n));
      if (!first && !continuing_subword_prefix.empty()) s = continuing_subword_prefix + s;
      if (last && !end_of_word_suffix.empty()) s += end_of_word_suffix;
      auto it = vocab.find(s);
      if (it != vocab.end()) {
        if (pending_unk >= 0) {
          sym.push_back(pending_unk);
          pending_unk = -1;
        }
        sym.push_back(it->second);
      } else {
        bool done = false;
        if (byte_fallback) {
          bool all = true;
          for (size_t k = 0; k < n; ++k)
            all = all && fallback_id[static_cast<unsigned char>(word[i + k])] >= 0;
          if (all) {
            if (pending_unk >= 0) {
              sym.push_back(pending_unk);
              pending_unk = -1;
            }
            for (size_t k = 0; k < n; ++k)
              sym.push_back(fallback_id[static_cast<unsigned char>(word[i + k])]);
            done = true;
          }
        }
        if (!done && unk_id >= 0) {
          if (pending_unk >= 0 && !fuse_unk) sym.push_back(pending_unk);
          pending_unk = unk_id;
        }
      }
      i += n;
    }
    if (pending_unk >= 0) sym.push_back(pending_unk);
  }
  if (sym.size() <= 1) {
    out->insert(out->end(), sym.begin(), sym.end());
    return;
  }
  // Word::merge_all: a min-heap of (rank, position); stale entries are skipped when popped.
  const int n = static_cast<int>(sym.size());
  std::vector<int> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  std::vector<char> alive(static_cast<size_t>(n), 1);
  for (int i = 0; i < n; ++i) {
    prev[static_cast<size_t>(i)] = i - 1;
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  struct Entry {
    int32_t rank, pos, id;
    bool operator<(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Entry> heap;
  for (int i = 0; i + 1 < n; ++i)
    if (const MergeMap::Merge* m = merges.find(sym[static_cast<size_t>(i)], sym[static_cast<size_t>(i) + 1]))
      heap.push({m->rank, i, m->id});
  while (!heap.empty()) {
    const Entry top = heap.top();
    heap.pop();
    const size_t p = static_cast<size_t>(top.pos);
    if (!alive[p] || next[p] < 0) continue;
    const size_t q = static_cast<size_t>(next[p]);
    const MergeMap::Merge* m = merges.find(sym[p], sym[q]);
    if (m == nullptr || m->id != top.id) continue;  // the pair changed since this entry was queued
    sym[p] = top.id;
    alive[q] = 0;
    next[p] = next[q];
    if (next[q] >= 0) prev[static_cast<size_t>(next[q])] = static_cast<int>(p);
    if (prev[p] >= 0) {
      const size_t l = static_cast<size_t>(prev[p]);
      if (const MergeMap::Merge* ml = merges.find(sym[l], sym[p]))
        heap.push({ml->rank, static_cast<int>(l), ml->id});
    }
    if (next[p] >= 0) {
      const size_t r = static_cast<size_t>(next[p]);
      if (const MergeMap::Merge* mr = merges.find(sym[p], sym[r]))
        heap.push({mr->rank, static_cast<int>(p), mr->id});
    }
  }
  for (int i = 0; i >= 0; i = next[static_cast<size_t>(i)]) out->push_back(sym[static_cast<size_t>(i)]);
}

}  // namespace primus
