#pragma once
// Hugging Face chat templates: a Jinja2 interpreter for the subset that `chat_template` strings in
// tokenizer_config.json use, rendering as transformers' apply_chat_template does (trim_blocks, lstrip_blocks,
// loop controls, raise_exception, strftime_now, a tojson that keeps non-ASCII text). The supported language
// is listed in docs/posttrain.md ("Chat templates and loss masks").
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace primus::data {

struct ChatMessage {
  std::string role;  // system | user | assistant (templates may accept others, e.g. tool)
  std::string content;
};

// [begin, end) byte offsets into a rendered string.
using TextRange = std::pair<size_t, size_t>;

class ChatTemplate {
 public:
  // Parses `source`; syntax errors throw ConfigError "origin:line:column: chat template: ...".
  static ChatTemplate parse(const std::string& source, const std::string& origin);

  // Renders with `context`'s keys as the template's variables. Runtime errors (raise_exception, an unknown
  // filter, reading an attribute of an undefined value, ...) throw ConfigError naming origin:line:column.
  // `generation` (optional) receives the ranges that `{% generation %}` blocks produced, the markers
  // transformers' return_assistant_tokens_mask reads.
  std::string render(const nlohmann::ordered_json& context,
                     std::vector<TextRange>* generation = nullptr) const;
  std::string render(const nlohmann::json& context) const;

  bool has_generation_blocks() const;
  const std::string& origin() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

// The variables transformers passes to a chat template: messages, add_generation_prompt, tools and documents
// (None), bos_token and eos_token.
nlohmann::ordered_json chat_template_context(const std::vector<ChatMessage>& messages,
                                             bool add_generation_prompt, const std::string& bos_token,
                                             const std::string& eos_token);

// Renders messages with the model's template, as tokenizer.apply_chat_template(messages, tokenize=False,
// add_generation_prompt=...) does.
std::string apply_chat_template(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, const std::string& bos_token,
                                const std::string& eos_token);

// What a model's tokenizer files say about chat formatting.
struct TokenizerChatConfig {
  std::string chat_template;  // empty when the model has none
  std::string bos_token;
  std::string eos_token;
  std::string origin;  // the file the template came from, for error messages
};

// Reads tokenizer_config.json's `chat_template` (a string, or a list of {name, template} from which "default"
// is taken) and its bos/eos tokens (strings or {"content": ...} objects). `origin` names the file in errors.
TokenizerChatConfig parse_tokenizer_chat_config(const nlohmann::json& config, const std::string& origin);
// Reads `path` (a tokenizer_config.json); when it has no chat_template, a chat_template.jinja beside it
// (where newer transformers versions save the template) is used.
TokenizerChatConfig read_tokenizer_chat_config(const std::string& path);

}  // namespace primus::data
