#pragma once
// `${VAR}` / `${VAR:default}` substitution in string values, as Primus's yaml_loader does it right after a
// file is loaded (before its `extends` merge): only string values (map values and list items, never keys),
// anywhere inside a longer string; an unset `${VAR}` is an error; when something was substituted, the whole
// result is re-typed (true/false any case -> bool, -?\d+ -> int, Python-float text -> float, else string).
#include <functional>
#include <optional>
#include <string>

#include "config/value.h"

namespace primus::config {

// Looks up an environment variable; nullopt when unset. Tests pass their own; the CLI uses the process env.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

// Substitutes in one string. Returns nullopt when the text holds no `${...}` (so no re-typing applies).
// Throws ConfigError naming the variable and `origin` when a required variable is unset.
std::optional<Value> substitute_env(const std::string& text, const Origin& origin, const EnvLookup& env);

// Applies substitute_env to every string in the tree, in place.
void substitute_env_tree(Value& tree, const EnvLookup& env);

// Re-types substituted text as Primus does (also used for the "null" rule's neighbour cases in tests).
Value retype_substituted(const std::string& text, Origin origin);

}  // namespace primus::config
