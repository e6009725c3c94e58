#include "core/memory_owner.h"

#include <mutex>
#include <unordered_set>

namespace primus {

namespace {
// The scopes form a stack through their saved outer owners, so the thread needs only its innermost one.
thread_local const char* innermost = nullptr;
}  // namespace

const char* current_memory_owner() {
  return innermost ? innermost : "other";
}

const char* intern_memory_owner(const std::string& name) {
  static std::mutex mu;
  // Never destroyed: allocations may be freed (and their owners read) during static destruction.
  static auto* names = new std::unordered_set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  return names->insert(name).first->c_str();  // node-based: the string never moves
}

MemoryOwnerScope::MemoryOwnerScope(const char* owner) : outer_(innermost) {
  innermost = owner;
}

MemoryOwnerScope::~MemoryOwnerScope() {
  innermost = outer_;
}

}  // namespace primus
