#pragma once
// Integer settings from the environment (launcher variables, performance switches): one reader, so that every
// bad value fails the same way, naming the variable, its value and what was expected.
#include <climits>

namespace primus {

// The value of `name`, or `fallback` when it is unset or empty. Throws ConfigError when it is not an integer
// or lies outside [lo, hi].
int env_int(const char* name, int fallback, int lo = INT_MIN, int hi = INT_MAX);

}  // namespace primus
