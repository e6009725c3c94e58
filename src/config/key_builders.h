#pragma once
// Shorthands for the key tables (keys_*.cpp): one call per key, so each table reads like a list.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "config/key_decl.h"

namespace primus::config::keys {

inline constexpr KeyType kB = KeyType::kBool;
inline constexpr KeyType kI = KeyType::kInt;
inline constexpr KeyType kF = KeyType::kFloat;
inline constexpr KeyType kS = KeyType::kString;
inline constexpr KeyType kL = KeyType::kList;
inline constexpr KeyType kM = KeyType::kMap;
inline constexpr KeyType kA = KeyType::kAny;

// An implemented key.
KeyDecl impl(std::string name, KeyType type, std::string def, std::string doc);
// A key accepted with no effect here; `why` is printed by --dry-run.
KeyDecl noeff(std::string name, KeyType type, std::string def, std::string why, std::string doc);

// One key of a batch that share the same "no effect here" reason (see add_all).
struct Knob {
  const char* name;
  KeyType type;
  const char* def;
  const char* doc;
};
// Declares every knob as "no effect here" for the same reason `why`.
void add_all(KeyTable& t, const char* why, std::initializer_list<Knob> knobs);
// A key for a feature not supported yet; inert values: null, false, 0, "", [], {}.
KeyDecl unsup(std::string name, KeyType type, std::string def, std::string doc);
// Same with explicit inert values and a note on what works.
KeyDecl unsup(std::string name, KeyType type, std::string def, std::string doc, SupportRule inert,
              std::string what);
// A key for a feature not supported yet whose inert values are null, false/0/""/[]/{} and its own default
// (Megatron's defaults are not always "off": softmax_type vanilla, mup_width_mult 1.0).
KeyDecl unsup_unless_default(std::string name, KeyType type, std::string def, std::string doc);
// A section (a map whose keys are declared as "section.key").
KeyDecl section(std::string name, std::string doc);

// Value rules.
ValueRule positive();      // > 0
ValueRule non_negative();  // >= 0
ValueRule at_least(double lo);
ValueRule in_range(double lo, double hi);  // lo <= v <= hi
ValueRule one_of(std::initializer_list<const char*> choices);
ValueRule layer_id_list();  // a list of layer indices >= 0, or the same as a comma-separated string "0,3,4"
// The layer indices such a value holds, in its order (one integer is one index); nullopt when it is none of
// those forms. The one parser of the form: layer_id_list checks with it, the dialects read with it.
std::optional<std::vector<int64_t>> layer_ids_of(const Value& v);

// Support rules.
SupportRule inert_default();                                 // null, false, 0, "", [], {}
SupportRule null_or(std::initializer_list<const char*> ok);  // null or one of these strings
SupportRule strings(std::initializer_list<const char*> ok);  // one of these strings (null too when nullable)
SupportRule null_or_int(int64_t ok);    // null or this integer (e.g. a parallel size of 1)
SupportRule null_or_number(double ok);  // null or this number (e.g. dropout 0)
SupportRule is_bool(bool ok);           // this bool (null counts as false)

}  // namespace primus::config::keys
