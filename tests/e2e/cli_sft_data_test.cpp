// `primus data sft-wordnet` and `primus data sft-inspect` as a user runs them: a WordNet directory written
// here (and the real one when wordnet-base is installed) becomes alpaca JSONL, which sft-inspect renders with
// its loss spans marked and packs into rows; bad input exits 2 naming the file.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_process.h"
#include "scratch_dir.h"

namespace primus::cli_test {
namespace {

namespace fs = std::filesystem;

class SftDataCli : public ScratchDirTest {
 protected:
  // A WordNet directory with one synset per part of speech.
  std::string wordnet() {
    write(
        "wn/data.noun",
        "  1 license header  \n"
        "09213565 17 n 02 bank 0 side 1 001 @ 09325395 n 0000 | sloping land (especially the slope beside a "
        "body of water); \"they pulled the canoe up on the bank\"  \n");
    write("wn/data.verb",
          "00002573 29 v 01 respire 2 001 $ 00001740 v 0000 01 + 02 00 | breathe easily again, as after "
          "exertion or anxiety  \n");
    write("wn/data.adj",
          "00001740 00 a 01 able 0 001 ! 00002098 a 0101 | having the necessary means or skill; \"able to "
          "swim\"  \n");
    write("wn/data.adv", "00001740 02 r 01 a_cappella 0 000 | without musical accompaniment  \n");
    return (dir_ / "wn").string();
  }
};

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST_F(SftDataCli, WordnetToJsonlToInspect) {
  const std::string out = (dir_ / "out/wordnet.jsonl").string();
  CliResult r = run_primus({"data", "sft-wordnet", "--wordnet-dir", wordnet(), "--output", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("4 synsets"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("7 records (4 definitions, 1 synonyms, 2 sentences)"), std::string::npos) << r.out;
  const auto records = read_jsonl(out);
  ASSERT_EQ(records.size(), 7u);
  bool cappella = false;
  for (const auto& rec : records) {
    if (rec["instruction"] == "Define the word \"a cappella\" (adverb).") {
      cappella = true;
      EXPECT_EQ(rec["output"], "without musical accompaniment");
    }
  }
  EXPECT_TRUE(cappella);
  // The same seed writes the same file.
  const std::string again = (dir_ / "again.jsonl").string();
  ASSERT_EQ(run_primus({"data", "sft-wordnet", "--wordnet-dir", wordnet(), "--output", again}).exit_code, 0);
  EXPECT_EQ(slurp(again), slurp(out));
  ASSERT_EQ(run_primus({"data", "sft-wordnet", "--wordnet-dir", wordnet(), "--output", again, "--max", "2"})
                .exit_code,
            0);
  EXPECT_EQ(read_jsonl(again).size(), 2u);

  // sft-inspect: the ChatML fallback with the ByteTokenizer; the loss text between « and ».
  r = run_primus({"data", "sft-inspect", "--data", out, "--sample", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string first_output = records[0]["output"];
  EXPECT_NE(r.out.find(out + ":1 (alpaca)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("<fallback ChatML template>"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("<|im_start|>assistant\n\u00ab" + first_output + "<|im_end|>\u00bb\n"),
            std::string::npos)
      << r.out;
  // Byte tokens: the loss covers the reply's bytes and the 10 of <|im_end|>.
  EXPECT_NE(r.out.find("loss tokens " + std::to_string(first_output.size() + 10) + ","), std::string::npos)
      << r.out;

  r = run_primus({"data", "sft-inspect", "--data", out, "--pack", "--seq-length", "512", "--tokens"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("7 samples (7 read, 0 truncated) in"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("first row (row "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  start      0  length "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" loss \"<\""), std::string::npos)
      << r.out;  // --tokens: '<' of <|im_end|> is a loss token
}

TEST_F(SftDataCli, ErrorsNameTheFile) {
  CliResult r = run_primus({"data", "sft-wordnet", "--wordnet-dir", (dir_ / "none").string(), "--output",
                            (dir_ / "o.jsonl").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("none/data.noun: cannot read WordNet data file"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("wordnet-base"), std::string::npos) << r.err;

  const std::string bad = write("bad.jsonl", "{\"instruction\": \"x\", \"output\": \"y\"}\n{\"text\": 1}\n");
  r = run_primus({"data", "sft-inspect", "--data", bad, "--sample", "1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("bad.jsonl:2: cannot tell the SFT format"), std::string::npos) << r.err;
  r = run_primus({"data", "sft-inspect", "--data", bad, "--sample", "5"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--sample 5: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("has only 2 records"), std::string::npos) << r.err;
}

TEST_F(SftDataCli, RealWordnetWhenInstalled) {
  if (!fs::exists("/usr/share/wordnet/data.noun")) GTEST_SKIP() << "wordnet-base is not installed";
  const std::string out = (dir_ / "wn.jsonl").string();
  CliResult r = run_primus({"data", "sft-wordnet", "--output", out, "--max", "200"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("117,659 synsets"), std::string::npos) << r.out;
  EXPECT_EQ(read_jsonl(out).size(), 200u);
  r = run_primus({"data", "sft-inspect", "--data", out, "--pack", "--seq-length", "1024"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("200 samples"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace primus::cli_test
