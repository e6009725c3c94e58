#pragma once
// A real SFT corpus from a Debian package: WordNet 3.0's database (`wordnet-base`, /usr/share/wordnet) turned
// into alpaca instruction pairs -- define a word, give a synonym, use a word in a sentence. The data files
// are read as wndb(5) describes them; see docs/posttrain.md ("The WordNet corpus").
#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace primus::data {

struct WordNetSynset {
  int64_t offset = 0;              // byte offset in its data file (the synset's id)
  char pos = 'n';                  // n (noun), v (verb), a (adjective), s (adjective satellite), r (adverb)
  std::vector<std::string> words;  // as written, underscores turned into spaces, adjective markers removed
  std::string definition;          // the gloss before its first quoted example ("" when it has none)
  std::vector<std::string> examples;  // the gloss's quoted example sentences, quotes removed
};

// "noun", "verb", "adjective" (a and s), "adverb".
const char* wordnet_pos_name(char pos);

// Parses one data.* file: the license header (lines starting with two spaces) is skipped; every other line is
// `offset lex_filenum ss_type w_cnt(hex) {word lex_id(hex)} p_cnt {symbol offset pos source/target} [f_cnt
// {+ f_num w_num}] | gloss`. Errors name source:line and the field that was expected.
std::vector<WordNetSynset> parse_wordnet_data(std::istream& in, const std::string& source);
// data.noun, data.verb, data.adj and data.adv of `dir`, in that order. A missing file is a ConfigError that
// names it and the Debian package that provides it.
std::vector<WordNetSynset> read_wordnet(const std::string& dir);

struct WordNetSftOptions {
  int64_t max = 0;  // > 0: keep at most this many records (after the seeded shuffle)
  uint64_t seed = 1234;
};

// Alpaca records {instruction, output}: per synset a definition ("Define the word \"X\" (noun)."), a synonym
// when the synset has several words, and a sentence when an example uses one of its words. Which word is
// asked about and the record order are seeded; the same synsets and options give the same records.
std::vector<nlohmann::ordered_json> wordnet_sft_records(const std::vector<WordNetSynset>& synsets,
                                                        const WordNetSftOptions& options);

}  // namespace primus::data
