#pragma once
// Supervised fine-tuning samples: JSONL records in Primus's SFT formats read into chat messages, and a sample
// rendered through the model's chat template into text spans that say which characters the loss is taken on
// (assistant-only loss). Tokenisation is the caller's: it tokenizes each span and gives its tokens the span's
// loss flag. See docs/posttrain.md ("Chat templates and loss masks").
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/chat_template.h"

namespace primus::data {

enum class SftFormat {
  kAuto,            // decided per record from its keys
  kAlpaca,          // {instruction, input?, output, system?}
  kMessages,        // OpenAI / ChatML: {messages: [{role, content}, ...]}
  kPromptResponse,  // {prompt, response | completion, system?}
  // SQuAD ({question, context?, answers: {text: [...]}}), Primus's `squad` / Megatron-Bridge's text: no chat
  // template, "Context: c Question: q Answer:" then " a" (the loss) and the end-of-sequence token.
  kSquad,
};

// "auto", "alpaca", "messages" (also "openai", "chatml"), "prompt_response", "squad" (also "bridge_squad");
// other names throw ConfigError.
SftFormat parse_sft_format(const std::string& name);
const char* sft_format_name(SftFormat format);

struct SftSample {
  SftFormat format = SftFormat::kAuto;  // the format the record was read as (never kAuto)
  std::vector<ChatMessage> messages;
  // A sample the chat template does not render (kSquad): its text as spans, without the end-of-sequence
  // token (tokenize_sft_sample appends the tokenizer's, as a loss token). Empty for every other format.
  std::vector<std::pair<std::string, bool>> raw;  // (text, loss)
};

// Reads one record. `where` ("file:line") prefixes errors, which name the keys the record has when its format
// cannot be told or a key is missing or of the wrong type.
SftSample parse_sft_record(const nlohmann::ordered_json& record, SftFormat format, const std::string& where);
// Parses one JSONL line (line_number is 1-based) and reads it as a record.
SftSample parse_sft_line(std::string_view line, const std::string& file, size_t line_number,
                         SftFormat format = SftFormat::kAuto);
// Every non-blank line of a JSONL file.
std::vector<SftSample> read_sft_jsonl(const std::string& path, SftFormat format = SftFormat::kAuto);

// A piece of a rendered sample; consecutive spans concatenate to the whole rendered text.
struct TextSpan {
  std::string text;
  bool loss = false;  // train on these characters (assistant content and its end-of-turn marker)
};

// Renders `messages` with `tmpl` (add_generation_prompt=false) and splits the text into spans. For each
// assistant message i the template renders messages[:i] with add_generation_prompt=true (P) and
// messages[:i+1] (F); F must start with P and the full render must start with F (the template is
// prefix-stable), else ConfigError names the message and what differed. The assistant turn's own text is F
// minus P; its loss span starts at the message content (as given, else with surrounding whitespace trimmed,
// as templates that `trim` print it; else the whole turn) and extends over the end-of-turn marker the
// template prints right after it (the next run of non-whitespace characters, e.g. <|eot_id|>, <|im_end|>,
// </s>), not over what follows the marker. Everything else (system and user turns, role headers, the
// generation prompt) is loss-free.
std::vector<TextSpan> render_sft_spans(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                                       const std::string& bos_token, const std::string& eos_token);
// A sample's spans: its raw spans when it has them (kSquad), else render_sft_spans of its messages.
std::vector<TextSpan> sft_sample_spans(const ChatTemplate& tmpl, const SftSample& sample,
                                       const std::string& bos_token, const std::string& eos_token);

// The template used for models whose tokenizer has none: ChatML, exactly the class-level default that
// transformers applied to tokenizers without a chat_template until v4.43 (so a model fine-tuned by Primus is
// prompted the way transformers users of that time prompted it). It is role-agnostic, prefix-stable, and ends
// each turn with <|im_end|>. On a tokenizer without ChatML's special tokens the markers are tokenized as
// ordinary text.
extern const char* const kFallbackChatTemplate;
// The tokenizer's template, else the fallback (origin "<fallback ChatML template>").
ChatTemplate chat_template_or_fallback(const TokenizerChatConfig& config);

}  // namespace primus::data
