#include "data/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "data/chat_template_builtins.h"
#include "data/chat_template_eval.h"

namespace primus::data {

struct ChatTemplate::Impl {
  std::string origin;
  jinja::Body body;
  jinja::Dict globals;
  bool has_generation = false;
};

namespace {

bool uses_generation(const jinja::Body& body) {
  for (const auto& s : body) {
    if (s->kind == jinja::Stmt::Kind::kGeneration) return true;
    if (uses_generation(s->body) || uses_generation(s->else_body)) return true;
    for (const auto& br : s->branches)
      if (uses_generation(br.second)) return true;
  }
  return false;
}

}  // namespace

ChatTemplate ChatTemplate::parse(const std::string& source, const std::string& origin) {
  auto impl = std::make_shared<Impl>();
  impl->origin = origin;
  impl->body = jinja::parse(jinja::lex(source, origin), origin);
  jinja::add_global_functions(impl->globals);
  impl->has_generation = uses_generation(impl->body);
  ChatTemplate t;
  t.impl_ = std::move(impl);
  return t;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context,
                                 std::vector<TextRange>* generation) const {
  if (!context.is_object())
    throw ConfigError(impl_->origin + ": chat template context must be a JSON object");
  return jinja::render_template(impl_->body, impl_->globals, jinja::from_json(context), impl_->origin,
                                generation);
}

std::string ChatTemplate::render(const nlohmann::json& context) const {
  return render(nlohmann::ordered_json::parse(context.dump()));
}

bool ChatTemplate::has_generation_blocks() const {
  return impl_->has_generation;
}
const std::string& ChatTemplate::origin() const {
  return impl_->origin;
}

nlohmann::ordered_json chat_template_context(const std::vector<ChatMessage>& messages,
                                             bool add_generation_prompt, const std::string& bos_token,
                                             const std::string& eos_token) {
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const auto& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  // transformers passes tools and documents as None when the caller gives none, so `tools is not none` and
  // `tools is defined` both behave as they do there.
  return {{"messages", std::move(msgs)}, {"tools", nullptr},
          {"documents", nullptr},        {"add_generation_prompt", add_generation_prompt},
          {"bos_token", bos_token},      {"eos_token", eos_token}};
}

std::string apply_chat_template(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, const std::string& bos_token,
                                const std::string& eos_token) {
  return tmpl.render(chat_template_context(messages, add_generation_prompt, bos_token, eos_token));
}

namespace {

// A special token in tokenizer_config.json: a string, an AddedToken object {"content": ...}, or null.
std::string special_token(const nlohmann::json& config, const char* key, const std::string& origin) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  throw ConfigError(
      fmt::format("{}: '{}' is neither a string nor an object with a string 'content'", origin, key));
}

}  // namespace

TokenizerChatConfig parse_tokenizer_chat_config(const nlohmann::json& config, const std::string& origin) {
  TokenizerChatConfig out;
  out.origin = origin;
  out.bos_token = special_token(config, "bos_token", origin);
  out.eos_token = special_token(config, "eos_token", origin);
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return out;
  if (it->is_string()) {
    out.chat_template = it->get<std::string>();
    return out;
  }
  if (it->is_array()) {
    std::string names;
    for (const auto& entry : *it) {
      // Both strings: get<std::string>() below throws nlohmann's type_error, not a ConfigError, on anything
      // else (found by tests/fuzz/fuzz_chat_template.cpp).
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
          !entry["name"].is_string() || !entry["template"].is_string())
        throw ConfigError(fmt::format(
            "{}: a chat_template list entry is not {{\"name\": string, \"template\": string}}", origin));
      std::string name = entry["name"].get<std::string>();
      if (name == "default") {
        out.chat_template = entry["template"].get<std::string>();
        return out;
      }
      names += (names.empty() ? "" : ", ") + name;
    }
    throw ConfigError(
        fmt::format("{}: chat_template lists named templates ({}) but none named 'default'", origin, names),
        "a tool-use or RAG template needs its own context; Primus renders with the default one");
  }
  throw ConfigError(
      fmt::format("{}: chat_template is neither a string nor a list of {{name, template}}", origin));
}

TokenizerChatConfig read_tokenizer_chat_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("cannot open tokenizer config '{}'", path));
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
  TokenizerChatConfig out = parse_tokenizer_chat_config(config, path);
  if (out.chat_template.empty()) {
    auto jinja_path = std::filesystem::path(path).parent_path() / "chat_template.jinja";
    std::ifstream tin(jinja_path);
    if (tin) {
      std::stringstream ss;
      ss << tin.rdbuf();
      out.chat_template = ss.str();
      out.origin = jinja_path.string();
    }
  }
  return out;
}

}  // namespace primus::data
