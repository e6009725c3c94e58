#pragma once
// Evaluator of the chat-template interpreter (internal; the public API is chat_template.h).
#include <string>
#include <utility>
#include <vector>

#include "data/chat_template_ast.h"

namespace primus::data::jinja {

// Renders a parsed template. `globals` are the builtin functions, `context` (a dict) the caller's variables;
// `generation`, when given, receives the output ranges of {% generation %} blocks.
std::string render_template(const Body& body, const Dict& globals, const Value& context,
                            const std::string& origin, std::vector<std::pair<size_t, size_t>>* generation);

}  // namespace primus::data::jinja
