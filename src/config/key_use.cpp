#include "config/key_use.h"

#include <fmt/format.h>

namespace primus::config {

std::vector<std::string> key_use_violations(const CheckedKeys& keys) {
  std::vector<std::string> out;
  for (const KeyEntry& e : keys.entries) {
    const std::string& name = e.decl->name;
    const bool read = keys.consumed(name);
    if (e.decl->status == KeyStatus::kImplemented && !read)
      out.push_back(fmt::format("{}: declared implemented but never read", name));
    else if (e.decl->status == KeyStatus::kNoEffect && read)
      out.push_back(fmt::format("{}: declared no effect here but read", name));
  }
  return out;
}

}  // namespace primus::config
