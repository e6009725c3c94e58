#include "data/tokenizer_files.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace primus {

namespace fs = std::filesystem;

namespace {

TokenizerFiles from_dir(const fs::path& d) {
  TokenizerFiles f;
  std::error_code ec;
  if (fs::is_regular_file(d / "tokenizer.json", ec)) {
    f.kind = TokenizerFiles::kHfJson;
    f.path = (d / "tokenizer.json").string();
  } else if (fs::is_regular_file(d / "tokenizer.model", ec)) {
    f.kind = TokenizerFiles::kSentencePiece;
    f.path = (d / "tokenizer.model").string();
  } else if (fs::is_regular_file(d / "vocab.json", ec) && fs::is_regular_file(d / "merges.txt", ec)) {
    f.kind = TokenizerFiles::kGpt2VocabMerges;
    f.path = (d / "vocab.json").string();
    f.merges = (d / "merges.txt").string();
  }
  return f;
}

TokenizerFiles from_path(const fs::path& p) {
  std::error_code ec;
  if (fs::is_directory(p, ec)) return from_dir(p);
  TokenizerFiles f;
  if (fs::is_regular_file(p, ec)) {
    const std::string ext = p.extension().string();
    f.path = p.string();
    f.kind = ext == ".json" ? TokenizerFiles::kHfJson : TokenizerFiles::kSentencePiece;
    if (p.filename() == "vocab.json" && fs::is_regular_file(p.parent_path() / "merges.txt", ec)) {
      f.kind = TokenizerFiles::kGpt2VocabMerges;
      f.merges = (p.parent_path() / "merges.txt").string();
    }
  }
  return f;
}

// A snapshot of models--org--name in a Hugging Face hub cache: refs/main's revision first, then any.
TokenizerFiles from_hub_cache(const fs::path& hub, const std::string& model,
                              std::vector<std::string>* searched) {
  std::string folder = "models--" + model;
  for (size_t p = folder.find('/'); p != std::string::npos; p = folder.find('/', p + 2))
    folder.replace(p, 1, "--");
  const fs::path repo = hub / folder;
  searched->push_back((repo / "snapshots").string());
  std::error_code ec;
  if (!fs::is_directory(repo / "snapshots", ec)) return {};
  std::ifstream ref(repo / "refs" / "main");
  std::string rev;
  if (ref && std::getline(ref, rev)) {
    TokenizerFiles f = from_dir(repo / "snapshots" / rev);
    if (f.kind != TokenizerFiles::kNone) return f;
  }
  for (const auto& e : fs::directory_iterator(repo / "snapshots", ec)) {
    TokenizerFiles f = from_dir(e.path());
    if (f.kind != TokenizerFiles::kNone) return f;
  }
  return {};
}

}  // namespace

TokenizerFiles find_tokenizer_files(const std::string& model) {
  TokenizerFiles f = from_path(model);
  if (f.kind != TokenizerFiles::kNone || model.empty()) return f;
  std::vector<std::string> searched{model};
  if (const char* env = std::getenv("PRIMUS_TOKENIZER_PATH")) {
    std::stringstream ss(env);
    std::string dir;
    while (std::getline(ss, dir, ':')) {
      if (dir.empty()) continue;
      for (const fs::path& c : {fs::path(dir) / model, fs::path(dir) / fs::path(model).filename()}) {
        searched.push_back(c.string());
        TokenizerFiles g = from_path(c);
        if (g.kind != TokenizerFiles::kNone) return g;
      }
    }
  }
  // Hub names look like org/name; the cache also holds plain names.
  std::vector<fs::path> hubs;
  if (const char* c = std::getenv("HF_HUB_CACHE")) hubs.emplace_back(c);
  if (const char* c = std::getenv("HUGGINGFACE_HUB_CACHE")) hubs.emplace_back(c);
  if (const char* c = std::getenv("HF_HOME")) hubs.push_back(fs::path(c) / "hub");
  if (const char* c = std::getenv("XDG_CACHE_HOME")) hubs.push_back(fs::path(c) / "huggingface" / "hub");
  if (const char* c = std::getenv("HOME")) hubs.push_back(fs::path(c) / ".cache" / "huggingface" / "hub");
  for (const fs::path& h : hubs) {
    TokenizerFiles g = from_hub_cache(h, model, &searched);
    if (g.kind != TokenizerFiles::kNone) return g;
  }
  f.searched = searched;
  return f;
}

int64_t checked_tokenizer_json_vocab_size(const nlohmann::json& j, const std::string& source) {
  using nlohmann::json;
  const json* vocab = nullptr;
  if (j.is_object() && j.contains("model") && j["model"].is_object() && j["model"].contains("vocab"))
    vocab = &j["model"]["vocab"];
  if (vocab == nullptr || !vocab->is_object())
    throw ConfigError(
        fmt::format("{}: malformed tokenizer.json: model.vocab is not an object of token: id", source));
  const json none = json::array();
  const json& added = j.contains("added_tokens") && !j["added_tokens"].is_null() ? j["added_tokens"] : none;
  if (!added.is_array())
    throw ConfigError(fmt::format("{}: malformed tokenizer.json: added_tokens is not a list", source));
  // Added tokens usually repeat or extend the model's ids; together they bound the id space.
  const int64_t entries = static_cast<int64_t>(vocab->size() + added.size());
  int64_t max_id = -1;
  auto check = [&](const json& id, const std::string& token, const char* where) {
    if (!id.is_number_integer())
      throw ConfigError(fmt::format("{}: {} token '{}' has id {}, which is not an integer", source, where,
                                    token, id.dump()));
    const bool negative = id.is_number_integer() && !id.is_number_unsigned() && id.get<int64_t>() < 0;
    if (negative || id.get<uint64_t>() >= static_cast<uint64_t>(entries))
      throw ConfigError(
          fmt::format(
              "{}: {} token '{}' has id {}, outside [0, {}): the file holds {} vocabulary entries and "
              "{} added tokens",
              source, where, token, id.dump(), entries, vocab->size(), added.size()),
          "token ids index the embedding table; the tokenizer.json is damaged or hand-edited");
    max_id = std::max(max_id, id.get<int64_t>());
  };
  for (auto it = vocab->begin(); it != vocab->end(); ++it) check(it.value(), it.key(), "vocabulary");
  for (const json& a : added) {
    if (!a.is_object() || !a.contains("id") || !a.contains("content") || !a["content"].is_string())
      throw ConfigError(fmt::format("{}: malformed tokenizer.json: an added token without id and content: {}",
                                    source, a.dump().substr(0, 200)));
    check(a["id"], a["content"].get<std::string>(), "added");
  }
  return max_id + 1;
}

int64_t sentencepiece_piece_count(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("tokenizer_model: cannot read {}", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  auto bad = [&](size_t off) {
    return ConfigError(fmt::format(
        "tokenizer_model: {} is not a SentencePiece model (protobuf damaged at byte {})", path, off));
  };
  size_t i = 0;
  auto varint = [&](uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (i >= s.size()) throw bad(i);
      const uint8_t b = static_cast<uint8_t>(s[i++]);
      *v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return;
    }
    throw bad(i);
  };
  int64_t pieces = 0;
  while (i < s.size()) {
    uint64_t key = 0, len = 0;
    const size_t at = i;
    varint(&key);
    const uint64_t field = key >> 3, wire = key & 7;
    if (wire == 0) {
      varint(&len);
    } else if (wire == 1) {
      i += 8;
    } else if (wire == 5) {
      i += 4;
    } else if (wire == 2) {
      varint(&len);
      if (len > s.size() - i) throw bad(at);
      i += len;
      if (field == 1) ++pieces;  // ModelProto.pieces
    } else {
      throw bad(at);
    }
    if (i > s.size()) throw bad(at);
  }
  if (pieces == 0) throw bad(0);
  return pieces;
}

std::optional<int64_t> tokenizer_file_vocab_size(const std::string& type, const std::string& model,
                                                 const std::string& vocab_file) {
  using nlohmann::json;
  auto read_json = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ConfigError(fmt::format("cannot read {}", path));
    try {
      return json::parse(in);
    } catch (const json::exception& e) {
      throw ConfigError(fmt::format("{} is not valid JSON: {}", path, e.what()));
    }
  };
  if (type == "GPT2BPETokenizer") {
    if (vocab_file.empty() || !fs::is_regular_file(vocab_file)) return std::nullopt;
    return static_cast<int64_t>(read_json(vocab_file).size());
  }
  if (type == "ByteTokenizer" || type == "NullTokenizer" || model.empty()) return std::nullopt;
  const TokenizerFiles f = find_tokenizer_files(model);
  switch (f.kind) {
    case TokenizerFiles::kNone:
      return std::nullopt;
    case TokenizerFiles::kSentencePiece:
      return sentencepiece_piece_count(f.path);
    case TokenizerFiles::kGpt2VocabMerges:
      return static_cast<int64_t>(read_json(f.path).size());
    case TokenizerFiles::kHfJson:
      return checked_tokenizer_json_vocab_size(read_json(f.path), f.path);
  }
  return std::nullopt;
}

}  // namespace primus
