#include "config/yaml_reader.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "config/yaml_scalar.h"
#include "core/error.h"

namespace primus::config {
namespace {

Origin origin_of(const YAML::Mark& mark, const std::string& source) {
  // yaml-cpp marks are 0-based; editors and compilers count from 1.
  return Origin::in_file(source, mark.line + 1, mark.column + 1);
}

// Aliases make yaml-cpp share one node between several places, so the tree it builds can hold a cycle (an
// anchor that contains its own alias: `a: &x [*x]`) or expand exponentially (nine levels of ten aliases,
// "billion laughs": 1 KB of YAML, 10^9 values). Converting such a graph into a Value tree would recurse
// forever or allocate until the process dies; both are bounded here, where the expansion happens.
inline constexpr size_t kMaxValues = 100'000;              // real Primus configs hold a few hundred
inline constexpr size_t kMaxTextBytes = size_t(64) << 20;  // scalar text after alias expansion

class Converter {
 public:
  explicit Converter(const std::string& source) : source_(source) {}

  Value convert(const YAML::Node& node, const Origin& origin) {
    if (++values_ > kMaxValues) throw too_large(origin, fmt::format("more than {} values", kMaxValues));
    switch (node.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        return Value::null(origin);
      case YAML::NodeType::Scalar:
        text_bytes_ += node.Scalar().size();
        if (text_bytes_ > kMaxTextBytes)
          throw too_large(origin, fmt::format("more than {} MiB of text", kMaxTextBytes >> 20));
        return convert_scalar(node, origin);
      case YAML::NodeType::Sequence: {
        open_.push_back(node);
        Value list = Value::list(origin);
        size_t index = 0;
        for (const auto& item : node) {
          check_not_open(item, fmt::format("{} (item {})", origin.str(), index++));
          list.push_back(convert(item, origin_of(item.Mark(), source_)));
        }
        open_.pop_back();
        return list;
      }
      case YAML::NodeType::Map: {
        open_.push_back(node);
        Value map = Value::map(origin);
        for (auto it = node.begin(); it != node.end(); ++it) {
          Origin key_origin = origin_of(it->first.Mark(), source_);
          if (!it->first.IsScalar())
            throw ConfigError(fmt::format("{}: mapping keys must be plain names", key_origin.str()));
          // Keys stay text even when they look like numbers: config keys are names.
          const std::string& key = it->first.Scalar();
          if (const Value* first = map.find(key))
            throw ConfigError(
                fmt::format("{}: duplicate key '{}' (first defined at {}); YAML keeps only one of them",
                            key_origin.str(), key, first->origin().str()));
          // A map entry's origin is the key's position: that is what a reader looks for in the file.
          check_not_open(it->second, key_origin.str());
          map.entries().emplace_back(key, convert(it->second, key_origin));
        }
        open_.pop_back();
        return map;
      }
    }
    return Value::null(origin);
  }

 private:
  // `child` (about to be converted at `where`) must not be one of the collections it sits in: an alias of an
  // enclosing anchor would make the value contain itself.
  void check_not_open(const YAML::Node& child, const std::string& where) const {
    for (const YAML::Node& open : open_) {
      if (open.is(child))
        throw ConfigError(
            fmt::format("{}: an alias refers to the anchored value it is part of, which starts at "
                        "{} (a cyclic YAML structure cannot be a config value)",
                        where, origin_of(child.Mark(), source_).str()),
            "an alias (*name) may only repeat an anchor (&name) defined before and outside it");
    }
  }

  Value convert_scalar(const YAML::Node& node, const Origin& origin) {
    const std::string& tag = node.Tag();
    const std::string& text = node.Scalar();
    if (tag == "?") return resolve_plain_scalar(text, origin);
    if (tag == "!" || tag == "tag:yaml.org,2002:str") return Value::string(text, origin);
    Value typed = resolve_plain_scalar(text, origin);
    if (tag == "tag:yaml.org,2002:int" && typed.is_int()) return typed;
    if (tag == "tag:yaml.org,2002:float" && typed.is_number()) return Value::real(typed.as_float(), origin);
    if (tag == "tag:yaml.org,2002:bool" && typed.is_bool()) return typed;
    if (tag == "tag:yaml.org,2002:null" && typed.is_null()) return typed;
    throw ConfigError(fmt::format("{}: unsupported YAML tag '{}' on value '{}'", origin.str(), tag, text));
  }

  ConfigError too_large(const Origin& origin, const std::string& what) const {
    return ConfigError(
        fmt::format(
            "{}: the YAML expands to {} through its aliases (*name repeating &name, as in 'billion laughs'); "
            "stopped here",
            origin.str(), what),
        "nested aliases multiply (ten aliases of ten aliases ... is 'billion laughs'): write the values out "
        "or "
        "alias fewer levels");
  }

  const std::string& source_;
  std::vector<YAML::Node> open_;  // the collections being converted: an alias of one of them is a cycle
  size_t values_ = 0;
  size_t text_bytes_ = 0;
};

}  // namespace

Value read_yaml_text(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(
        fmt::format("{}:{}:{}: YAML syntax error: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  return Converter(source).convert(root, Origin::in_file(source, 1, 1));
}

Value read_yaml_file(const std::string& path) {
  // A device or FIFO (`extends: /dev/zero`) would be read forever.
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw ConfigError(fmt::format("config file '{}' is not a regular file", path));
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("cannot open config file '{}'", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return read_yaml_text(buffer.str(), path);
}

}  // namespace primus::config
