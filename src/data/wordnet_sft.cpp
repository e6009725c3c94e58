#include "data/wordnet_sft.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "core/error.h"
#include "core/philox.h"

namespace primus::data {

const char* wordnet_pos_name(char pos) {
  switch (pos) {
    case 'n':
      return "noun";
    case 'v':
      return "verb";
    case 'a':
    case 's':
      return "adjective";
    case 'r':
      return "adverb";
    default:
      return "?";
  }
}

namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// WordNet writes multi-word lemmas with underscores and marks some adjectives' syntactic position with a
// suffix: (a) prenominal, (p) predicate, (ip) immediately postnominal. Neither belongs in an answer.
std::string clean_word(std::string w) {
  for (const char* marker : {"(a)", "(p)", "(ip)"}) {
    if (w.ends_with(marker)) {
      w.resize(w.size() - std::char_traits<char>::length(marker));
      break;
    }
  }
  std::replace(w.begin(), w.end(), '_', ' ');
  return w;
}

// The gloss is the definition, then optional examples, each `"..."`, separated by "; ". Definitions contain
// semicolons of their own, so the definition ends at the first `; "` (or a quote at the very start).
void split_gloss(const std::string& gloss, WordNetSynset* s) {
  size_t def_end = gloss.find("; \"");
  if (!gloss.empty() && gloss[0] == '"') def_end = 0;
  s->definition = trim(gloss.substr(0, def_end));
  while (!s->definition.empty() && s->definition.back() == ';')
    s->definition = trim(s->definition.substr(0, s->definition.size() - 1));
  if (def_end == std::string::npos) return;
  size_t pos = def_end;
  while ((pos = gloss.find('"', pos)) != std::string::npos) {
    const size_t end = gloss.find('"', pos + 1);
    if (end == std::string::npos) break;  // an unbalanced quote: the rest is not a clean example
    const std::string ex = trim(gloss.substr(pos + 1, end - pos - 1));
    if (!ex.empty()) s->examples.push_back(ex);
    pos = end + 1;
  }
}

}  // namespace

std::vector<WordNetSynset> parse_wordnet_data(std::istream& in, const std::string& source) {
  std::vector<WordNetSynset> out;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line.starts_with("  ")) continue;  // the license header
    const std::string where = fmt::format("{}:{}", source, line_no);
    const size_t bar = line.find(" | ");
    if (bar == std::string::npos)
      throw ConfigError(fmt::format("{}: no ' | ' before the gloss (expected a WordNet data line)", where));
    std::istringstream f(line.substr(0, bar));
    auto field = [&](const char* what) {
      std::string tok;
      if (!(f >> tok))
        throw ConfigError(fmt::format("{}: missing {} (expected a WordNet data line)", where, what));
      return tok;
    };
    auto number = [&](const char* what, int base) {
      const std::string tok = field(what);
      size_t used = 0;
      int64_t v = -1;
      try {
        v = std::stoll(tok, &used, base);
      } catch (...) {
      }
      if (v < 0 || used != tok.size())
        throw ConfigError(fmt::format("{}: {} '{}' is not a {} number", where, what, tok,
                                      base == 16 ? "hexadecimal" : "decimal"));
      return v;
    };
    WordNetSynset s;
    s.offset = number("synset offset", 10);
    number("lex_filenum", 10);
    const std::string type = field("ss_type");
    if (type.size() != 1 || std::string_view("nvasr").find(type[0]) == std::string_view::npos)
      throw ConfigError(fmt::format("{}: ss_type '{}' (expected n, v, a, s or r)", where, type));
    s.pos = type[0];
    const int64_t words = number("w_cnt", 16);
    for (int64_t i = 0; i < words; ++i) {
      s.words.push_back(clean_word(field("word")));
      number("lex_id", 16);
    }
    const int64_t pointers = number("p_cnt", 10);
    for (int64_t i = 0; i < pointers; ++i) {
      field("pointer symbol");
      number("pointer offset", 10);
      field("pointer pos");
      number("pointer source/target", 16);
    }
    if (s.pos == 'v') {  // verb frames: f_cnt, then `+ f_num w_num` each
      const int64_t frames = number("f_cnt", 10);
      for (int64_t i = 0; i < frames; ++i) {
        if (field("frame marker") != "+")
          throw ConfigError(fmt::format("{}: verb frame {} does not start with '+'", where, i + 1));
        number("f_num", 10);
        number("w_num", 16);
      }
    }
    std::string rest;
    if (f >> rest)
      throw ConfigError(fmt::format("{}: unexpected '{}' before the gloss (after {} words and {} pointers)",
                                    where, rest, words, pointers));
    split_gloss(trim(line.substr(bar + 3)), &s);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<WordNetSynset> read_wordnet(const std::string& dir) {
  std::vector<WordNetSynset> all;
  for (const char* name : {"data.noun", "data.verb", "data.adj", "data.adv"}) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    std::ifstream in(path, std::ios::binary);
    if (!in)
      throw ConfigError(
          fmt::format("{}: cannot read WordNet data file (expected WordNet 3.0's database)", path),
          "on Debian, `apt-get install wordnet-base` provides /usr/share/wordnet");
    std::vector<WordNetSynset> part = parse_wordnet_data(in, path);
    all.insert(all.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
  return all;
}

namespace {

// True when `word` occurs in `text` as a whole word (case-insensitive, ASCII), so the example really uses it.
bool uses_word(const std::string& text, const std::string& word) {
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string t = lower(text), w = lower(word);
  auto is_alpha = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  for (size_t p = t.find(w); p != std::string::npos; p = t.find(w, p + 1)) {
    const bool left = p == 0 || !is_alpha(t[p - 1]);
    const bool right = p + w.size() >= t.size() || !is_alpha(t[p + w.size()]);
    if (left && right) return true;
  }
  return false;
}

nlohmann::ordered_json record(std::string instruction, std::string output) {
  nlohmann::ordered_json r;
  r["instruction"] = std::move(instruction);
  r["output"] = std::move(output);
  return r;
}

}  // namespace

std::vector<nlohmann::ordered_json> wordnet_sft_records(const std::vector<WordNetSynset>& synsets,
                                                        const WordNetSftOptions& options) {
  const uint64_t key = mix64(options.seed ^ 0x776f72646e6574ull);
  std::vector<nlohmann::ordered_json> records;
  for (size_t i = 0; i < synsets.size(); ++i) {
    const WordNetSynset& s = synsets[i];
    if (s.words.empty()) continue;
    const char* pos = wordnet_pos_name(s.pos);
    // The word asked about: seeded per synset, so one run does not always ask for the head word.
    const Philox4 r = philox4x32(key, static_cast<uint64_t>(i), 2);
    const size_t pick = r.v[0] % s.words.size();
    const std::string& word = s.words[pick];
    if (!s.definition.empty()) {
      records.push_back(record(fmt::format("Define the word \"{}\" ({}).", word, pos), s.definition));
      if (s.words.size() > 1) {
        // Several words in one synset are synonyms in this sense; the definition says which sense.
        std::vector<std::string> others;
        for (size_t w = 0; w < s.words.size(); ++w)
          if (w != pick && s.words[w] != word) others.push_back(s.words[w]);
        if (!others.empty())
          records.push_back(record(fmt::format("Give a synonym of the word \"{}\" ({}) in the sense: {}.",
                                               word, pos, s.definition),
                                   others[r.v[1] % others.size()]));
      }
    }
    // An example sentence that uses one of the synset's words (examples sometimes use an inflected form).
    const size_t first_ex = s.examples.empty() ? 0 : r.v[2] % s.examples.size();
    for (size_t k = 0; k < s.examples.size(); ++k) {
      const std::string& ex = s.examples[(first_ex + k) % s.examples.size()];
      auto it = std::find_if(s.words.begin(), s.words.end(),
                             [&](const std::string& w) { return uses_word(ex, w); });
      if (it == s.words.end()) continue;
      std::string instruction = fmt::format("Use the word \"{}\" ({}) in a sentence.", *it, pos);
      if (!s.definition.empty())
        instruction =
            fmt::format("Use the word \"{}\" ({}, meaning: {}) in a sentence.", *it, pos, s.definition);
      records.push_back(record(std::move(instruction), ex));
      break;
    }
  }
  // Seeded Fisher-Yates (Philox), so --max N takes a mix of parts of speech and record kinds.
  for (size_t i = records.size(); i > 1; --i) {
    const Philox4 r = philox4x32(key, static_cast<uint64_t>(i - 1), 3);
    const uint64_t u = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
    std::swap(records[i - 1], records[u % i]);
  }
  if (options.max > 0 && static_cast<int64_t>(records.size()) > options.max)
    records.resize(static_cast<size_t>(options.max));
  return records;
}

}  // namespace primus::data
