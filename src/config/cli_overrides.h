#pragma once
// Command-line overrides as Primus takes them (primus/core/utils/arg_utils.py): `key=value`, `--key=value`,
// `--key value` (a value must not start with `--`), a bare `--flag` (= true); dots nest (`a.b=1` gives
// {a: {b: 1}}). Values are typed as Primus's "modern" mode does: true/false (any case) -> bool; `None` or
// text starting with [ ( { -> Python literal; text with a '.' -> float if it parses; else int if it parses;
// else the string. So `--lr 1e-5` stays the string "1e-5" here; the typed layer coerces numeric strings for
// numeric keys.
#include <string>
#include <vector>

#include "config/value.h"

namespace primus::config {

// Types one override value.
Value type_cli_value(const std::string& text, const Origin& origin);

// Parses the tokens into a nested map whose leaves have Origin::command_line("the tokens"). Throws
// ConfigError for a token that is neither an override nor a flag (Primus skips those with a warning; we do
// not guess).
Value parse_cli_overrides(const std::vector<std::string>& tokens);

}  // namespace primus::config
