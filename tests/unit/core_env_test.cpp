// env_int: unset or empty gives the fallback; a bad or out-of-range value is a ConfigError naming the
// variable, its value and what was expected.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "core/env.h"
#include "core/error.h"

namespace primus {
namespace {

constexpr const char* kVar = "PRIMUS_TEST_ENV_INT";

std::string error_of(int lo, int hi) {
  try {
    env_int(kVar, 7, lo, hi);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(CoreEnv, EnvIntReadsChecksAndNamesBadValues) {
  unsetenv(kVar);
  EXPECT_EQ(env_int(kVar, 7), 7);
  setenv(kVar, "", 1);
  EXPECT_EQ(env_int(kVar, 7), 7);
  setenv(kVar, "-12", 1);
  EXPECT_EQ(env_int(kVar, 7), -12);
  setenv(kVar, "24", 1);
  EXPECT_EQ(env_int(kVar, 7, 0, 64), 24);

  setenv(kVar, "65", 1);
  const std::string range = error_of(0, 64);
  EXPECT_NE(range.find("PRIMUS_TEST_ENV_INT='65'"), std::string::npos) << range;
  EXPECT_NE(range.find("from 0 to 64"), std::string::npos) << range;
  setenv(kVar, "12x", 1);
  EXPECT_NE(error_of(INT_MIN, INT_MAX).find("expected an integer"), std::string::npos);
  setenv(kVar, "99999999999999999999", 1);
  EXPECT_THROW(env_int(kVar, 7), ConfigError);
  unsetenv(kVar);
}

}  // namespace
}  // namespace primus
