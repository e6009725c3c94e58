#pragma once
// Internal to hf_tokenizer*.cpp: the components of a loaded tokenizer.json.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/bpe_model.h"
#include "data/regex.h"

namespace primus {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false, normalized = false, lstrip = false, rstrip = false, single_word = false;
};

// Leftmost-longest matching of a set of literal tokens (HF's AddedVocabulary split tries).
class AddedTokenMatcher {
 public:
  void add(const AddedToken* t);
  void finalize();
  bool empty() const { return tokens_.empty(); }
  // Longest token starting at s[i], or null.
  const AddedToken* match_at(std::string_view s, size_t i) const;

 private:
  std::vector<const AddedToken*> tokens_;
  std::vector<std::vector<const AddedToken*>> by_first_byte_ =
      std::vector<std::vector<const AddedToken*>>(256);
};

struct NormalizerStep {
  enum Kind { kNfc, kPrepend, kReplace } kind;
  std::string a, b;              // Prepend: a; Replace: pattern a -> b
  std::shared_ptr<Regex> regex;  // Replace with a Regex pattern
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum Kind { kSplit, kByteLevel, kMetaspace, kDigits } kind;
  std::shared_ptr<Regex> regex;  // Split with a Regex pattern, ByteLevel with use_regex, Digits
  std::string literal;           // Split with a String pattern
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel
  std::string replacement;        // Metaspace
  enum Prepend { kAlways, kFirst, kNever } prepend = kAlways;
  bool split = true;  // Metaspace
};

struct PostItem {
  bool sequence = false;     // $A
  std::vector<int32_t> ids;  // a special token's ids
};

struct DecoderStep {
  enum Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
  std::string a, b;  // Replace: a -> b; Metaspace: a = replacement
  std::string strip_content;
  int strip_start = 0, strip_stop = 0;
  bool metaspace_prepend = true;
};

struct HfPipeline {
  std::vector<AddedToken> added;
  AddedTokenMatcher raw_matcher, normalized_matcher;
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
  BpeModel model;
  std::vector<PostItem> post;  // single-sequence template (empty: nothing added)
  bool has_decoder = false;
  std::vector<DecoderStep> decoder;
  std::vector<std::string> id_to_token;  // the token strings as in tokenizer.json (added tokens included)
  std::vector<char> is_special;          // per id
  std::map<std::string, int32_t> added_by_content;
  int64_t vocab_size = 0;
  std::string source;
};

}  // namespace primus
