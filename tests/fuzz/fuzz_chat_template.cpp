// Fuzzes the chat-template interpreter (data/chat_template*.cpp): the lexer, the parser and the evaluator
// with its filters, tests, methods and globals, on hostile templates. The input is a template source, a NUL
// byte, then the conversation it is rendered with:
//
//   <template> \0 <flags> [\0 <role byte><content>]...
//
// flags bit 0: add_generation_prompt; bit 1: `tools` is a list with one tool schema (else none, as
// transformers passes it); bit 2: the bos/eos tokens are empty. Each further NUL-separated segment is a
// message (at most 16): its first byte picks the role (system, user, assistant, tool, or the raw byte as a
// one-character role), the rest is its content. Without a NUL the whole input is the template, rendered with
// a fixed three-message conversation. A template part that is a JSON object is read as a
// tokenizer_config.json first (parse_tokenizer_chat_config: `chat_template` as a string or a list of {name,
// template}, bos/eos as strings or {"content": ...}), whose template and tokens are then used.
//
// The rule: a template that parses renders to text, or fails with a ConfigError naming the template (bad
// syntax, raise_exception, a runtime type error, or one of the interpreter's limits on nesting, work and
// memory). Never a crash, undefined behaviour, a hang or unbounded memory. {% generation %} ranges must lie
// inside the rendered text.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/chat_template.h"

namespace {

using primus::data::ChatMessage;

std::vector<std::string> split_nul(const std::string& s) {
  std::vector<std::string> parts;
  size_t from = 0;
  while (true) {
    const size_t nul = s.find('\0', from);
    parts.push_back(s.substr(from, nul == std::string::npos ? std::string::npos : nul - from));
    if (nul == std::string::npos) return parts;
    from = nul + 1;
  }
}

const char* const kTool = R"({"type": "function", "function": {"name": "get_weather",
  "description": "Weather at a place", "parameters": {"type": "object", "properties": {
  "location": {"type": "string", "description": "City"}, "days": {"type": "integer"}},
  "required": ["location"]}}})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string> parts = split_nul(input);

  uint8_t flags = 0;
  std::vector<ChatMessage> messages;
  if (parts.size() == 1) {
    messages = {{"system", "Be brief."}, {"user", "Hi there"}, {"assistant", "Hello!"}};
  } else {
    flags = parts[1].empty() ? 0 : static_cast<uint8_t>(parts[1][0]);
    static const char* const kRoles[] = {"system", "user", "assistant", "tool"};
    for (size_t k = 2; k < parts.size() && messages.size() < 16; ++k) {
      const std::string& p = parts[k];
      const uint8_t r = p.empty() ? 1 : static_cast<uint8_t>(p[0]);
      const std::string role = r < 4      ? kRoles[r]
                               : r < 0x80 ? std::string(1, static_cast<char>(r))
                                          : kRoles[r % 4];
      messages.push_back({role, p.empty() ? std::string() : p.substr(1)});
    }
  }
  const bool generation_prompt = flags & 1;
  std::string bos = (flags & 4) ? "" : "<s>", eos = (flags & 4) ? "" : "</s>";

  try {
    std::string source = parts[0];
    const nlohmann::json config = nlohmann::json::parse(source, /*cb=*/nullptr, /*allow_exceptions=*/false);
    if (config.is_object()) {
      const auto c = primus::data::parse_tokenizer_chat_config(config, "fuzz/tokenizer_config.json");
      source = c.chat_template;
      bos = c.bos_token;
      eos = c.eos_token;
    }
    const auto tmpl = primus::data::ChatTemplate::parse(source, "fuzz.jinja");
    nlohmann::ordered_json context =
        primus::data::chat_template_context(messages, generation_prompt, bos, eos);
    if (flags & 2) context["tools"] = nlohmann::ordered_json::array({nlohmann::ordered_json::parse(kTool)});
    std::vector<primus::data::TextRange> ranges;
    const std::string out = tmpl.render(context, &ranges);
    for (const auto& [begin, end] : ranges)
      if (begin > end || end > out.size()) __builtin_trap();
    if (!tmpl.has_generation_blocks() && !ranges.empty()) __builtin_trap();
  } catch (const primus::ConfigError&) {
  }
  return 0;
}
