#pragma once
// Filters, tests, attribute / method lookup and global functions of the chat-template interpreter: the
// builtins that Hugging Face chat templates use (see docs/posttrain.md for the list). Internal to the
// interpreter; errors are thrown as TemplateRuntimeError and given a template position by the evaluator.
#include <string>

#include "data/chat_template_value.h"

namespace primus::data::jinja {

// `obj.name`: Jinja's getattr (Python attribute first, so dict methods win over keys of the same name, then
// the item). A missing one is Undefined carrying a Jinja-like description.
Value get_attribute(const Value& obj, const std::string& name);
// `obj[key]`: Jinja's getitem (the item first, then the attribute). Negative list indices count from the end.
Value get_item(const Value& obj, const Value& key);
// `obj[start:stop:step]` on lists and strings (strings by code point), Python semantics.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

Value apply_filter(const std::string& name, const Value& operand, CallArgs& args);
bool apply_test(const std::string& name, const Value& operand, const CallArgs& args);
bool has_filter(const std::string& name);
bool has_test(const std::string& name);

// The elements a for-loop visits: list items, dict keys, string characters; Undefined visits nothing.
List iterate(const Value& v);
// Python `a in b`.
bool contains(const Value& container, const Value& item);
// Python `<`; throws on types that do not order.
bool less(const Value& a, const Value& b);
// Number of code points of a UTF-8 string.
size_t utf8_length(const std::string& s);

// Fills `globals` with range, namespace, dict, raise_exception and strftime_now.
void add_global_functions(Dict& globals);

}  // namespace primus::data::jinja
