#pragma once
// YAML 1.1 scalar typing as PyYAML's SafeLoader does it. Primus reads its files with PyYAML, so a plain
// scalar must get the type PyYAML would give it: `1.0e-5` is a float but `1e-5` is a string (no dot),
// `yes`/`on` are booleans, `010` is octal 8, `~`/`null`/empty is null. Quoted scalars are always strings.
#include <optional>
#include <string>
#include <string_view>

#include "config/value.h"

namespace primus::config {

// The typed value of an unquoted (plain) scalar.
Value resolve_plain_scalar(std::string_view text, Origin origin);

// True when `text`, written unquoted, would read back as something other than this string (so a dump must
// quote it), or when it holds characters that YAML would interpret.
bool needs_quotes(std::string_view text);

// Python's int(text) for decimal text ("-12", "+3", " 7 ", "1_000"); nullopt when Python would raise.
std::optional<int64_t> python_int(std::string_view text);
// Python's float(text) ("1e-5", "-.5", "inf", "nan", " 2 "); nullopt when Python would raise.
std::optional<double> python_float(std::string_view text);

}  // namespace primus::config
