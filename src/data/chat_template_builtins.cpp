// Builtins of the chat-template interpreter, following Jinja2 3.1 filters/tests and Python's str/dict
// methods on the values chat templates handle. String case mapping is ASCII-only (role names and special
// tokens are ASCII); lengths, indices and slices count UTF-8 code points as Python does.
#include "data/chat_template_builtins.h"

#include <fmt/format.h>

#include <string.h>  // memmem

#include <algorithm>
#include <bitset>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <map>

namespace primus::data::jinja {

namespace {

[[noreturn]] void fail(const std::string& msg) {
  throw TemplateRuntimeError(msg);
}

const std::string& need_string(const Value& v, const char* what) {
  if (!v.is_string()) fail(fmt::format("{} expects a string, got {}", what, v.type_name()));
  return v.s;
}

int64_t need_int(const Value& v, const char* what) {
  if (v.kind == Value::Kind::kInt) return v.i;
  if (v.kind == Value::Kind::kBool) return v.b;
  fail(fmt::format("{} expects an integer, got {}", what, v.type_name()));
}

// Byte offsets of each code point, plus the end.
std::vector<size_t> code_points(const std::string& s) {
  charge_bytes(sizeof(size_t) * (s.size() + 1));
  std::vector<size_t> offs;
  for (size_t k = 0; k < s.size(); ++k)
    if ((static_cast<unsigned char>(s[k]) & 0xC0) != 0x80) offs.push_back(k);
  offs.push_back(s.size());
  return offs;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Where `needle` first occurs in `s` at or after `from`, or npos. glibc's memmem (two-way) is linear in the
// sizes; std::string::find is not (a long needle of 'a's in a long string of 'a's would take their product).
size_t find_in(const std::string& s, const std::string& needle, size_t from = 0) {
  if (from > s.size()) return std::string::npos;
  if (needle.empty()) return from;
  const void* hit = ::memmem(s.data() + from, s.size() - from, needle.data(), needle.size());
  return hit ? static_cast<size_t>(static_cast<const char*>(hit) - s.data()) : std::string::npos;
}

std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::bitset<256> set;  // the bytes to strip, looked up in O(1) however long `chars` is
  if (chars.is_string())
    for (unsigned char c : chars.s) set.set(c);
  auto drop = [&](char c) {
    return chars.is_string() ? set.test(static_cast<unsigned char>(c)) : is_space(c);
  };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && drop(s[b])) ++b;
  if (right)
    while (e > b && drop(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string capitalize(const std::string& s) {
  std::string out = lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}
// Python str.title(): a letter after a non-letter is upper-cased, every other letter lower-cased.
std::string title(const std::string& s) {
  std::string out = s;
  bool prev_letter = false;
  for (char& c : out) {
    bool letter = std::isalpha(static_cast<unsigned char>(c));
    if (letter)
      c = static_cast<char>(prev_letter ? std::tolower(static_cast<unsigned char>(c))
                                        : std::toupper(static_cast<unsigned char>(c)));
    prev_letter = letter;
  }
  return out;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) return s;  // Python inserts between characters; no template relies on it
  std::string out;
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    size_t hit = find_in(s, from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    charge_bytes(to.size());  // 'a'*1000 replaced by 'b'*1000 is a million bytes
    out += to;
    pos = hit + from.size();
  }
  out.append(s, pos);
  return out;
}

Value split(const std::string& s, const Value& sep, int64_t maxsplit) {
  List parts;
  if (!sep.is_string()) {  // whitespace runs, empty pieces dropped
    size_t k = 0;
    while (true) {
      while (k < s.size() && is_space(s[k])) ++k;
      if (k >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(Value::string(strip(s.substr(k), Value::none(), false, true)));
        break;
      }
      size_t e = k;
      while (e < s.size() && !is_space(s[e])) ++e;
      parts.push_back(Value::string(s.substr(k, e - k)));
      k = e;
    }
    return Value::make_list(std::move(parts));
  }
  if (sep.s.empty()) fail("split(): empty separator");
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    size_t hit = find_in(s, sep.s, pos);
    if (hit == std::string::npos) break;
    parts.push_back(Value::string(s.substr(pos, hit - pos)));
    pos = hit + sep.s.size();
  }
  parts.push_back(Value::string(s.substr(pos)));
  return Value::make_list(std::move(parts));
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    const std::string& x = need_string(a, prefix ? "startswith()" : "endswith()");
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list()) return std::any_of(affix.list->begin(), affix.list->end(), one);
  return one(affix);
}

Value bound(const std::string& name, std::function<Value(CallArgs&)> fn) {
  return Value::callable(name, std::move(fn));
}

Value string_method(const std::string& s, const std::string& name) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool l = name != "rstrip", r = name != "lstrip";
    return bound(name, [s, l, r](CallArgs& a) { return Value::string(strip(s, a.get(0, "chars"), l, r)); });
  }
  if (name == "startswith" || name == "endswith") {
    bool prefix = name == "startswith";
    return bound(name, [s, prefix](CallArgs& a) {
      return Value::boolean(affix_match(s, a.get(0, "prefix"), prefix));
    });
  }
  if (name == "split")
    return bound(name, [s](CallArgs& a) {
      Value maxsplit = a.get(1, "maxsplit", Value::integer(-1));
      return split(s, a.get(0, "sep"), need_int(maxsplit, "split()"));
    });
  if (name == "upper") return bound(name, [s](CallArgs&) { return Value::string(upper(s)); });
  if (name == "lower") return bound(name, [s](CallArgs&) { return Value::string(lower(s)); });
  if (name == "title") return bound(name, [s](CallArgs&) { return Value::string(title(s)); });
  if (name == "capitalize") return bound(name, [s](CallArgs&) { return Value::string(capitalize(s)); });
  if (name == "replace")
    return bound(name, [s](CallArgs& a) {
      return Value::string(replace(s, need_string(a.get(0, "old"), "replace()"),
                                   need_string(a.get(1, "new"), "replace()"),
                                   need_int(a.get(2, "count", Value::integer(-1)), "replace()")));
    });
  if (name == "find")
    return bound(name, [s](CallArgs& a) {
      size_t hit = find_in(s, need_string(a.get(0, "sub"), "find()"));
      if (hit == std::string::npos) return Value::integer(-1);
      return Value::integer(static_cast<int64_t>(utf8_length(s.substr(0, hit))));
    });
  if (name == "count")
    return bound(name, [s](CallArgs& a) {
      const std::string& sub = need_string(a.get(0, "sub"), "count()");
      int64_t n = 0;
      for (size_t p = find_in(s, sub); !sub.empty() && p != std::string::npos;
           p = find_in(s, sub, p + sub.size()))
        ++n;
      return Value::integer(n);
    });
  if (name == "join")
    return bound(name, [s](CallArgs& a) {
      std::string out;
      List items = iterate(a.get(0, "iterable"));
      for (size_t k = 0; k < items.size(); ++k) {
        charge_bytes(s.size());  // the separator, once per item
        out += (k ? s : "") + need_string(items[k], "join()");
      }
      return Value::string(out);
    });
  return Value::undefined(fmt::format("'str object' has no attribute '{}'", name));
}

Value dict_method(const Value& d, const std::string& name) {
  if (name == "get")
    return bound(name, [d](CallArgs& a) {
      Value key = a.get(0, "key");
      const Value* hit = key.is_string() ? d.dict->find(key.s) : nullptr;
      return hit ? *hit : a.get(1, "default", Value::none());
    });
  if (name == "items")
    return bound(name, [d](CallArgs&) {
      List out;
      for (const auto& [k, v] : d.dict->items) out.push_back(Value::make_tuple({d.dict->key(k), v}));
      return Value::make_list(std::move(out));
    });
  if (name == "keys")
    return bound(name, [d](CallArgs&) {
      List out;
      for (const auto& kv : d.dict->items) out.push_back(d.dict->key(kv.first));
      return Value::make_list(std::move(out));
    });
  if (name == "values")
    return bound(name, [d](CallArgs&) {
      List out;
      for (const auto& kv : d.dict->items) out.push_back(kv.second);
      return Value::make_list(std::move(out));
    });
  return Value::undefined();
}

}  // namespace

size_t utf8_length(const std::string& s) {
  return static_cast<size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

Value get_attribute(const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Value::Kind::kUndefined:
      fail(obj.s.empty() ? fmt::format("cannot read attribute '{}' of an undefined value", name)
                         : fmt::format("{} (reading its attribute '{}')", obj.s, name));
    case Value::Kind::kString:
      return string_method(obj.s, name);
    case Value::Kind::kDict: {
      Value m = dict_method(obj, name);
      if (!m.is_undefined()) return m;
      if (const Value* v = obj.dict->find(name)) return *v;
      return Value::undefined(fmt::format("'dict object' has no attribute '{}'", name));
    }
    case Value::Kind::kNamespace: {
      if (const Value* v = obj.dict->find(name)) return *v;
      return Value::undefined(fmt::format("'Namespace object' has no attribute '{}'", name));
    }
    default:
      return Value::undefined(fmt::format("'{} object' has no attribute '{}'", obj.type_name(), name));
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined())
    fail(obj.s.empty() ? fmt::format("cannot subscript an undefined value with {}", key.repr())
                       : fmt::format("{} (subscripting it with {})", obj.s, key.repr()));
  if (obj.is_mapping() && key.is_number())
    return get_item(obj, Value::string(key.str()));  // see dict literals
  if (obj.is_mapping()) {
    if (key.is_string()) {
      if (const Value* v = obj.dict->find(key.s)) return *v;
      if (obj.is_dict()) {
        Value m = dict_method(obj, key.s);
        if (!m.is_undefined()) return m;
      }
    }
    return Value::undefined(fmt::format("'dict object' has no attribute {}", key.repr()));
  }
  if (obj.is_list() || obj.is_string()) {
    if (key.is_string()) return obj.is_string() ? string_method(obj.s, key.s) : Value::undefined();
    int64_t i = need_int(key, "an index");
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.list->size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(fmt::format("list index {} out of range", key.repr()));
      return (*obj.list)[static_cast<size_t>(i)];
    }
    auto offs = code_points(obj.s);
    int64_t n = static_cast<int64_t>(offs.size()) - 1;
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined(fmt::format("string index {} out of range", key.repr()));
    return Value::string(obj.s.substr(offs[static_cast<size_t>(i)],
                                      offs[static_cast<size_t>(i) + 1] - offs[static_cast<size_t>(i)]));
  }
  return Value::undefined(fmt::format("'{} object' is not subscriptable", obj.type_name()));
}

Value get_slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (!obj.is_list() && !obj.is_string()) fail(fmt::format("cannot slice a {}", obj.type_name()));
  std::vector<size_t> offs;
  int64_t n;
  if (obj.is_list()) {
    n = static_cast<int64_t>(obj.list->size());
  } else {
    offs = code_points(obj.s);
    n = static_cast<int64_t>(offs.size()) - 1;
  }
  auto given = [](const Value& v) { return !v.is_undefined() && !v.is_none(); };
  int64_t step = given(step_v) ? need_int(step_v, "a slice step") : 1;
  if (step == 0) fail("slice step cannot be zero");
  // Python's slice.indices().
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (!given(v)) return dflt;
    int64_t x = need_int(v, "a slice bound");
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t start = clamp(start_v, step > 0 ? 0 : n - 1);
  int64_t stop = clamp(stop_v, step > 0 ? n : -1);
  // The number of items first: `k += step` would overflow for a step near 2**63.
  const uint64_t abs_step = step > 0 ? static_cast<uint64_t>(step) : static_cast<uint64_t>(-(step + 1)) + 1;
  uint64_t count = 0;
  if (step > 0 ? start < stop : stop < start)
    count = (static_cast<uint64_t>(step > 0 ? stop - start : start - stop) - 1) / abs_step + 1;
  List items;
  std::string chars;
  for (uint64_t j = 0; j < count; ++j) {
    const int64_t k = start + static_cast<int64_t>(j) * step;
    if (obj.is_list())
      items.push_back((*obj.list)[static_cast<size_t>(k)]);
    else
      chars.append(obj.s, offs[static_cast<size_t>(k)],
                   offs[static_cast<size_t>(k) + 1] - offs[static_cast<size_t>(k)]);
  }
  return obj.is_list() ? Value::make_list(std::move(items)) : Value::string(std::move(chars));
}

List iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return *v.list;
    case Value::Kind::kDict: {
      List keys;
      for (const auto& kv : v.dict->items) keys.push_back(v.dict->key(kv.first));
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      auto offs = code_points(v.s);
      for (size_t k = 0; k + 1 < offs.size(); ++k)
        chars.push_back(Value::string(v.s.substr(offs[k], offs[k + 1] - offs[k])));
      return chars;
    }
    default:
      fail(fmt::format("'{}' object is not iterable", v.type_name()));
  }
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string())
    return find_in(container.s, need_string(item, "'in <string>'")) != std::string::npos;
  if (container.is_mapping()) return item.is_string() && container.dict->find(item.s) != nullptr;
  if (container.is_list())
    return std::any_of(container.list->begin(), container.list->end(),
                       [&](const Value& v) { return equal(v, item); });
  for (const Value& v : iterate(container))
    if (equal(v, item)) return true;
  return false;
}

bool less(const Value& a, const Value& b) {
  charge_steps(1);
  if ((a.is_number() || a.kind == Value::Kind::kBool) && (b.is_number() || b.kind == Value::Kind::kBool))
    return (a.kind == Value::Kind::kBool ? a.b : a.as_double()) <
           (b.kind == Value::Kind::kBool ? b.b : b.as_double());
  if (a.is_string() && b.is_string()) {
    charge_bytes(std::min(a.s.size(), b.s.size()));
    return a.s < b.s;
  }
  if (a.is_list() && b.is_list())
    return std::lexicographical_compare(a.list->begin(), a.list->end(), b.list->begin(), b.list->end(), less);
  fail(fmt::format("'<' is not supported between {} and {}", a.type_name(), b.type_name()));
}

// ---------------------------------------------------------------------------------------------------------
// Tests (`x is name(args)`).

namespace {

using TestFn = bool (*)(const Value&, const CallArgs&);

const std::map<std::string, TestFn>& tests() {
  using K = Value::Kind;
  static const std::map<std::string, TestFn> t = {
      {"defined", [](const Value& v, const CallArgs&) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, const CallArgs&) { return v.is_undefined(); }},
      {"none", [](const Value& v, const CallArgs&) { return v.is_none(); }},
      {"string", [](const Value& v, const CallArgs&) { return v.is_string(); }},
      {"number", [](const Value& v, const CallArgs&) { return v.is_number() || v.kind == K::kBool; }},
      {"integer", [](const Value& v, const CallArgs&) { return v.kind == K::kInt; }},
      {"float", [](const Value& v, const CallArgs&) { return v.kind == K::kFloat; }},
      {"boolean", [](const Value& v, const CallArgs&) { return v.kind == K::kBool; }},
      {"true", [](const Value& v, const CallArgs&) { return v.kind == K::kBool && v.b; }},
      {"false", [](const Value& v, const CallArgs&) { return v.kind == K::kBool && !v.b; }},
      {"mapping", [](const Value& v, const CallArgs&) { return v.is_dict(); }},
      {"iterable",
       [](const Value& v, const CallArgs&) {
         return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
       }},
      {"sequence",
       [](const Value& v, const CallArgs&) { return v.is_list() || v.is_dict() || v.is_string(); }},
      {"callable", [](const Value& v, const CallArgs&) { return v.kind == K::kCallable; }},
      {"sameas",
       [](const Value& v, const CallArgs& a) {
         Value o = a.get(0, "other");
         if (v.kind != o.kind) return false;
         if (v.kind == K::kNone || v.kind == K::kUndefined) return true;
         if (v.kind == K::kBool) return v.b == o.b;
         return equal(v, o) && (v.list == o.list && v.dict == o.dict);
       }},
      {"equalto", [](const Value& v, const CallArgs& a) { return equal(v, a.get(0, "other")); }},
      {"eq", [](const Value& v, const CallArgs& a) { return equal(v, a.get(0, "other")); }},
      {"==", [](const Value& v, const CallArgs& a) { return equal(v, a.get(0, "other")); }},
      {"ne", [](const Value& v, const CallArgs& a) { return !equal(v, a.get(0, "other")); }},
      {"!=", [](const Value& v, const CallArgs& a) { return !equal(v, a.get(0, "other")); }},
      {"lt", [](const Value& v, const CallArgs& a) { return less(v, a.get(0, "other")); }},
      {"gt", [](const Value& v, const CallArgs& a) { return less(a.get(0, "other"), v); }},
      {"le", [](const Value& v, const CallArgs& a) { return !less(a.get(0, "other"), v); }},
      {"ge", [](const Value& v, const CallArgs& a) { return !less(v, a.get(0, "other")); }},
      {"in", [](const Value& v, const CallArgs& a) { return contains(a.get(0, "seq"), v); }},
      {"divisibleby",
       [](const Value& v, const CallArgs& a) {
         int64_t d = need_int(a.get(0, "num"), "divisibleby");
         return d != 0 && (d == -1 || need_int(v, "divisibleby") % d == 0);  // INT64_MIN % -1 traps
       }},
      {"odd", [](const Value& v, const CallArgs&) { return need_int(v, "odd") % 2 != 0; }},
      {"even", [](const Value& v, const CallArgs&) { return need_int(v, "even") % 2 == 0; }},
      {"lower", [](const Value& v, const CallArgs&) { return v.is_string() && lower(v.s) == v.s; }},
      {"upper", [](const Value& v, const CallArgs&) { return v.is_string() && upper(v.s) == v.s; }},
  };
  return t;
}

}  // namespace

bool has_test(const std::string& name) {
  return tests().count(name) != 0;
}

bool apply_test(const std::string& name, const Value& operand, const CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) fail(fmt::format("unknown test '{}'", name));
  return it->second(operand, args);
}

// ---------------------------------------------------------------------------------------------------------
// Filters (`x | name(args)`).

namespace {

using FilterFn = Value (*)(const Value&, CallArgs&);

// An item's attribute for selectattr / map / sort / join(attribute=...); dotted paths walk nested dicts.
Value attribute_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t pos = 0;
  while (true) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (cur.is_undefined()) return cur;
    cur = get_item(cur, Value::string(part));
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

// selectattr / rejectattr / select / reject.
Value select(const Value& seq, CallArgs& a, bool by_attr, bool keep_if) {
  size_t next = 0;
  std::string attr;
  if (by_attr) attr = need_string(a.get(next++, "attribute"), "selectattr()");
  Value test_name = a.get(next++, "test");
  CallArgs test_args;
  for (size_t k = next; k < a.positional.size(); ++k) test_args.positional.push_back(a.positional[k]);
  List out;
  if (seq.is_none()) return Value::make_list();  // Jinja's select/map skip a falsy sequence (`if seq:`)
  for (const Value& item : iterate(seq)) {
    Value v = by_attr ? attribute_path(item, attr) : item;
    bool ok = test_name.is_undefined() ? v.truthy()
                                       : apply_test(need_string(test_name, "a test name"), v, test_args);
    if (ok == keep_if) out.push_back(item);
  }
  return Value::make_list(std::move(out));
}

// A float truncated toward zero, as Python's int(); NaN, infinities and values outside int64 (which Python
// would give as big integers) fail: converting them is undefined behaviour in C++.
int64_t float_to_int(double f) {
  if (!(f > -9223372036854775808.0 && f < 9223372036854775808.0))
    fail(fmt::format("cannot convert float {} to a 64-bit integer", Value::real(f).repr()));
  return static_cast<int64_t>(f);
}

Value to_int(const Value& v, const Value& dflt) {
  switch (v.kind) {
    case Value::Kind::kInt:
      return v;
    case Value::Kind::kBool:
      return Value::integer(v.b);
    case Value::Kind::kFloat:  // int(nan) is a ValueError, which jinja2's int filter turns into the default
      return std::isnan(v.f) ? dflt : Value::integer(float_to_int(v.f));
    case Value::Kind::kString: {
      std::string t = strip(v.s, Value::none(), true, true);
      try {
        size_t used = 0;
        long long x = std::stoll(t, &used, 10);
        if (used == t.size()) return Value::integer(x);
        double d = std::stod(t, &used);
        if (used == t.size()) return std::isnan(d) ? dflt : Value::integer(float_to_int(d));
      } catch (const std::logic_error&) {  // stoll / stod: not a number, or out of range
      }
      return dflt;
    }
    default:
      return dflt;
  }
}

// max / min: the first of the largest / smallest items (Jinja's order, strings compared as given).
Value extreme(const Value& seq, CallArgs& a, bool largest) {
  Value attr = a.get(1, "attribute");
  auto key = [&](const Value& x) { return attr.is_string() ? attribute_path(x, attr.s) : x; };
  List items = iterate(seq);
  if (items.empty()) return Value::undefined(largest ? "max(): empty sequence" : "min(): empty sequence");
  Value best = items[0];
  for (size_t k = 1; k < items.size(); ++k)
    if (largest ? less(key(best), key(items[k])) : less(key(items[k]), key(best))) best = items[k];
  return best;
}

std::string html_escape(const std::string& s) {
  std::string out;
  charge_bytes(s.size());
  for (char c : s) {
    if (c == '&' || c == '<' || c == '>' || c == '"' || c == '\'') charge_bytes(4);  // up to 5 bytes for 1
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> f = {
      {"trim", [](const Value& v,
                  CallArgs& a) { return Value::string(strip(v.str(), a.get(0, "chars"), true, true)); }},
      {"length",
       [](const Value& v, CallArgs&) {
         if (v.is_string()) return Value::integer(static_cast<int64_t>(utf8_length(v.s)));
         if (v.is_mapping()) return Value::integer(static_cast<int64_t>(v.dict->items.size()));
         // Lists without a copy: templates take `messages | length` once per message.
         if (v.is_list()) return Value::integer(static_cast<int64_t>(v.list->size()));
         return Value::integer(static_cast<int64_t>(iterate(v).size()));
       }},
      {"upper", [](const Value& v, CallArgs&) { return Value::string(upper(v.str())); }},
      {"lower", [](const Value& v, CallArgs&) { return Value::string(lower(v.str())); }},
      {"capitalize", [](const Value& v, CallArgs&) { return Value::string(capitalize(v.str())); }},
      {"title", [](const Value& v, CallArgs&) { return Value::string(title(v.str())); }},
      {"string", [](const Value& v, CallArgs&) { return Value::string(v.str()); }},
      {"safe", [](const Value& v, CallArgs&) { return v; }},
      {"escape", [](const Value& v, CallArgs&) { return Value::string(html_escape(v.str())); }},
      {"tojson",
       [](const Value& v, CallArgs& a) {
         // transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None,
         // sort_keys=False).
         Value indent = a.get(1, "indent");
         // A negative indent is Python's: newlines without indentation.
         int n = indent.kind == Value::Kind::kInt
                     ? static_cast<int>(std::clamp<int64_t>(indent.i, 0, INT32_MAX))
                     : -1;
         return Value::string(to_json(v, n, a.get(3, "sort_keys").truthy()));
       }},
      {"default",
       [](const Value& v, CallArgs& a) {
         bool boolean = a.get(1, "boolean").truthy();
         if (v.is_undefined() || (boolean && !v.truthy()))
           return a.get(0, "default_value", Value::string(""));
         return v;
       }},
      {"first",
       [](const Value& v, CallArgs&) {
         if (v.is_list())
           return v.list->empty() ? Value::undefined("first(): empty sequence") : v.list->front();
         List items = iterate(v);
         return items.empty() ? Value::undefined("first(): empty sequence") : items.front();
       }},
      {"last",
       [](const Value& v, CallArgs&) {
         if (v.is_list())
           return v.list->empty() ? Value::undefined("last(): empty sequence") : v.list->back();
         List items = iterate(v);
         return items.empty() ? Value::undefined("last(): empty sequence") : items.back();
       }},
      {"join",
       [](const Value& v, CallArgs& a) {
         std::string sep = a.get(0, "d", Value::string("")).str();
         Value attr = a.get(1, "attribute");
         std::string out;
         List items = iterate(v);
         for (size_t k = 0; k < items.size(); ++k) {
           charge_bytes(sep.size());  // the separator, once per item
           out += (k ? sep : "") + (attr.is_string() ? attribute_path(items[k], attr.s) : items[k]).str();
         }
         return Value::string(out);
       }},
      {"replace",
       [](const Value& v, CallArgs& a) {
         Value count = a.get(2, "count", Value::integer(-1));
         return Value::string(replace(v.str(), a.get(0, "old").str(), a.get(1, "new").str(),
                                      count.is_none() ? -1 : need_int(count, "replace")));
       }},
      {"selectattr", [](const Value& v, CallArgs& a) { return select(v, a, true, true); }},
      {"rejectattr", [](const Value& v, CallArgs& a) { return select(v, a, true, false); }},
      {"select", [](const Value& v, CallArgs& a) { return select(v, a, false, true); }},
      {"reject", [](const Value& v, CallArgs& a) { return select(v, a, false, false); }},
      {"map",
       [](const Value& v, CallArgs& a) {
         List out;
         Value attr = a.get(99, "attribute");
         if (v.is_none()) return Value::make_list();
         for (const Value& item : iterate(v)) {
           if (attr.is_string()) {
             Value x = attribute_path(item, attr.s);
             out.push_back(x.is_undefined() ? a.get(99, "default", x) : x);
           } else {
             CallArgs rest;
             for (size_t k = 1; k < a.positional.size(); ++k) rest.positional.push_back(a.positional[k]);
             out.push_back(apply_filter(need_string(a.get(0, "filter"), "map()"), item, rest));
           }
         }
         return Value::make_list(std::move(out));
       }},
      {"items",
       [](const Value& v, CallArgs&) {
         List out;
         if (v.is_mapping())
           for (const auto& [k, x] : v.dict->items) out.push_back(Value::make_tuple({v.dict->key(k), x}));
         else if (!v.is_undefined())
           fail(fmt::format("items expects a mapping, got {}", v.type_name()));
         return Value::make_list(std::move(out));
       }},
      {"list", [](const Value& v, CallArgs&) { return Value::make_list(iterate(v)); }},
      {"int", [](const Value& v, CallArgs& a) { return to_int(v, a.get(0, "default", Value::integer(0))); }},
      {"float",
       [](const Value& v, CallArgs& a) {
         if (v.is_number()) return Value::real(v.as_double());
         try {
           if (v.is_string()) return Value::real(std::stod(v.s));
         } catch (const std::exception&) {
         }
         return a.get(0, "default", Value::real(0.0));
       }},
      {"abs",
       [](const Value& v, CallArgs&) {
         if (v.kind == Value::Kind::kInt) {
           if (v.i == INT64_MIN) fail("integer overflow in abs (integers are 64-bit here)");
           return Value::integer(v.i < 0 ? -v.i : v.i);
         }
         if (v.kind == Value::Kind::kFloat) return Value::real(std::fabs(v.f));
         fail(fmt::format("abs expects a number, got {}", v.type_name()));
       }},
      {"reverse",
       [](const Value& v, CallArgs&) {
         if (v.is_string()) {
           List chars = iterate(v);
           std::string out;
           for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->s;
           return Value::string(out);
         }
         List items = iterate(v);
         std::reverse(items.begin(), items.end());
         return Value::make_list(std::move(items));
       }},
      {"sort",
       [](const Value& v, CallArgs& a) {
         List items = iterate(v);
         bool reverse = a.get(0, "reverse").truthy();
         Value attr = a.get(2, "attribute");
         auto key = [&](const Value& x) { return attr.is_string() ? attribute_path(x, attr.s) : x; };
         std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
           return reverse ? less(key(y), key(x)) : less(key(x), key(y));
         });
         return Value::make_list(std::move(items));
       }},
      {"dictsort",
       [](const Value& v, CallArgs& a) {
         if (!v.is_mapping()) fail(fmt::format("dictsort expects a mapping, got {}", v.type_name()));
         bool by_value = a.get(1, "by", Value::string("key")).str() == "value";
         bool reverse = a.get(2, "reverse").truthy();
         List out;
         for (const auto& [k, x] : v.dict->items) out.push_back(Value::make_tuple({v.dict->key(k), x}));
         // Jinja's default case_sensitive=False: strings compare lower-cased.
         auto key = [&](const Value& kv) {
           const Value& x = (*kv.list)[by_value ? 1 : 0];
           return x.is_string() ? Value::string(lower(x.s)) : x;
         };
         std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
           return reverse ? less(key(y), key(x)) : less(key(x), key(y));
         });
         return Value::make_list(std::move(out));
       }},
      {"max", [](const Value& v, CallArgs& a) { return extreme(v, a, true); }},
      {"min", [](const Value& v, CallArgs& a) { return extreme(v, a, false); }},
      {"unique",
       [](const Value& v, CallArgs&) {
         List out;
         for (const Value& x : iterate(v))
           if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equal(x, y); }))
             out.push_back(x);
         return Value::make_list(std::move(out));
       }},
      {"sum",
       [](const Value& v, CallArgs& a) {
         Value attr = a.get(0, "attribute");
         Value total = a.get(1, "start", Value::integer(0));
         for (const Value& x : iterate(v)) {
           Value y = attr.is_string() ? attribute_path(x, attr.s) : x;
           int64_t r = 0;
           if (total.kind == Value::Kind::kInt && y.kind == Value::Kind::kInt) {
             if (__builtin_add_overflow(total.i, y.i, &r))
               fail("integer overflow in sum (integers are 64-bit here)");
             total = Value::integer(r);
           } else
             total = Value::real(total.as_double() + y.as_double());
         }
         return total;
       }},
      {"indent",
       [](const Value& v, CallArgs& a) {
         Value w = a.get(0, "width", Value::integer(4));
         std::string pad;
         if (w.is_string()) {
           pad = w.s;
         } else {
           const int64_t width = std::max<int64_t>(need_int(w, "indent"), 0);  // Python: ' ' * -1 is ''
           charge_bytes(static_cast<uint64_t>(width));
           pad.assign(static_cast<size_t>(width), ' ');
         }
         bool first = a.get(1, "first").truthy(), blank = a.get(2, "blank").truthy();
         std::string s = v.str(), out;
         size_t pos = 0;
         bool first_line = true;
         while (pos <= s.size()) {
           size_t nl = s.find('\n', pos);
           std::string line = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
           if ((!first_line || first) && (blank || !line.empty())) {
             charge_bytes(pad.size());
             out += pad;
           }
           out += line;
           if (nl == std::string::npos) break;
           out += '\n';
           pos = nl + 1;
           first_line = false;
         }
         return Value::string(out);
       }},
  };
  return f;
}

}  // namespace

bool has_filter(const std::string& name) {
  return filters().count(name) != 0 || name == "d" || name == "count" || name == "e";
}

Value apply_filter(const std::string& name, const Value& operand, CallArgs& args) {
  RenderScope::Nest nest;  // `map` applies filters, which may be `map` again
  // Jinja's aliases.
  const std::string& real = name == "d"       ? "default"
                            : name == "count" ? "length"
                            : name == "e"     ? "escape"
                                              : name;
  auto it = filters().find(real);
  if (it == filters().end()) fail(fmt::format("unknown filter '{}'", name));
  return it->second(operand, args);
}

// ---------------------------------------------------------------------------------------------------------
// Global functions.

void add_global_functions(Dict& globals) {
  globals.set("range", Value::callable("range", [](CallArgs& a) {
                int64_t start = 0, stop, step = 1;
                if (a.positional.size() == 1) {
                  stop = need_int(a.positional[0], "range()");
                } else if (a.positional.size() >= 2) {
                  start = need_int(a.positional[0], "range()");
                  stop = need_int(a.positional[1], "range()");
                  if (a.positional.size() > 2) step = need_int(a.positional[2], "range()");
                } else {
                  fail("range() expects 1 to 3 arguments");
                }
                if (step == 0) fail("range() step must not be zero");
                // The length first (in unsigned arithmetic: stop - start may not fit an int64), then the
                // limit of jinja2's sandbox, which transformers renders in.
                const uint64_t abs_step =
                    step > 0 ? static_cast<uint64_t>(step) : static_cast<uint64_t>(-(step + 1)) + 1;
                uint64_t count = 0;
                if (step > 0 ? start < stop : stop < start)
                  count = ((step > 0 ? static_cast<uint64_t>(stop) - static_cast<uint64_t>(start)
                                     : static_cast<uint64_t>(start) - static_cast<uint64_t>(stop)) -
                           1) /
                              abs_step +
                          1;
                if (count > static_cast<uint64_t>(Limits::kRange))
                  fail(fmt::format("range() of {} items: more than the limit of {} (as in jinja2's sandbox)",
                                   count, Limits::kRange));
                List out;
                out.reserve(count);
                for (uint64_t j = 0; j < count; ++j)
                  out.push_back(Value::integer(static_cast<int64_t>(
                      static_cast<uint64_t>(start) + j * static_cast<uint64_t>(step))));  // mod 2**64
                return Value::make_list(std::move(out));
              }));
  auto from_keywords = [](CallArgs& a) {
    Dict d;
    for (const Value& p : a.positional)
      if (p.is_mapping())
        for (const auto& [k, v] : p.dict->items) {
          charge_bytes(k.size());
          d.set(k, v);
        }
    for (auto& [k, v] : a.keyword) d.set(k, v);
    return d;
  };
  globals.set("namespace", Value::callable("namespace", [from_keywords](CallArgs& a) {
                Value ns = Value::make_namespace(from_keywords(a));
                ns.dict->assignable = true;
                ns.depth = 1;  // its attributes may change: it cuts the nesting (see Value::depth)
                if (RenderScope* scope = RenderScope::current()) scope->adopt(ns.dict);
                return ns;
              }));
  globals.set("dict", Value::callable("dict", [from_keywords](CallArgs& a) {
                return Value::make_dict(from_keywords(a));
              }));
  // transformers' raise_exception: the template refuses the conversation with its own message.
  globals.set("raise_exception", Value::callable("raise_exception", [](CallArgs& a) -> Value {
                fail("the template refused the input (raise_exception): " + a.get(0, "message").str());
              }));
  // transformers' strftime_now: the current local date/time (Llama 3.1+ templates print "Today Date").
  globals.set("strftime_now", Value::callable("strftime_now", [](CallArgs& a) {
                std::string fmt = need_string(a.get(0, "format"), "strftime_now()");
                std::time_t now = std::time(nullptr);
                std::tm tm{};
                localtime_r(&now, &tm);
                char buf[256];
                size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
                return Value::string(std::string(buf, n));
              }));
}

}  // namespace primus::data::jinja
