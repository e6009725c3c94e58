#pragma once
// Primus's deep merge (merge_utils.deep_merge): a mapping merged onto a mapping recurses key by key; any
// other value (scalar, list, null) replaces the old one whole. Origins travel with the values, so the merged
// tree still says which file each leaf came from.
#include <string>
#include <vector>

#include "config/value.h"

namespace primus::config {

// Merges `src` over `dst` in place (src wins).
void deep_merge(Value& dst, const Value& src);

// Adds the top-level keys of `src` that `dst` lacks (Primus's model-preset merge, allow_override=False);
// keys present in both keep dst's value whole. Returns the keys of src that were shadowed that way.
std::vector<std::string> merge_missing_top_level(Value& dst, const Value& src,
                                                 const std::vector<std::string>& skip);

// Primus stores the string "null" as None (yaml_utils.set_value_by_key); applied to every leaf of the tree.
void null_strings_to_null(Value& tree);

}  // namespace primus::config
