#include "config/merge.h"

#include <algorithm>

namespace primus::config {

void deep_merge(Value& dst, const Value& src) {
  if (!dst.is_map() || !src.is_map()) {
    dst = src;
    return;
  }
  for (const auto& [key, value] : src.entries()) {
    Value* existing = dst.find(key);
    if (existing != nullptr && existing->is_map() && value.is_map()) {
      deep_merge(*existing, value);
    } else {
      dst.set(key, value);
    }
  }
}

std::vector<std::string> merge_missing_top_level(Value& dst, const Value& src,
                                                 const std::vector<std::string>& skip) {
  std::vector<std::string> shadowed;
  for (const auto& [key, value] : src.entries()) {
    if (std::find(skip.begin(), skip.end(), key) != skip.end()) continue;
    if (dst.find(key) != nullptr) {
      shadowed.push_back(key);
      continue;
    }
    dst.set(key, value);
  }
  return shadowed;
}

void null_strings_to_null(Value& tree) {
  switch (tree.type()) {
    case Value::Type::kString:
      if (tree.as_string() == "null") {
        Origin o = tree.origin();
        if (o.note.empty()) o.note = "the string \"null\" is stored as null";
        tree = Value::null(std::move(o));
      }
      break;
    case Value::Type::kList:
      for (Value& item : tree.items()) null_strings_to_null(item);
      break;
    case Value::Type::kMap:
      for (auto& [key, value] : tree.entries()) null_strings_to_null(value);
      break;
    default:
      break;
  }
}

}  // namespace primus::config
