// Fuzzes SFT data: the bytes are a JSONL file. Each line (at most 32) is read as a record by
// data/sft_sample.cpp, automatically and as the format its line number picks, the first samples are rendered
// into loss spans (render_sft_spans) through four templates (the ChatML fallback, a one-byte-per-role tiny
// template, and the real Llama 3 and Mixtral ones, which refuse some role orders) and tokenized with the
// ByteTokenizer; then the whole file is built into an SftDataset (data/sft_dataset.cpp: read, render,
// tokenize, truncate or drop, pack or pad, with the input's size picking seq_length and the options) and
// every row is read back through fill_row.
//
// The rule: a line is a sample with an assistant turn, or a ConfigError naming file:line; spans concatenate
// to the full render and alternate between loss and no loss; a dataset that builds has rows whose tokens,
// targets, positions and sample starts are consistent. Never a crash, undefined behaviour, a hang or an
// internal check failure (PRIMUS_CHECK throws primus::Error, which is not caught here).
//
// fuzz-sources: data/sft_sample.cpp data/sft_dataset.cpp data/tokenizer.cpp data/sentencepiece_tokenizer.cpp
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "data/chat_template.h"
#include "data/sft_dataset.h"
#include "data/sft_sample.h"
#include "data/tokenizer.h"
#include "fuzz_util.h"

namespace {

using namespace primus::data;
using primus::ByteTokenizer;

// Renders "u:<content>|a:<content>|": one byte per character with the ByteTokenizer.
const char* const kTinyTemplate =
    "{% for m in messages %}{{ m.role[0] }}:{{ m.content }}|{% endfor %}"
    "{% if add_generation_prompt %}a:{% endif %}";

std::string read_source_file(const std::string& relative) {
  std::ifstream in(std::string(PRIMUS_SOURCE_DIR) + "/" + relative, std::ios::binary);
  if (!in) __builtin_trap();
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Templates {
  std::vector<ChatTemplate> all;
  Templates() {
    all.push_back(chat_template_or_fallback(TokenizerChatConfig{}));
    all.push_back(ChatTemplate::parse(kTinyTemplate, "tiny.jinja"));
    all.push_back(ChatTemplate::parse(
        read_source_file("tests/data/chat_templates/meta-llama-Meta-Llama-3-8B-Instruct.jinja"), "llama3"));
    all.push_back(ChatTemplate::parse(
        read_source_file("tests/data/chat_templates/mistralai-Mixtral-8x7B-Instruct-v0.1.jinja"), "mixtral"));
  }
};

bool blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

void check_sample(const SftSample& s) {
  if (s.format == SftFormat::kAuto || s.messages.empty()) __builtin_trap();
  // A SQuAD record: its prompt loss-free, then " answer" as the loss; no other format has raw spans.
  if ((s.format == SftFormat::kSquad) != !s.raw.empty()) __builtin_trap();
  if (!s.raw.empty() && (s.raw.size() != 2 || s.raw[0].second || !s.raw[1].second || s.raw[1].first.empty() ||
                         s.raw[1].first[0] != ' '))
    __builtin_trap();
  bool assistant = false;
  for (const auto& m : s.messages) assistant = assistant || m.role == "assistant";
  if (!assistant) __builtin_trap();
}

void check_spans(const ChatTemplate& tmpl, const SftSample& s) {
  const ByteTokenizer tok;
  std::vector<TextSpan> spans;
  try {
    spans = render_sft_spans(tmpl, s.messages, "<s>", "</s>");
  } catch (const primus::ConfigError&) {
    return;  // raise_exception, or a template that is not prefix-stable for these roles
  }
  std::string joined;
  for (size_t k = 0; k < spans.size(); ++k) {
    if (spans[k].text.empty()) __builtin_trap();
    if (k > 0 && spans[k].loss == spans[k - 1].loss) __builtin_trap();
    joined += spans[k].text;
  }
  if (joined != apply_chat_template(tmpl, s.messages, false, "<s>", "</s>")) __builtin_trap();
  const SftTokens t = tokenize_sft_messages(tok, tmpl, s.messages, "<s>", "</s>", /*prepend_bos=*/1);
  const bool prepended = joined.empty() || joined[0] != '\x01';
  if (t.ids.size() != t.loss.size() || t.ids.size() != joined.size() + (prepended ? 1 : 0)) __builtin_trap();
  if (t.ids.front() != 1 || (prepended && t.loss.front() != 0)) __builtin_trap();
}

void check_dataset(const std::string& path, size_t size) {
  const ByteTokenizer tok;
  SftDatasetOptions o;
  o.paths = {path};
  o.seq_length = 2 + static_cast<int64_t>(size % 61);
  o.pack = (size / 61) % 2 == 0;
  o.overflow = (size / 122) % 2 == 0 ? SftOverflow::kTruncate : SftOverflow::kDrop;
  o.chat_template = (size / 244) % 2 == 0 ? kTinyTemplate : "";  // "": the ChatML fallback
  o.max_samples = static_cast<int64_t>((size / 488) % 4);        // 0: all
  o.tokenizer = &tok;
  try {
    const SftDataset ds(o);
    const int64_t seq = ds.seq_length();
    const auto& st = ds.stats();
    if (ds.num_samples() < 1 || st.samples < 1 || st.tokens < st.loss_tokens) __builtin_trap();
    std::vector<int32_t> tokens(static_cast<size_t>(seq)), targets(tokens.size()), positions(tokens.size()),
        starts(tokens.size());
    int64_t total = 0;
    for (int64_t r = 0; r < ds.num_samples(); ++r) {
      if (!ds.fill_row(r, tokens.data(), targets.data(), positions.data(), starts.data())) __builtin_trap();
      int64_t used = 0;
      for (const SftRowEntry& e : ds.row_layout(ds.row_of(r))) {
        if (e.start != used || e.length < 1) __builtin_trap();
        used += e.length;
      }
      if (used > seq) __builtin_trap();
      total += used;
      for (int64_t t = 0; t < seq; ++t) {
        const size_t i = static_cast<size_t>(t);
        if (tokens[i] < 0 || tokens[i] >= tok.vocab_size()) __builtin_trap();
        if (targets[i] != -1 && (t + 1 >= seq || targets[i] != tokens[i + 1])) __builtin_trap();
        if (starts[i] < 0 || starts[i] > t || positions[i] != t - starts[i]) __builtin_trap();
      }
    }
    if (total != st.tokens) __builtin_trap();
  } catch (const primus::ConfigError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Templates templates;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  static const SftFormat kFormats[] = {SftFormat::kAuto, SftFormat::kAlpaca, SftFormat::kMessages,
                                       SftFormat::kPromptResponse, SftFormat::kSquad};
  size_t rendered = 0;
  size_t from = 0;
  for (size_t line_no = 1; from <= text.size() && line_no <= 32; ++line_no) {
    size_t nl = text.find('\n', from);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = text.substr(from, nl - from);
    from = nl + 1;
    if (blank(line)) continue;
    for (SftFormat format : {SftFormat::kAuto, kFormats[line_no % 5]}) {
      try {
        const SftSample s = parse_sft_line(line, "fuzz.jsonl", line_no, format);
        check_sample(s);
        if (format == SftFormat::kAuto && rendered < 4) {
          ++rendered;
          for (const ChatTemplate& t : templates.all) check_spans(t, s);
        }
      } catch (const primus::ConfigError&) {
      }
    }
  }
  check_dataset(primus::fuzz::write_file("data.jsonl", data, size), size);
  return 0;
}
