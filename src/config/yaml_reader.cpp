#include "config/yaml_reader.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>

#include "config/yaml_scalar.h"
#include "core/error.h"

namespace primus::config {
namespace {

Origin origin_of(const YAML::Mark& mark, const std::string& source) {
  // yaml-cpp marks are 0-based; editors and compilers count from 1.
  return Origin::in_file(source, mark.line + 1, mark.column + 1);
}

Value convert(const YAML::Node& node, const Origin& origin, const std::string& source);

Value convert_scalar(const YAML::Node& node, const Origin& origin, const std::string& source) {
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

Value convert(const YAML::Node& node, const Origin& origin, const std::string& source) {
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return Value::null(origin);
    case YAML::NodeType::Scalar:
      return convert_scalar(node, origin, source);
    case YAML::NodeType::Sequence: {
      Value list = Value::list(origin);
      for (const auto& item : node) list.push_back(convert(item, origin_of(item.Mark(), source), source));
      return list;
    }
    case YAML::NodeType::Map: {
      Value map = Value::map(origin);
      for (auto it = node.begin(); it != node.end(); ++it) {
        Origin key_origin = origin_of(it->first.Mark(), source);
        if (!it->first.IsScalar())
          throw ConfigError(fmt::format("{}: mapping keys must be plain names", key_origin.str()));
        // Keys stay text even when they look like numbers: config keys are names.
        const std::string& key = it->first.Scalar();
        if (const Value* first = map.find(key))
          throw ConfigError(
              fmt::format("{}: duplicate key '{}' (first defined at {}); YAML keeps only one of them",
                          key_origin.str(), key, first->origin().str()));
        // A map entry's origin is the key's position: that is what a reader looks for in the file.
        map.entries().emplace_back(key, convert(it->second, key_origin, source));
      }
      return map;
    }
  }
  return Value::null(origin);
}

}  // namespace

Value read_yaml_text(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(
        fmt::format("{}:{}:{}: YAML syntax error: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  return convert(root, Origin::in_file(source, 1, 1), source);
}

Value read_yaml_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("cannot open config file '{}'", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return read_yaml_text(buffer.str(), path);
}

}  // namespace primus::config
