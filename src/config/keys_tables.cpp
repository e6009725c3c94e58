// Builds the key tables once (function-local statics: thread-safe and only when first needed).
#include <fmt/format.h>

#include "config/key_decl.h"
#include "config/keys_megatron.h"
#include "config/keys_torchtitan.h"
#include "core/error.h"

namespace primus::config {

const KeyTable& megatron_keys() {
  static const KeyTable table = [] {
    KeyTable t("megatron");
    keys::add_common_keys(t);
    keys::add_megatron_model_keys(t);
    keys::add_megatron_moe_keys(t);
    keys::add_megatron_parallel_keys(t);
    keys::add_megatron_training_keys(t);
    keys::add_megatron_checkpoint_keys(t);
    keys::add_megatron_logging_keys(t);
    keys::add_megatron_other_model_keys(t);
    keys::add_megatron_primus_keys(t);
    keys::add_megatron_sft_keys(t);
    keys::add_megatron_upstream_keys(t);
    keys::add_megatron_upstream_knobs(t);
    return t;
  }();
  return table;
}

const KeyTable& torchtitan_keys() {
  static const KeyTable table = [] {
    KeyTable t("torchtitan");
    keys::add_torchtitan_keys(t);
    return t;
  }();
  return table;
}

const KeyTable& platform_keys() {
  static const KeyTable table = [] {
    KeyTable t("platform");
    keys::add_platform_keys(t);
    return t;
  }();
  return table;
}

const KeyTable& keys_for_framework(const std::string& framework) {
  if (framework == "megatron") return megatron_keys();
  if (framework == "torchtitan") return torchtitan_keys();
  throw ConfigError(fmt::format("unknown framework '{}'", framework), "use megatron or torchtitan");
}

}  // namespace primus::config
