// ${VAR} / ${VAR:default} substitution and Primus's re-typing rules.
#include <gtest/gtest.h>

#include "config/env_subst.h"
#include "config/merge.h"
#include "config/preset_loader.h"
#include "config/yaml_reader.h"
#include "config_test_util.h"

namespace primus::config {
namespace {

using testing::config_error_of;
using testing::fake_env;
using testing::TempDir;

Value subst(const std::string& yaml, const EnvLookup& env) {
  Value v = read_yaml_text(yaml, "t.yaml");
  substitute_env_tree(v, env);
  return v;
}

TEST(ConfigEnv, DefaultsAndValuesAreRetypedOnlyWhenSubstituted) {
  Value v = subst(
      "tp: ${PRIMUS_TP:1}\n"
      "conti: ${CONTI_PARAMS:0}\n"
      "lr: ${LR:1.0e-5}\n"
      "lr2: ${LR2:1e-5}\n"
      "flag: ${FLAG:True}\n"
      "name: ${NAME:abc}\n"
      "quoted: '123'\n"
      "literal: \"${X:7}\"\n"
      "empty: ${EMPTY:}\n",
      fake_env({{"PRIMUS_TP", "4"}}));
  EXPECT_EQ(v.find("tp")->as_int(), 4);
  EXPECT_EQ(v.find("conti")->as_int(), 0);
  EXPECT_DOUBLE_EQ(v.find("lr")->as_float(), 1e-5);
  EXPECT_DOUBLE_EQ(v.find("lr2")->as_float(), 1e-5) << "Python float() reads 1e-5";
  EXPECT_TRUE(v.find("flag")->as_bool());
  EXPECT_EQ(v.find("name")->as_string(), "abc");
  EXPECT_EQ(v.find("quoted")->as_string(), "123") << "no substitution, no re-typing";
  EXPECT_EQ(v.find("literal")->as_int(), 7) << "quoting does not stop re-typing after a substitution";
  EXPECT_EQ(v.find("empty")->as_string(), "");
  EXPECT_NE(v.find("tp")->origin().str().find("${PRIMUS_TP:1}"), std::string::npos);
}

TEST(ConfigEnv, SubstitutesInsideLongerStringsAndListsButNotKeys) {
  Value v =
      subst("model: ${PRIMUS_MODEL:deepseek_v2_lite}.yaml\nitems:\n  - ${A:1}\n  - x${B:2}\n${K:k}: 1\n",
            fake_env({{"B", "y"}}));
  EXPECT_EQ(v.find("model")->as_string(), "deepseek_v2_lite.yaml");
  EXPECT_EQ(v.find("items")->items()[0].as_int(), 1);
  EXPECT_EQ(v.find("items")->items()[1].as_string(), "xy");
  EXPECT_NE(v.find("${K:k}"), nullptr) << "keys are never substituted";
}

TEST(ConfigEnv, UnsetRequiredVariableIsAnErrorNamingIt) {
  std::string msg = config_error_of([] { subst("data: ${MY_DATA_DIR}/x\n", fake_env()); });
  EXPECT_NE(msg.find("MY_DATA_DIR"), std::string::npos) << msg;
  EXPECT_NE(msg.find("t.yaml:1:1"), std::string::npos) << msg;
  Value ok = subst("data: ${MY_DATA_DIR}/x\n", fake_env({{"MY_DATA_DIR", "/d"}}));
  EXPECT_EQ(ok.find("data")->as_string(), "/d/x");
}

TEST(ConfigEnv, NullTextBecomesNullWhenStored) {
  Value v = subst("path: ${PRIMUS_TOKENIZED_DATA_PATH:null}\nq: 'null'\nkeep: nullish\n", fake_env());
  EXPECT_TRUE(v.find("path")->is_string()) << "re-typing itself leaves \"null\" a string";
  null_strings_to_null(v);
  EXPECT_TRUE(v.find("path")->is_null());
  EXPECT_TRUE(v.find("q")->is_null()) << "Primus maps the string \"null\" to None when it stores a value";
  EXPECT_EQ(v.find("keep")->as_string(), "nullish");
}

TEST(ConfigEnv, NotAPatternIsLeftAlone) {
  Value v = subst("a: $HOME\nb: ${}\nc: ${UNCLOSED\nd: cost ${X:1}$\n", fake_env());
  EXPECT_EQ(v.find("a")->as_string(), "$HOME");
  EXPECT_EQ(v.find("b")->as_string(), "${}");
  EXPECT_EQ(v.find("c")->as_string(), "${UNCLOSED");
  EXPECT_EQ(v.find("d")->as_string(), "cost 1$");
}

TEST(ConfigEnv, PresetFilesAreSubstitutedBeforeTheirExtendsMerge) {
  TempDir dir;
  dir.write("base.yaml", "a: ${A:base}\nb: 1\n");
  std::string child = dir.write("child.yaml", "extends:\n  - ${PARENT:base.yaml}\nb: ${B:2}\n");
  Value v = load_preset(child, fake_env({{"A", "from-env"}}));
  EXPECT_EQ(v.find("a")->as_string(), "from-env");
  EXPECT_EQ(v.find("b")->as_int(), 2);
}

}  // namespace
}  // namespace primus::config
