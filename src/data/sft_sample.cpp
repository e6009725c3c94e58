#include "data/sft_sample.h"

#include <fstream>
#include <initializer_list>

#include "core/error.h"

namespace primus::data {

namespace {

const char* const kFormatHint =
    "one of: {\"messages\": [{\"role\", \"content\"}, ...]} (openai/chatml), "
    "{\"instruction\", \"input\"?, \"output\", \"system\"?} (alpaca), "
    "{\"prompt\", \"response\" | \"completion\", \"system\"?} (prompt/response), "
    "{\"question\", \"context\"?, \"answers\": {\"text\": [...]}} (squad)";

std::string keys_of(const nlohmann::ordered_json& record) {
  std::string out;
  for (auto it = record.begin(); it != record.end(); ++it) out += (out.empty() ? "" : ", ") + it.key();
  return out.empty() ? "none" : out;
}

[[noreturn]] void bad_record(const std::string& where, const nlohmann::ordered_json& record,
                             const std::string& what) {
  throw ConfigError(fmt::format("{}: {} (keys found: {})", where, what, keys_of(record)), kFormatHint);
}

// A string field; `required` false lets it be absent or null (read as empty).
std::string field(const nlohmann::ordered_json& record, const char* key, bool required,
                  const std::string& where, const char* format) {
  auto it = record.find(key);
  if (it == record.end() || it->is_null()) {
    if (required) bad_record(where, record, fmt::format("{} record without '{}'", format, key));
    return "";
  }
  if (!it->is_string())
    bad_record(where, record, fmt::format("'{}' must be a string, not {}", key, it->type_name()));
  return it->get<std::string>();
}

SftFormat detect(const nlohmann::ordered_json& record, const std::string& where) {
  if (record.contains("messages")) return SftFormat::kMessages;
  if (record.contains("instruction")) return SftFormat::kAlpaca;
  if (record.contains("prompt")) return SftFormat::kPromptResponse;
  bad_record(where, record, "cannot tell the SFT format of this record");
}

std::vector<ChatMessage> read_messages(const nlohmann::ordered_json& record, const std::string& where) {
  const auto& list = record["messages"];
  if (!list.is_array() || list.empty())
    bad_record(where, record, "'messages' must be a non-empty list of {\"role\", \"content\"} objects");
  std::vector<ChatMessage> out;
  for (size_t k = 0; k < list.size(); ++k) {
    const auto& m = list[k];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      bad_record(where, record, fmt::format("messages[{}] has no string 'role'", k));
    // A null content (an assistant turn that only calls tools) reads as empty text.
    if (m.contains("content") && !m["content"].is_string() && !m["content"].is_null())
      bad_record(where, record,
                 fmt::format("messages[{}].content must be a string, not {}", k, m["content"].type_name()));
    out.push_back({m["role"].get<std::string>(),
                   m.contains("content") && m["content"].is_string() ? m["content"].get<std::string>() : ""});
  }
  return out;
}

// The first of `keys` the record has (not null), else nullptr.
const nlohmann::ordered_json* first_of(const nlohmann::ordered_json& record,
                                       std::initializer_list<const char*> keys, const char** found) {
  for (const char* k : keys) {
    auto it = record.find(k);
    if (it != record.end() && !it->is_null()) {
      *found = k;
      return &*it;
    }
  }
  return nullptr;
}

// Primus's SquadFormatter (Megatron-Bridge's squad processor and its "{input} {output}" template): the
// question (or instruction / prompt), the context (or input), the first answer (answers.text[0], answers[0],
// or answer / output / response), each with spaces stripped at both ends.
void read_squad(const nlohmann::ordered_json& record, const std::string& where, SftSample& s) {
  // The first of `keys` as a string; absent: "" when `missing` is null, else an error naming `missing`.
  auto text = [&](std::initializer_list<const char*> keys, const char* missing) -> std::string {
    const char* key = nullptr;
    const nlohmann::ordered_json* v = first_of(record, keys, &key);
    if (!v) {
      if (missing) bad_record(where, record, fmt::format("squad record without '{}'", missing));
      return "";
    }
    if (!v->is_string())
      bad_record(where, record, fmt::format("'{}' must be a string, not {}", key, v->type_name()));
    return v->get<std::string>();
  };
  auto strip = [](std::string x) {
    x.erase(0, x.find_first_not_of(' '));
    x.erase(x.find_last_not_of(' ') + 1);
    return x;
  };
  const std::string question = strip(text({"question", "instruction", "prompt"}, "question"));
  const std::string context = strip(text({"context", "input"}, nullptr));
  std::string answer;
  auto answers = record.find("answers");
  if (answers != record.end() && !answers->is_null()) {
    const nlohmann::ordered_json& list =
        answers->is_object() && answers->contains("text") ? (*answers)["text"] : *answers;
    if (!list.is_array() || list.empty() || !list[0].is_string())
      bad_record(where, record,
                 "'answers' must be {\"text\": [string, ...]} or a list of strings, not empty");
    answer = list[0].get<std::string>();
  } else {
    answer = text({"answer", "output", "response"}, "answers");
  }
  answer = strip(answer);
  const std::string prompt = "Context: " + context + " Question: " + question + " Answer:";
  s.raw = {{prompt, false}, {" " + answer, true}};
  s.messages = {{"user", prompt}, {"assistant", answer}};
}

}  // namespace

SftFormat parse_sft_format(const std::string& name) {
  if (name == "auto") return SftFormat::kAuto;
  if (name == "alpaca") return SftFormat::kAlpaca;
  if (name == "messages" || name == "openai" || name == "chatml") return SftFormat::kMessages;
  if (name == "prompt_response") return SftFormat::kPromptResponse;
  if (name == "squad" || name == "bridge_squad") return SftFormat::kSquad;
  throw ConfigError(
      fmt::format("unknown SFT data format '{}' (expected auto, alpaca, messages, openai, chatml, "
                  "prompt_response or squad)",
                  name));
}

const char* sft_format_name(SftFormat format) {
  switch (format) {
    case SftFormat::kAuto:
      return "auto";
    case SftFormat::kAlpaca:
      return "alpaca";
    case SftFormat::kMessages:
      return "messages";
    case SftFormat::kPromptResponse:
      return "prompt_response";
    case SftFormat::kSquad:
      return "squad";
  }
  return "?";
}

SftSample parse_sft_record(const nlohmann::ordered_json& record, SftFormat format, const std::string& where) {
  if (!record.is_object())
    throw ConfigError(
        fmt::format("{}: an SFT record must be a JSON object, not {}", where, record.type_name()),
        kFormatHint);
  SftSample s;
  s.format = format == SftFormat::kAuto ? detect(record, where) : format;
  switch (s.format) {
    case SftFormat::kMessages:
      if (!record.contains("messages")) bad_record(where, record, "messages record without 'messages'");
      s.messages = read_messages(record, where);
      break;
    case SftFormat::kAlpaca: {
      std::string system = field(record, "system", false, where, "alpaca");
      std::string instruction = field(record, "instruction", true, where, "alpaca");
      std::string input = field(record, "input", false, where, "alpaca");
      std::string output = field(record, "output", true, where, "alpaca");
      if (!system.empty()) s.messages.push_back({"system", system});
      // Stanford Alpaca's own prompt puts the input after the instruction, separated by a blank line.
      s.messages.push_back({"user", input.empty() ? instruction : instruction + "\n\n" + input});
      s.messages.push_back({"assistant", output});
      break;
    }
    case SftFormat::kPromptResponse: {
      std::string system = field(record, "system", false, where, "prompt/response");
      std::string prompt = field(record, "prompt", true, where, "prompt/response");
      const char* answer_key = record.contains("response") ? "response" : "completion";
      if (!record.contains(answer_key))
        bad_record(where, record, "prompt record without 'response' or 'completion'");
      std::string answer = field(record, answer_key, true, where, "prompt/response");
      if (!system.empty()) s.messages.push_back({"system", system});
      s.messages.push_back({"user", prompt});
      s.messages.push_back({"assistant", answer});
      break;
    }
    case SftFormat::kSquad:
      read_squad(record, where, s);
      break;
    case SftFormat::kAuto:
      break;
  }
  bool has_assistant = false;
  for (const auto& m : s.messages) has_assistant = has_assistant || m.role == "assistant";
  if (!has_assistant) bad_record(where, record, "no assistant message: nothing to train on");
  return s;
}

SftSample parse_sft_line(std::string_view line, const std::string& file, size_t line_number,
                         SftFormat format) {
  std::string where = fmt::format("{}:{}", file, line_number);
  nlohmann::ordered_json record;
  try {
    record = nlohmann::ordered_json::parse(line);
  } catch (const nlohmann::ordered_json::exception& e) {
    throw ConfigError(fmt::format("{}: not valid JSON: {}", where, e.what()), kFormatHint);
  }
  return parse_sft_record(record, format, where);
}

std::vector<SftSample> read_sft_jsonl(const std::string& path, SftFormat format) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("cannot open SFT data file '{}'", path));
  std::vector<SftSample> out;
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    out.push_back(parse_sft_line(line, path, n, format));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Loss spans.

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string trimmed(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

// A short, single-line excerpt for error messages.
std::string excerpt(const std::string& s, size_t at) {
  std::string out = s.substr(at, 60);
  for (char& c : out)
    if (c == '\n') c = ' ';
  return "\"" + out + (s.size() > at + 60 ? "...\"" : "\"");
}

size_t mismatch_at(const std::string& a, const std::string& b) {
  size_t k = 0;
  while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
  return k;
}

// [begin, end) of the loss inside `turn`, the text an assistant message added.
std::pair<size_t, size_t> loss_range(const std::string& turn, const std::string& content) {
  size_t begin = std::string::npos, end = 0;
  if (!content.empty()) begin = turn.find(content);
  if (begin != std::string::npos) {
    end = begin + content.size();
  } else {
    std::string t = trimmed(content);
    begin = t.empty() ? std::string::npos : turn.find(t);
    if (begin == std::string::npos) {
      // The template rewrote the content (or it is empty): the whole turn is the model's output.
      begin = 0;
      end = turn.find_first_not_of(" \t\n\r\f\v") == std::string::npos ? 0 : turn.size();
      if (end == 0) return {0, 0};
      // Keep trailing whitespace after the last marker out of the loss, as below.
      while (end > 0 && is_space(turn[end - 1])) --end;
      return {begin, end};
    }
    end = begin + t.size();
  }
  // The end-of-turn marker: whitespace the template puts between content and marker, then the marker itself
  // (the next run of non-whitespace). What follows it (Qwen's "\n" after <|im_end|>) belongs to no turn's
  // output.
  size_t k = end;
  while (k < turn.size() && is_space(turn[k])) ++k;
  size_t m = k;
  while (m < turn.size() && !is_space(turn[m])) ++m;
  if (m > k) end = m;
  return {begin, end};
}

}  // namespace

std::vector<TextSpan> sft_sample_spans(const ChatTemplate& tmpl, const SftSample& sample,
                                       const std::string& bos_token, const std::string& eos_token) {
  if (sample.raw.empty()) return render_sft_spans(tmpl, sample.messages, bos_token, eos_token);
  std::vector<TextSpan> out;
  for (const auto& [text, loss] : sample.raw) out.push_back({text, loss});
  return out;
}

std::vector<TextSpan> render_sft_spans(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                                       const std::string& bos_token, const std::string& eos_token) {
  const std::string full = apply_chat_template(tmpl, messages, false, bos_token, eos_token);
  std::vector<TextSpan> spans;
  auto push = [&](size_t from, size_t to, bool loss) {
    if (to <= from) return;
    if (!spans.empty() && spans.back().loss == loss)
      spans.back().text.append(full, from, to - from);
    else
      spans.push_back({full.substr(from, to - from), loss});
  };
  size_t done = 0;  // characters of `full` already assigned to spans
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != "assistant") continue;
    std::vector<ChatMessage> before(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(i));
    std::vector<ChatMessage> through(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    const std::string prompt = apply_chat_template(tmpl, before, true, bos_token, eos_token);
    const std::string turn_end = apply_chat_template(tmpl, through, false, bos_token, eos_token);
    const std::string hint =
        "assistant-only loss needs a template whose render of a conversation prefix is a prefix of the whole "
        "render; split such conversations into one sample per assistant turn, or give the data a template "
        "that renders earlier turns unchanged";
    if (turn_end.compare(0, prompt.size(), prompt) != 0) {
      size_t at = mismatch_at(prompt, turn_end);
      throw ConfigError(
          fmt::format("{}: chat template is not prefix-stable at message {} (assistant): the "
                      "generation prompt render differs from the render with the assistant turn "
                      "at character {}: {} vs {}",
                      tmpl.origin(), i, at, excerpt(prompt, at), excerpt(turn_end, at)),
          hint);
    }
    if (full.compare(0, turn_end.size(), turn_end) != 0) {
      size_t at = mismatch_at(turn_end, full);
      throw ConfigError(
          fmt::format("{}: chat template is not prefix-stable at message {} (assistant): the "
                      "render of messages[:{}] is not the start of the whole conversation's render "
                      "(they differ at character {}: {} vs {})",
                      tmpl.origin(), i, i + 1, at, excerpt(turn_end, at), excerpt(full, at)),
          hint);
    }
    if (prompt.size() < done)
      throw ConfigError(fmt::format("{}: chat template is not prefix-stable at message {} (assistant): its "
                                    "generation prompt ends inside the previous assistant turn",
                                    tmpl.origin(), i),
                        hint);
    auto [b, e] = loss_range(turn_end.substr(prompt.size()), messages[i].content);
    push(done, prompt.size() + b, false);
    push(prompt.size() + b, prompt.size() + e, true);
    done = prompt.size() + e;
  }
  push(done, full.size(), false);
  std::string joined;
  for (const auto& s : spans) joined += s.text;
  PRIMUS_CHECK(joined == full, "SFT spans do not concatenate to the rendered sample");
  return spans;
}

const char* const kFallbackChatTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + "
    "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

ChatTemplate chat_template_or_fallback(const TokenizerChatConfig& config) {
  if (!config.chat_template.empty()) return ChatTemplate::parse(config.chat_template, config.origin);
  return ChatTemplate::parse(kFallbackChatTemplate, "<fallback ChatML template>");
}

}  // namespace primus::data
