// Command-line overrides: Primus's forms and typing, and the typed layer's coercion of numeric strings.
#include <gtest/gtest.h>

#include "config/cli_overrides.h"
#include "config/schema.h"
#include "config_test_util.h"

namespace primus::config {
namespace {

using testing::config_error_of;

TEST(ConfigCliOverrides, AllPrimusForms) {
  Value v = parse_cli_overrides({"train_iters=10", "--lr=0.5", "--seq_length", "128", "--mock_data",
                                 "--training.local_batch_size", "6", "a.b.c=x", "--flag_at_end"});
  EXPECT_EQ(v.find("train_iters")->as_int(), 10);
  EXPECT_DOUBLE_EQ(v.find("lr")->as_float(), 0.5);
  EXPECT_EQ(v.find("seq_length")->as_int(), 128);
  EXPECT_TRUE(v.find("mock_data")->as_bool()) << "a bare --flag followed by another option is true";
  EXPECT_EQ(v.find_path("training.local_batch_size")->as_int(), 6);
  EXPECT_EQ(v.find_path("a.b.c")->as_string(), "x");
  EXPECT_TRUE(v.find("flag_at_end")->as_bool());
  EXPECT_EQ(v.find("seq_length")->origin().str(), "command line (--seq_length 128)");
}

TEST(ConfigCliOverrides, TypingFollowsPrimusModernMode) {
  Origin o = Origin::command_line("t");
  EXPECT_TRUE(type_cli_value("1e-5", o).is_string()) << "no '.', not an int: Primus keeps the string";
  EXPECT_TRUE(type_cli_value("1.0e-5", o).is_float());
  EXPECT_TRUE(type_cli_value("10", o).is_int());
  EXPECT_TRUE(type_cli_value("-3", o).is_int());
  EXPECT_TRUE(type_cli_value("TRUE", o).as_bool());
  EXPECT_FALSE(type_cli_value("False", o).as_bool());
  EXPECT_TRUE(type_cli_value("None", o).is_null());
  EXPECT_TRUE(type_cli_value("null", o).is_string()) << "\"null\" becomes None only when stored";
  EXPECT_EQ(type_cli_value("[1, 2]", o).repr(), "[1, 2]");
  EXPECT_EQ(type_cli_value("(1, 'a')", o).repr(), "[1, a]");
  EXPECT_EQ(type_cli_value("{'k': True}", o).repr(), "{k: true}");
  EXPECT_TRUE(type_cli_value("[a, b]", o).is_string()) << "not a Python literal: the text stays";
  EXPECT_TRUE(type_cli_value("1.2.3", o).is_string());
  EXPECT_TRUE(type_cli_value("yes", o).is_string()) << "unlike YAML, the CLI does not read yes as true";
  EXPECT_EQ(type_cli_value("99,1,0", o).as_string(), "99,1,0");
}

TEST(ConfigCliOverrides, ValueMustNotStartWithDashesAndStrayTokensAreErrors) {
  Value v = parse_cli_overrides({"--min_lr", "-1", "--a", "--b", "x"});
  EXPECT_EQ(v.find("min_lr")->as_int(), -1) << "a single dash is a value";
  EXPECT_TRUE(v.find("a")->as_bool());
  EXPECT_EQ(v.find("b")->as_string(), "x");
  std::string msg = config_error_of([] { parse_cli_overrides({"--lr", "1e-5", "stray"}); });
  EXPECT_NE(msg.find("'stray'"), std::string::npos) << msg;
  EXPECT_NE(config_error_of([] { parse_cli_overrides({"=5"}); }).find("no key"), std::string::npos);
  EXPECT_NE(config_error_of([] { parse_cli_overrides({"a..b=5"}); }).find("empty key part"),
            std::string::npos);
}

TEST(ConfigCliOverrides, TypedLayerCoercesNumericStringsForNumericKeys) {
  std::string problem;
  Value lr = type_cli_value("1e-5", Origin::command_line("--lr 1e-5"));
  ASSERT_TRUE(coerce_to_type(lr, KeyType::kFloat, true, &problem)) << problem;
  EXPECT_DOUBLE_EQ(lr.as_float(), 1e-5);
  EXPECT_EQ(lr.origin().kind, Origin::Kind::kCommandLine);

  Value iters = Value::string("12");
  ASSERT_TRUE(coerce_to_type(iters, KeyType::kInt, true, &problem));
  EXPECT_EQ(iters.as_int(), 12);
  Value as_float = Value::integer(3);
  ASSERT_TRUE(coerce_to_type(as_float, KeyType::kFloat, true, &problem));
  EXPECT_TRUE(as_float.is_float());
  Value flag = Value::integer(1);
  ASSERT_TRUE(coerce_to_type(flag, KeyType::kBool, true, &problem))
      << "Primus files write sequence_parallel: 1";
  EXPECT_TRUE(flag.as_bool());
  Value name = Value::integer(7);
  ASSERT_TRUE(coerce_to_type(name, KeyType::kString, true, &problem));
  EXPECT_EQ(name.as_string(), "7");

  Value bad_int = Value::real(2.5);
  EXPECT_FALSE(coerce_to_type(bad_int, KeyType::kInt, true, &problem));
  EXPECT_NE(problem.find("expected an integer"), std::string::npos) << problem;
  Value bad_float = Value::string("fast");
  EXPECT_FALSE(coerce_to_type(bad_float, KeyType::kFloat, true, &problem));
  Value two = Value::integer(2);
  EXPECT_FALSE(coerce_to_type(two, KeyType::kBool, true, &problem));
  Value null = Value::null();
  EXPECT_FALSE(coerce_to_type(null, KeyType::kInt, false, &problem));
  EXPECT_EQ(problem, "must not be null");
}

}  // namespace
}  // namespace primus::config
