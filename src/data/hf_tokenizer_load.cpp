// HfTokenizer: reading tokenizer.json (and GPT-2's vocab.json + merges.txt) into the pipeline.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "data/hf_pipeline.h"
#include "data/hf_tokenizer.h"
#include "data/tokenizer_files.h"
#include "data/unicode.h"

namespace primus {

using nlohmann::json;

namespace {

const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

ConfigError unsupported(const std::string& source, const std::string& what) {
  return ConfigError(
      fmt::format("{}: {} is not supported by Primus-C++'s tokenizer", source, what),
      "supported: normalizers NFC/Prepend/Replace/Sequence; pre-tokenizers Split/ByteLevel/"
      "Metaspace/Digits/Sequence; model BPE; post-processors TemplateProcessing/ByteLevel/"
      "RobertaProcessing/BertProcessing/Sequence; decoders ByteLevel/Replace/ByteFallback/Fuse/"
      "Strip/Metaspace/Sequence (docs/data.md)");
}

std::string str_or(const json& j, const char* key, const std::string& def) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : def;
}
bool bool_or(const json& j, const char* key, bool def) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : def;
}

// A Split / Replace pattern: {"Regex": "..."} or {"String": "..."}.
void read_pattern(const json& j, const std::string& source, std::shared_ptr<Regex>* regex,
                  std::string* literal) {
  if (!j.is_object()) throw unsupported(source, "a pattern that is not {\"Regex\"|\"String\": ...}");
  if (j.contains("Regex")) {
    *regex = std::make_shared<Regex>(j["Regex"].get<std::string>(), source);
  } else if (j.contains("String")) {
    *literal = j["String"].get<std::string>();
  } else {
    throw unsupported(source, "a pattern that is not {\"Regex\"|\"String\": ...}");
  }
}

void read_normalizer(const json& j, const std::string& source, std::vector<NormalizerStep>* out) {
  if (j.is_null()) return;
  const std::string type = str_or(j, "type", "");
  if (type == "Sequence") {
    for (const json& n : j.at("normalizers")) read_normalizer(n, source, out);
  } else if (type == "NFC") {
    out->push_back({NormalizerStep::kNfc, {}, {}, nullptr});
  } else if (type == "Prepend") {
    out->push_back({NormalizerStep::kPrepend, j.at("prepend").get<std::string>(), {}, nullptr});
  } else if (type == "Replace") {
    NormalizerStep s{NormalizerStep::kReplace, {}, j.at("content").get<std::string>(), nullptr};
    read_pattern(j.at("pattern"), source, &s.regex, &s.a);
    out->push_back(std::move(s));
  } else {
    throw unsupported(source, fmt::format("normalizer '{}'", type));
  }
}

SplitBehavior behavior(const std::string& b, const std::string& source) {
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  throw unsupported(source, fmt::format("split behavior '{}'", b));
}

void read_pre_tokenizer(const json& j, const std::string& source, std::vector<PreTokenizerStep>* out) {
  if (j.is_null()) return;
  const std::string type = str_or(j, "type", "");
  PreTokenizerStep s{};
  if (type == "Sequence") {
    for (const json& n : j.at("pretokenizers")) read_pre_tokenizer(n, source, out);
    return;
  } else if (type == "Split") {
    s.kind = PreTokenizerStep::kSplit;
    read_pattern(j.at("pattern"), source, &s.regex, &s.literal);
    s.behavior = behavior(str_or(j, "behavior", "Isolated"), source);
    s.invert = bool_or(j, "invert", false);
  } else if (type == "ByteLevel") {
    s.kind = PreTokenizerStep::kByteLevel;
    s.add_prefix_space = bool_or(j, "add_prefix_space", true);
    if (bool_or(j, "use_regex", true)) s.regex = std::make_shared<Regex>(kGpt2Pattern, source);
  } else if (type == "Metaspace") {
    s.kind = PreTokenizerStep::kMetaspace;
    s.replacement = str_or(j, "replacement", "\xE2\x96\x81");
    const std::string scheme =
        str_or(j, "prepend_scheme", bool_or(j, "add_prefix_space", true) ? "always" : "never");
    s.prepend = scheme == "first"   ? PreTokenizerStep::kFirst
                : scheme == "never" ? PreTokenizerStep::kNever
                                    : PreTokenizerStep::kAlways;
    s.split = bool_or(j, "split", true);
  } else if (type == "Digits") {
    s.kind = PreTokenizerStep::kDigits;
    s.regex = std::make_shared<Regex>(R"(\p{N})", source);
    s.behavior =
        bool_or(j, "individual_digits", false) ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
  } else {
    throw unsupported(source, fmt::format("pre-tokenizer '{}'", type));
  }
  out->push_back(std::move(s));
}

void read_decoder(const json& j, const std::string& source, std::vector<DecoderStep>* out) {
  const std::string type = str_or(j, "type", "");
  DecoderStep d{};
  if (type == "Sequence") {
    for (const json& n : j.at("decoders")) read_decoder(n, source, out);
    return;
  } else if (type == "ByteLevel") {
    d.kind = DecoderStep::kByteLevel;
  } else if (type == "Replace") {
    d.kind = DecoderStep::kReplace;
    std::shared_ptr<Regex> re;
    read_pattern(j.at("pattern"), source, &re, &d.a);
    if (re) throw unsupported(source, "a Replace decoder with a Regex pattern");
    d.b = j.at("content").get<std::string>();
  } else if (type == "ByteFallback") {
    d.kind = DecoderStep::kByteFallback;
  } else if (type == "Fuse") {
    d.kind = DecoderStep::kFuse;
  } else if (type == "Strip") {
    d.kind = DecoderStep::kStrip;
    d.strip_content = j.at("content").get<std::string>();
    d.strip_start = j.value("start", 0);
    d.strip_stop = j.value("stop", 0);
    if (utf8::decode(d.strip_content).size() != 1)
      throw unsupported(source, "a Strip decoder of several characters");
  } else if (type == "Metaspace") {
    d.kind = DecoderStep::kMetaspace;
    d.a = str_or(j, "replacement", "\xE2\x96\x81");
    const std::string scheme =
        str_or(j, "prepend_scheme", bool_or(j, "add_prefix_space", true) ? "always" : "never");
    d.metaspace_prepend = scheme != "never";
  } else {
    throw unsupported(source, fmt::format("decoder '{}'", type));
  }
  out->push_back(std::move(d));
}

// The post-processor's single-sequence template, resolved to ids.
void read_post_processor(const json& j, const std::string& source, const HfPipeline& p,
                         std::vector<PostItem>* out) {
  if (j.is_null()) return;
  const std::string type = str_or(j, "type", "");
  auto token_id = [&](const std::string& tok) {
    auto a = p.added_by_content.find(tok);
    if (a != p.added_by_content.end()) return a->second;
    for (size_t i = 0; i < p.id_to_token.size(); ++i)
      if (p.id_to_token[i] == tok) return static_cast<int32_t>(i);
    throw ConfigError(fmt::format("{}: post-processor token '{}' is not in the vocabulary", source, tok));
  };
  // Ids the template inserts go straight into the encoded output: they must index the vocabulary too.
  auto vocab_id = [&](const json& v, const std::string& tok) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= p.vocab_size)
      throw ConfigError(fmt::format("{}: post-processor token '{}' has id {}, outside the vocabulary [0, {})",
                                    source, tok, v.dump(), p.vocab_size));
    return static_cast<int32_t>(v.get<int64_t>());
  };
  if (type == "Sequence") {
    for (const json& n : j.at("processors")) read_post_processor(n, source, p, out);
  } else if (type == "ByteLevel") {
    // Offsets only: ids are unchanged.
  } else if (type == "TemplateProcessing") {
    std::vector<PostItem> items;
    for (const json& piece : j.at("single")) {
      if (piece.contains("Sequence")) {
        items.push_back({true, {}});
      } else if (piece.contains("SpecialToken")) {
        const std::string id = piece["SpecialToken"].at("id").get<std::string>();
        const json& st = j.at("special_tokens").at(id);
        PostItem item;
        for (const json& v : st.at("ids")) item.ids.push_back(vocab_id(v, id));
        items.push_back(std::move(item));
      } else {
        throw unsupported(source, "a TemplateProcessing piece other than Sequence / SpecialToken");
      }
    }
    if (!out->empty()) throw unsupported(source, "two templates in one post-processor Sequence");
    *out = std::move(items);
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    const json& cls = j.at("cls");
    const json& sep = j.at("sep");
    auto pair_id = [&](const json& pair) {
      const std::string name = pair.at(0).get<std::string>();
      return pair.at(1).is_number() ? vocab_id(pair.at(1), name) : token_id(name);
    };
    *out = {PostItem{false, {pair_id(cls)}}, PostItem{true, {}}, PostItem{false, {pair_id(sep)}}};
  } else {
    throw unsupported(source, fmt::format("post-processor '{}'", type));
  }
}

// In byte-level mode the model works on bytes: a token's characters map back to bytes (null if one does not).
bool token_bytes(const std::string& token, std::string* out) {
  out->clear();
  if (!utf8::is_valid(token)) return false;
  for (char32_t c : utf8::decode(token)) {
    const int b = byte_from_char(c);
    if (b < 0) return false;
    out->push_back(static_cast<char>(b));
  }
  return true;
}

std::string token_name(const json& t) {
  return t.is_string() ? t.get<std::string>() : t.is_object() ? str_or(t, "content", "") : "";
}

}  // namespace

HfTokenizer::HfTokenizer() : p_(std::make_unique<HfPipeline>()) {}
HfTokenizer::~HfTokenizer() = default;

std::unique_ptr<HfTokenizer> HfTokenizer::from_json(const json& j, const json* config,
                                                    const std::string& source) {
  std::unique_ptr<HfTokenizer> tok(new HfTokenizer());
  HfPipeline& p = *tok->p_;
  p.source = source;
  try {
    const json& model = j.at("model");
    const std::string mtype = str_or(model, "type", "BPE");
    if (mtype != "BPE") throw unsupported(source, fmt::format("model type '{}'", mtype));
    if (!model.value("dropout", json()).is_null()) throw unsupported(source, "BPE dropout");
    read_normalizer(j.value("normalizer", json()), source, &p.normalizer);
    read_pre_tokenizer(j.value("pre_tokenizer", json()), source, &p.pre_tokenizer);
    BpeModel& m = p.model;
    for (size_t i = 0; i < p.pre_tokenizer.size(); ++i) {
      if (p.pre_tokenizer[i].kind != PreTokenizerStep::kByteLevel) continue;
      m.byte_level = true;
      if (i + 1 != p.pre_tokenizer.size()) throw unsupported(source, "a pre-tokenizer after ByteLevel");
    }
    m.ignore_merges = bool_or(model, "ignore_merges", false);
    m.byte_fallback = bool_or(model, "byte_fallback", false);
    m.fuse_unk = bool_or(model, "fuse_unk", false);
    m.continuing_subword_prefix = str_or(model, "continuing_subword_prefix", "");
    m.end_of_word_suffix = str_or(model, "end_of_word_suffix", "");

    // Vocabulary.
    const json& vocab = model.at("vocab");
    // Every id is checked before any table is sized or indexed by one.
    const int64_t max_id = checked_tokenizer_json_vocab_size(j, source) - 1;
    p.id_to_token.assign(static_cast<size_t>(max_id + 1), std::string());
    p.is_special.assign(static_cast<size_t>(max_id + 1), 0);
    p.vocab_size = max_id + 1;
    m.vocab.reserve(vocab.size() * 2);
    std::string bytes;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      const int32_t id = it.value().get<int32_t>();
      const std::string& t = it.key();
      p.id_to_token[static_cast<size_t>(id)] = t;
      if (m.byte_level) {
        if (token_bytes(t, &bytes)) m.vocab.emplace(bytes, id);
      } else {
        m.vocab.emplace(t, id);
      }
    }
    if (m.byte_level) {
      for (int b = 0; b < 256; ++b) {
        auto it = m.vocab.find(std::string(1, static_cast<char>(b)));
        m.byte_token[b] = it == m.vocab.end() ? -1 : it->second;
      }
    }
    for (int b = 0; b < 256; ++b) {
      auto it = vocab.find(fmt::format("<0x{:02X}>", b));
      m.fallback_id[b] = it == vocab.end() ? -1 : it->get<int32_t>();
    }
    const std::string unk = str_or(model, "unk_token", "");
    if (!unk.empty()) {
      auto it = vocab.find(unk);
      if (it == vocab.end())
        throw ConfigError(fmt::format("{}: unk_token '{}' is not in the vocabulary", source, unk));
      m.unk_id = it->get<int32_t>();
    }

    // Merges: "a b" strings or [a, b] pairs; the rank is the position.
    const json& merges = model.at("merges");
    m.merges.reserve(merges.size());
    int32_t rank = 0;
    std::string a, b, ab;
    for (const json& mg : merges) {
      if (mg.is_string()) {
        const std::string s = mg.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          throw ConfigError(
              fmt::format("{}: merge {} '{}' is not two tokens separated by one space", source, rank, s));
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        a = mg.at(0).get<std::string>();
        b = mg.at(1).get<std::string>();
      }
      std::string suffix_b = b;
      if (!m.continuing_subword_prefix.empty() && b.rfind(m.continuing_subword_prefix, 0) == 0)
        suffix_b = b.substr(m.continuing_subword_prefix.size());
      ab = a + suffix_b;
      auto ia = vocab.find(a), ib = vocab.find(b), iab = vocab.find(ab);
      if (ia == vocab.end() || ib == vocab.end() || iab == vocab.end())
        throw ConfigError(fmt::format("{}: merge {} ('{}' + '{}') names a token missing from the vocabulary",
                                      source, rank, a, b));
      m.merges.insert(ia->get<int32_t>(), ib->get<int32_t>(), {rank, iab->get<int32_t>()});
      ++rank;
    }

    // Added tokens.
    for (const json& a_tok : j.value("added_tokens", json::array())) {
      AddedToken t;
      t.id = a_tok.at("id").get<int32_t>();
      t.content = a_tok.at("content").get<std::string>();
      t.special = bool_or(a_tok, "special", false);
      t.normalized = bool_or(a_tok, "normalized", !t.special);
      t.lstrip = bool_or(a_tok, "lstrip", false);
      t.rstrip = bool_or(a_tok, "rstrip", false);
      t.single_word = bool_or(a_tok, "single_word", false);
      p.added.push_back(t);
    }
    for (const AddedToken& t : p.added) {
      p.id_to_token[static_cast<size_t>(t.id)] = t.content;
      p.is_special[static_cast<size_t>(t.id)] = t.special;
      p.added_by_content[t.content] = t.id;
    }
    // Normalized added tokens are matched on normalized text, so their content is normalized too.
    for (const AddedToken& t : p.added)
      if (!t.normalized) p.raw_matcher.add(&t);
    for (AddedToken& t : p.added) {
      if (t.normalized) {
        std::string s = t.content;
        for (const NormalizerStep& n : p.normalizer) {
          if (n.kind == NormalizerStep::kNfc) s = utf8::nfc(s);
          if (n.kind == NormalizerStep::kReplace && !n.regex) {
            std::string r;
            for (size_t q = 0; q < s.size();) {
              if (!n.a.empty() && s.compare(q, n.a.size(), n.a) == 0) {
                r += n.b;
                q += n.a.size();
              } else {
                r += s[q++];
              }
            }
            s = r;
          }
          if (n.kind == NormalizerStep::kPrepend && !s.empty()) s = n.a + s;
        }
        t.content = s;
        p.normalized_matcher.add(&t);
      }
    }
    p.raw_matcher.finalize();
    p.normalized_matcher.finalize();

    read_post_processor(j.value("post_processor", json()), source, p, &p.post);
    const json dec = j.value("decoder", json());
    p.has_decoder = !dec.is_null();
    if (p.has_decoder) read_decoder(dec, source, &p.decoder);
  } catch (const json::exception& e) {
    throw ConfigError(fmt::format("{}: malformed tokenizer.json: {}", source, e.what()));
  }

  // EOD / BOS: tokenizer_config.json's eos_token / bos_token (what Megatron's HuggingFaceTokenizer uses),
  // else a well-known end-of-text token among the added tokens.
  if (config != nullptr && config->is_object()) {
    if (config->contains("eos_token")) tok->eod_ = tok->token_to_id(token_name((*config)["eos_token"]));
    if (config->contains("bos_token")) tok->bos_ = tok->token_to_id(token_name((*config)["bos_token"]));
  }
  if (tok->eod_ < 0) {
    for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|im_end|>", "<EOD>"}) {
      auto it = p.added_by_content.find(name);
      if (it != p.added_by_content.end()) {
        tok->eod_ = it->second;
        break;
      }
    }
  }
  if (tok->bos_ < 0) {
    for (const char* name : {"<|begin_of_text|>", "<s>", "<bos>"}) {
      auto it = p.added_by_content.find(name);
      if (it != p.added_by_content.end()) {
        tok->bos_ = it->second;
        break;
      }
    }
  }
  tok->name_ = fmt::format("HuggingFaceTokenizer ({}, {} tokens)", source, p.vocab_size);
  return tok;
}

namespace {
json read_json_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("{}: cannot read {}", what, path));
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw ConfigError(fmt::format("{}: {} is not valid JSON: {}", what, path, e.what()));
  }
}
}  // namespace

std::unique_ptr<HfTokenizer> HfTokenizer::from_file(const std::string& path) {
  const json j = read_json_file(path, "tokenizer_model");
  const std::string cfg_path = (std::filesystem::path(path).parent_path() / "tokenizer_config.json").string();
  json cfg;
  const bool has_cfg = std::filesystem::exists(cfg_path);
  if (has_cfg) cfg = read_json_file(cfg_path, "tokenizer_model");
  return from_json(j, has_cfg ? &cfg : nullptr, path);
}

std::unique_ptr<HfTokenizer> HfTokenizer::gpt2_from_files(const std::string& vocab_json,
                                                          const std::string& merges_txt) {
  json vocab = read_json_file(vocab_json, "vocab_file");
  std::ifstream in(merges_txt, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("merge_file: cannot read {}", merges_txt));
  json merges = json::array();
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (first && line.rfind("#version", 0) == 0) {
      first = false;
      continue;
    }
    first = false;
    if (!line.empty()) merges.push_back(line);
  }
  json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}};
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["added_tokens"] = json::array();
  auto tok = from_json(j, nullptr, vocab_json);
  // Megatron's GPT2Tokenizer: <|endoftext|> is the EOD id, but text is never matched against it.
  auto it = vocab.find("<|endoftext|>");
  tok->eod_ = it == vocab.end() ? -1 : it->get<int32_t>();
  tok->name_ = fmt::format("GPT2BPETokenizer ({}, {} tokens)", vocab_json, tok->p_->vocab_size);
  return tok;
}

}  // namespace primus
