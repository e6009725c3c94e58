// The WordNet data-file parser on lines in wndb(5)'s format (header, nouns, verbs with frames, adjectives
// with syntactic markers, satellites, adverbs), the instruction records built from them, and, when Debian's
// wordnet-base is installed, the real WordNet 3.0 database.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <sstream>

#include "data/wordnet_sft.h"
#include "data_test_util.h"

namespace primus::data {
namespace {

using data_test::error_of;

// Lines copied from WordNet 3.0 (pointers shortened where the count says so).
const char* const kNoun =
    "  1 This software and database is being provided to you, the LICENSEE, by  \n"
    "  2 Princeton University under the following license.  \n"
    "09213565 17 n 02 bank 0 side 1 001 @ 09325395 n 0000 | sloping land (especially the slope beside a body "
    "of "
    "water); \"they pulled the canoe up on the bank\"; \"he sat on the bank of the river and watched the "
    "currents\"  \n"
    "08420278 14 n 03 depository_financial_institution 0 bank 0 banking_concern 0 001 @ 08054721 n 0000 | a "
    "financial institution that accepts deposits and channels the money into lending activities; \"he cashed "
    "a "
    "check at the bank\"; \"that bank holds the mortgage on my home\"  \n";
const char* const kVerb =
    "00001740 29 v 04 breathe 0 take_a_breath 0 respire 0 suspire 3 002 * 00005041 v 0000 ^ 00004227 v 0103 "
    "02 "
    "+ 02 00 + 08 00 | draw air into, and expel out of, the lungs; \"I can breathe better when the air is "
    "clean\"; \"The patient is respiring\"  \n"
    "00002573 29 v 01 respire 2 001 $ 00001740 v 0000 01 + 02 00 | breathe easily again, as after exertion "
    "or "
    "anxiety  \n";
const char* const kAdj =
    "00019731 00 s 02 handy 0 ready_to_hand(p) 0 001 & 00019131 a 0000 | easy to reach; \"found a handy spot "
    "for the can opener\"  \n"
    "00001740 00 a 01 able 0 001 ! 00002098 a 0101 | (usually followed by `to') having the necessary means "
    "or "
    "skill or know-how or authority to do something; \"able to swim\"  \n";

std::vector<WordNetSynset> parse(const std::string& text, const std::string& source = "data.test") {
  std::istringstream in(text);
  return parse_wordnet_data(in, source);
}

TEST(WordNet, ParsesDataLines) {
  const auto nouns = parse(kNoun);
  ASSERT_EQ(nouns.size(), 2u);
  EXPECT_EQ(nouns[0].offset, 9213565);
  EXPECT_EQ(nouns[0].pos, 'n');
  EXPECT_EQ(nouns[0].words, (std::vector<std::string>{"bank", "side"}));
  EXPECT_EQ(nouns[0].definition, "sloping land (especially the slope beside a body of water)");
  EXPECT_EQ(nouns[0].examples,
            (std::vector<std::string>{"they pulled the canoe up on the bank",
                                      "he sat on the bank of the river and watched the currents"}));
  EXPECT_EQ(nouns[1].words[0], "depository financial institution");

  const auto verbs = parse(kVerb);
  ASSERT_EQ(verbs.size(), 2u);
  EXPECT_EQ(verbs[0].words, (std::vector<std::string>{"breathe", "take a breath", "respire", "suspire"}));
  EXPECT_EQ(verbs[0].definition, "draw air into, and expel out of, the lungs");
  EXPECT_EQ(verbs[0].examples.size(), 2u);
  EXPECT_TRUE(verbs[1].examples.empty());
  EXPECT_EQ(verbs[1].definition, "breathe easily again, as after exertion or anxiety");

  const auto adjs = parse(kAdj);
  ASSERT_EQ(adjs.size(), 2u);
  EXPECT_EQ(adjs[0].pos, 's');
  EXPECT_EQ(adjs[0].words, (std::vector<std::string>{"handy", "ready to hand"}));  // "(p)" removed
  EXPECT_STREQ(wordnet_pos_name(adjs[0].pos), "adjective");
  EXPECT_EQ(adjs[1].definition,
            "(usually followed by `to') having the necessary means or skill or know-how or authority to do "
            "something");
}

TEST(WordNet, ErrorsNameTheLineAndField) {
  std::string msg = error_of([] { parse("00001 03 n 01 cat 0 000 no gloss here\n", "data.noun"); });
  EXPECT_NE(msg.find("data.noun:1: no ' | ' before the gloss"), std::string::npos) << msg;
  msg = error_of([] { parse("  header\n00001 03 n 0g cat 0 000 | a cat\n", "data.noun"); });
  EXPECT_NE(msg.find("data.noun:2: w_cnt '0g' is not a hexadecimal number"), std::string::npos) << msg;
  msg = error_of([] { parse("00001 03 n 02 cat 0 000 | a cat\n", "data.noun"); });
  EXPECT_NE(msg.find("data.noun:1: missing lex_id"), std::string::npos) << msg;
  msg = error_of([] { parse("00001 03 v 01 go 0 000 | move\n", "data.verb"); });
  EXPECT_NE(msg.find("data.verb:1: missing f_cnt"), std::string::npos) << msg;
  msg = error_of([] { parse("00001 03 x 01 go 0 000 | move\n", "data.verb"); });
  EXPECT_NE(msg.find("ss_type 'x' (expected n, v, a, s or r)"), std::string::npos) << msg;
  msg = error_of([] { read_wordnet("/nonexistent/wordnet"); });
  EXPECT_NE(msg.find("/nonexistent/wordnet/data.noun: cannot read WordNet data file"), std::string::npos)
      << msg;
}

TEST(WordNet, RecordsAreSeededAndDeterministic) {
  std::vector<WordNetSynset> synsets = parse(kNoun);
  for (auto& s : parse(kVerb)) synsets.push_back(s);
  for (auto& s : parse(kAdj)) synsets.push_back(s);
  const auto a = wordnet_sft_records(synsets, {});
  const auto b = wordnet_sft_records(synsets, {});
  EXPECT_EQ(a, b);
  // 6 definitions, 4 synonyms (synsets with several words), 5 sentences (examples that use a synset word:
  // not "The patient is respiring", which inflects; the other breathe example is used instead).
  int define = 0, synonym = 0, sentence = 0;
  std::set<std::string> instructions;
  for (const auto& r : a) {
    ASSERT_EQ(r.size(), 2u);
    const std::string ins = r["instruction"];
    instructions.insert(ins);
    if (ins.starts_with("Define the word \"")) ++define;
    if (ins.starts_with("Give a synonym of the word \"")) ++synonym;
    if (ins.starts_with("Use the word \"")) ++sentence;
  }
  EXPECT_EQ(define, 6);
  EXPECT_EQ(synonym, 4);
  EXPECT_EQ(sentence, 5);
  EXPECT_EQ(static_cast<int>(a.size()), define + synonym + sentence);
  // The "able" synset has one word and one example: its records are fixed whatever the seed.
  EXPECT_TRUE(instructions.count("Define the word \"able\" (adjective)."));
  for (const auto& r : a) {
    if (r["instruction"] == "Define the word \"able\" (adjective).") {
      EXPECT_EQ(r["output"], synsets[5].definition);
    }
    if (r["instruction"].get<std::string>().starts_with("Use the word \"able\"")) {
      EXPECT_EQ(r["output"], "able to swim");
    }
  }
  WordNetSftOptions other;
  other.seed = 7;
  const auto c = wordnet_sft_records(synsets, other);
  EXPECT_EQ(c.size(), a.size());
  EXPECT_NE(c, a);
  other.max = 3;
  EXPECT_EQ(wordnet_sft_records(synsets, other).size(), 3u);
}

TEST(WordNet, RealDatabaseWhenInstalled) {
  const std::string dir = "/usr/share/wordnet";
  if (!std::filesystem::exists(dir + "/data.noun")) GTEST_SKIP() << "wordnet-base is not installed";
  const auto synsets = read_wordnet(dir);
  // WordNet 3.0: 82,115 noun, 13,767 verb, 18,156 adjective and 3,621 adverb synsets.
  EXPECT_EQ(synsets.size(), 117659u);
  int64_t with_definition = 0;
  for (const auto& s : synsets) {
    with_definition += !s.definition.empty() && !s.words.empty();
    for (const auto& w : s.words) EXPECT_EQ(w.find_first_of("_()"), std::string::npos) << w;
  }
  EXPECT_GT(with_definition, 117000);
  WordNetSftOptions o;
  o.max = 1000;
  const auto records = wordnet_sft_records(synsets, o);
  ASSERT_EQ(records.size(), 1000u);
  for (const auto& r : records) {
    EXPECT_FALSE(r["output"].get<std::string>().empty()) << r.dump();
  }
}

}  // namespace
}  // namespace primus::data
