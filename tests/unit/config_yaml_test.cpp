// YAML reading with PyYAML's typing and file:line:col origins.
#include <gtest/gtest.h>

#include <chrono>

#include "config/yaml_reader.h"
#include "config/yaml_scalar.h"
#include "config_test_util.h"

namespace primus::config {
namespace {

using testing::config_error_of;

Value plain(const std::string& text) {
  return resolve_plain_scalar(text, {});
}

TEST(ConfigYaml, PlainScalarsTypeAsPyYamlDoes) {
  EXPECT_TRUE(plain("1.0e-5").is_float());
  EXPECT_DOUBLE_EQ(plain("1.0e-5").as_float(), 1e-5);
  EXPECT_TRUE(plain("1e-5").is_string()) << "YAML 1.1 floats need a dot";
  EXPECT_TRUE(plain("1.0e5").is_string()) << "YAML 1.1 exponents need a sign";
  EXPECT_TRUE(plain("2.").is_float());
  EXPECT_TRUE(plain(".5").is_float());
  EXPECT_EQ(plain("42").as_int(), 42);
  EXPECT_EQ(plain("-7").as_int(), -7);
  EXPECT_EQ(plain("1_000").as_int(), 1000);
  EXPECT_EQ(plain("010").as_int(), 8) << "leading zero is octal in YAML 1.1";
  EXPECT_EQ(plain("0x1F").as_int(), 31);
  EXPECT_EQ(plain("1:30").as_int(), 90) << "sexagesimal";
  for (const char* t : {"yes", "Yes", "on", "ON", "true", "True"}) EXPECT_TRUE(plain(t).as_bool()) << t;
  for (const char* f : {"no", "off", "Off", "false", "FALSE"}) EXPECT_FALSE(plain(f).as_bool()) << f;
  for (const char* n : {"", "~", "null", "Null", "NULL"}) EXPECT_TRUE(plain(n).is_null()) << n;
  EXPECT_TRUE(plain("tRUE").is_string());
  EXPECT_TRUE(plain(".inf").is_float());
  EXPECT_TRUE(plain("1.2.3").is_string());
  EXPECT_TRUE(plain("99,1,0").is_string());
}

TEST(ConfigYaml, QuotedScalarsAreStringsAndNodesKnowTheirPosition) {
  Value v = read_yaml_text("a: '1'\nb: \"true\"\nc: 1\nlist:\n  - x\n  - 2\nsub:\n  k: ~\n", "t.yaml");
  EXPECT_EQ(v.find("a")->as_string(), "1");
  EXPECT_EQ(v.find("b")->as_string(), "true");
  EXPECT_EQ(v.find("c")->as_int(), 1);
  EXPECT_EQ(v.find("c")->origin().str(), "t.yaml:3:1");
  const Value& list = *v.find("list");
  ASSERT_EQ(list.items().size(), 2u);
  EXPECT_EQ(list.items()[1].as_int(), 2);
  EXPECT_EQ(list.items()[1].origin().line, 6);
  EXPECT_EQ(list.items()[1].origin().column, 5);
  EXPECT_TRUE(v.find_path("sub.k")->is_null());
  EXPECT_EQ(v.find_path("sub.k")->origin().str(), "t.yaml:8:3");
}

TEST(ConfigYaml, FlowCollectionsAndKeysThatLookLikeNumbers) {
  Value v = read_yaml_text("ranks: [0, 8]\nm: {x: 1, y: [a, 'b']}\n1: one\n", "t.yaml");
  EXPECT_EQ(v.find("ranks")->repr(), "[0, 8]");
  EXPECT_EQ(v.find("m")->repr(), "{x: 1, y: [a, b]}");
  EXPECT_EQ(v.find("1")->as_string(), "one");
}

TEST(ConfigYaml, DuplicateKeysAndSyntaxErrorsAreReportedWithPosition) {
  std::string dup = config_error_of([] { read_yaml_text("a: 1\nb: 2\na: 3\n", "dup.yaml"); });
  EXPECT_NE(dup.find("dup.yaml:3:1"), std::string::npos) << dup;
  EXPECT_NE(dup.find("duplicate key 'a'"), std::string::npos) << dup;
  std::string bad = config_error_of([] { read_yaml_text("a: [1, 2\nb: 3\n", "bad.yaml"); });
  EXPECT_NE(bad.find("bad.yaml:"), std::string::npos) << bad;
  EXPECT_NE(bad.find("YAML syntax error"), std::string::npos) << bad;
  std::string missing = config_error_of([] { read_yaml_file("/nonexistent/x.yaml"); });
  EXPECT_NE(missing.find("/nonexistent/x.yaml"), std::string::npos) << missing;
}

// Aliases: yaml-cpp shares the anchored node, so an anchor containing its own alias is a cycle (it once
// crashed the loader with SIGSEGV: unbounded recursion) and nested aliases expand exponentially (1 KB of
// "billion laughs" once made --dry-run allocate until it died). Both are ConfigErrors naming file:line.
TEST(ConfigYaml, AliasCyclesAreRejected) {
  std::string msg =
      config_error_of([] { read_yaml_text("lr: 1.0e-4\nwarmup_steps: &a [*a]\n", "cyc.yaml"); });
  EXPECT_NE(
      msg.find("cyc.yaml:2:1 (item 0): an alias refers to the anchored value it is part of, which starts "
               "at cyc.yaml:2:15"),
      std::string::npos)
      << msg;
  msg = config_error_of([] { read_yaml_text("model: &m\n  layers: 2\n  self: *m\n", "map.yaml"); });
  EXPECT_NE(msg.find("map.yaml:3:3: an alias refers to the anchored value it is part of"), std::string::npos)
      << msg;
  msg = config_error_of([] { read_yaml_text("a: &x [1, [2, [3, *x]]]\n", "deep.yaml"); });
  EXPECT_NE(msg.find("deep.yaml:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cyclic YAML structure"), std::string::npos) << msg;
}

TEST(ConfigYaml, AliasExpansionIsBounded) {
  // Nine levels of ten aliases of the level below: 10^9 values from under 1 KB of YAML.
  std::string yaml = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 9; ++i) {
    yaml += fmt::format("l{}: &l{} [", i, i);
    for (int k = 0; k < 10; ++k) yaml += fmt::format("{}*l{}", k ? ", " : "", i - 1);
    yaml += "]\n";
  }
  ASSERT_LT(yaml.size(), 1024u);
  const auto start = std::chrono::steady_clock::now();
  const std::string msg = config_error_of([&] { read_yaml_text(yaml, "laughs.yaml"); });
  EXPECT_NE(msg.find("laughs.yaml:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the YAML expands to more than 100000 values through its aliases"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("billion laughs"), std::string::npos) << msg;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  // Aliased text counts too: a 1 MB scalar repeated 10^4 times is 10 GB.
  std::string big =
      "s: &s " + std::string(1 << 20, 'a') + "\nl1: &l1 [*s, *s, *s, *s, *s, *s, *s, *s, *s, *s]\n";
  for (int i = 2; i <= 4; ++i)
    big += fmt::format("l{}: &l{} [*l{}, *l{}, *l{}, *l{}, *l{}, *l{}, *l{}, *l{}, *l{}, *l{}]\n", i, i,
                       i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1);
  const std::string text = config_error_of([&] { read_yaml_text(big, "text.yaml"); });
  EXPECT_NE(text.find("text.yaml:"), std::string::npos) << text;
  EXPECT_NE(text.find("more than 64 MiB of text"), std::string::npos) << text;
}

TEST(ConfigYaml, OrdinaryAliasesStillWork) {
  Value v = read_yaml_text("base: &b {x: 1, y: [2, 3]}\nother: *b\nagain: [*b, *b]\n", "ok.yaml");
  EXPECT_EQ(v.entries()[1].second, v.entries()[0].second);
  EXPECT_EQ(v.entries()[2].second.items().size(), 2u);
}

TEST(ConfigYaml, ConfigFileMustBeARegularFile) {
  const std::string msg = config_error_of([] { read_yaml_file("/dev/zero"); });
  EXPECT_NE(msg.find("config file '/dev/zero' is not a regular file"), std::string::npos) << msg;
}

TEST(ConfigYaml, ReprQuotesStringsThatWouldRetype) {
  EXPECT_EQ(Value::string("1e-5").repr(), "1e-5");
  EXPECT_EQ(Value::string("123").repr(), "\"123\"");
  EXPECT_EQ(Value::string("true").repr(), "\"true\"");
  EXPECT_EQ(Value::string("").repr(), "\"\"");
  EXPECT_EQ(Value::real(1e-5).repr(), "1.0e-05");
  EXPECT_EQ(Value::real(2.0).repr(), "2.0");
  EXPECT_EQ(Value::real(1e20).repr(), "1.0e+20");
  // What repr writes reads back as the same value.
  for (const Value& v : {Value::real(1e-5), Value::real(0.1), Value::real(3.0), Value::string("1e-5"),
                         Value::string("null"), Value::integer(-3), Value::boolean(true)}) {
    Value back = read_yaml_text("k: " + v.repr() + "\n", "t").entries()[0].second;
    EXPECT_EQ(back, v) << v.repr();
  }
}

}  // namespace
}  // namespace primus::config
