#pragma once
// A small reader for Python literals (what ast.literal_eval accepts for config values): None, True, False,
// ints, floats, quoted strings, and lists / tuples / dicts of those. Primus types CLI override values that
// start with
// '[', '(' or '{' (or are "None") this way.
#include <optional>
#include <string_view>

#include "config/value.h"

namespace primus::config {

// The value, or nullopt when `text` is not a literal Python would accept (Primus then keeps the string).
std::optional<Value> parse_python_literal(std::string_view text, const Origin& origin);

}  // namespace primus::config
