#pragma once
// Who device memory belongs to, for the report of what is held at the peak (core/device.h,
// memory_holders_at_peak). A scope names an owner on the calling thread; every allocation made while it is
// open (and no inner scope is) is counted under that owner until it is freed, wherever it is freed:
//
//   { PRIMUS_MEMORY_OWNER("optimizer update"); ... }
//   { PRIMUS_MEMORY_OWNER(fmt::format("layer {} forward", l)); ... }   // interned: one copy per distinct
//   name
//
// Opening and closing a scope moves one pointer, so literal owners cost nothing measurable on the hot path.
// Allocations outside any scope (and on threads that open none) belong to "other".
#include <string>

namespace primus {

// The innermost owner open on this thread, or "other".
const char* current_memory_owner();

// A process-wide copy of `name` that lives until the process ends (the same pointer for equal names).
const char* intern_memory_owner(const std::string& name);

class MemoryOwnerScope {
 public:
  // `owner` must outlive every allocation made under it: a literal or other static storage.
  explicit MemoryOwnerScope(const char* owner);
  explicit MemoryOwnerScope(const std::string& owner) : MemoryOwnerScope(intern_memory_owner(owner)) {}
  ~MemoryOwnerScope();
  MemoryOwnerScope(const MemoryOwnerScope&) = delete;
  MemoryOwnerScope& operator=(const MemoryOwnerScope&) = delete;

 private:
  const char* outer_;
};

}  // namespace primus

#define PRIMUS_MEMORY_OWNER_CONCAT2(a, b) a##b
#define PRIMUS_MEMORY_OWNER_CONCAT(a, b) PRIMUS_MEMORY_OWNER_CONCAT2(a, b)
#define PRIMUS_MEMORY_OWNER(owner) \
  ::primus::MemoryOwnerScope PRIMUS_MEMORY_OWNER_CONCAT(primus_memory_owner_, __LINE__)(owner)
