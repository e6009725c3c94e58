#include "config/preset_loader.h"

#include <fmt/format.h>

#include <filesystem>

#include "config/merge.h"
#include "config/yaml_reader.h"
#include "core/error.h"

namespace primus::config {
namespace {

namespace fs = std::filesystem;

std::string canonical_or_same(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::path(path), ec);
  return ec ? path : p.string();
}

Value load_recursive(const std::string& path, const EnvLookup& env, std::vector<std::string>& stack,
                     std::vector<std::string>* files_read, std::vector<std::string>* warnings) {
  std::string key = canonical_or_same(path);
  for (size_t i = 0; i < stack.size(); ++i) {
    if (stack[i] == key) {
      std::string chain;
      for (size_t j = i; j < stack.size(); ++j) chain += stack[j] + " -> ";
      throw ConfigError(fmt::format("cyclic extends: {}{}", chain, key),
                        "an extends chain must not come back to a file it started from");
    }
  }
  Value tree = read_yaml_file(path);
  if (files_read != nullptr) files_read->push_back(path);
  if (tree.is_null()) throw ConfigError(fmt::format("{}: the YAML file is empty", path));
  if (!tree.is_map())
    throw ConfigError(
        fmt::format("{}: expected a mapping of keys at the top level, found a {}", path, tree.type_name()));
  substitute_env_tree(tree, env);

  // `bases:` is Primus's older spelling of `extends:` (still in its zebra_llama / mamba / minimax presets).
  if (const Value* bases = tree.find("bases"); bases != nullptr) {
    if (tree.find("extends") != nullptr)
      throw ConfigError(
          fmt::format("{}: both 'bases' and 'extends'; 'bases' is the old spelling of "
                      "'extends', keep one",
                      bases->origin().str()));
    if (warnings != nullptr)
      warnings->push_back(fmt::format("{}: 'bases:' is deprecated; it is read as 'extends:' (rename it)",
                                      bases->origin().str()));
    Value parents = *bases;
    tree.erase("bases");
    tree.set("extends", std::move(parents));
  }

  const Value* extends = tree.find("extends");
  if (extends == nullptr) return tree;

  std::vector<const Value*> parents;
  if (extends->is_string()) {
    parents.push_back(extends);
  } else if (extends->is_list()) {
    for (const Value& item : extends->items()) parents.push_back(&item);
  } else if (!extends->is_null()) {
    throw ConfigError(fmt::format("{}: 'extends' must be a file name or a list of file names, not a {}",
                                  extends->origin().str(), extends->type_name()));
  }

  stack.push_back(key);
  Value merged = Value::map(tree.origin());
  fs::path dir = fs::path(path).parent_path();
  for (const Value* parent : parents) {
    if (!parent->is_string())
      throw ConfigError(fmt::format("{}: an 'extends' entry must be a file name, not {}",
                                    parent->origin().str(), parent->repr()));
    fs::path parent_path = dir / parent->as_string();
    // The non-throwing exists: a name the file system rejects (too long, say) is a config error, not an
    // uncaught std::filesystem_error (found by fuzzing).
    std::error_code ec;
    if (!fs::exists(parent_path, ec))
      throw ConfigError(fmt::format(
          "{}: extends file '{}' not found (looked for {}{})", parent->origin().str(), parent->as_string(),
          parent_path.lexically_normal().string(), ec ? ": " + ec.message() : std::string()));
    deep_merge(merged,
               load_recursive(parent_path.lexically_normal().string(), env, stack, files_read, warnings));
  }
  stack.pop_back();

  tree.erase("extends");
  deep_merge(merged, tree);
  return merged;
}

}  // namespace

Value load_preset(const std::string& path, const EnvLookup& env, std::vector<std::string>* files_read,
                  std::vector<std::string>* warnings) {
  std::vector<std::string> stack;
  return load_recursive(path, env, stack, files_read, warnings);
}

Value load_preset(const std::string& path, const EnvLookup& env) {
  return load_preset(path, env, nullptr);
}

}  // namespace primus::config
