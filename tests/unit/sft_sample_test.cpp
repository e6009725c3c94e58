// Tests of SFT samples (src/data/sft_sample.h): the JSONL formats and their errors, and the loss spans of
// samples rendered through the real chat templates in tests/data/chat_templates.
#include "data/sft_sample.h"
#include "config_test_util.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "data_test_util.h"

namespace primus::data {
namespace {

std::string read_template(const std::string& name) {
  auto path = std::filesystem::path(__FILE__).parent_path().parent_path() / "data" / "chat_templates" /
              (name + ".jinja");
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ChatTemplate real_template(const std::string& name) {
  return ChatTemplate::parse(read_template(name), name);
}

using primus::config::testing::config_error_of;

// ---------------------------------------------------------------------------------------------------------------
// Formats.

TEST(SftSample, AlpacaJoinsInstructionAndInput) {
  auto s = parse_sft_line(R"({"instruction": "Translate", "input": "chat", "output": "cat"})", "a.jsonl", 1);
  EXPECT_EQ(s.format, SftFormat::kAlpaca);
  ASSERT_EQ(s.messages.size(), 2u);
  EXPECT_EQ(s.messages[0].role, "user");
  EXPECT_EQ(s.messages[0].content, "Translate\n\nchat");
  EXPECT_EQ(s.messages[1].role, "assistant");
  EXPECT_EQ(s.messages[1].content, "cat");

  auto no_input = parse_sft_line(
      R"({"instruction": "Say hi", "input": "", "output": "hi", "system": "Be nice"})", "a.jsonl", 2);
  ASSERT_EQ(no_input.messages.size(), 3u);
  EXPECT_EQ(no_input.messages[0].role, "system");
  EXPECT_EQ(no_input.messages[0].content, "Be nice");
  EXPECT_EQ(no_input.messages[1].content, "Say hi");
}

TEST(SftSample, MessagesAndPromptResponse) {
  auto m = parse_sft_line(
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                       {"role": "assistant", "content": "A"}]})",
      "m.jsonl", 1);
  EXPECT_EQ(m.format, SftFormat::kMessages);
  ASSERT_EQ(m.messages.size(), 3u);
  EXPECT_EQ(m.messages[2].role, "assistant");
  EXPECT_EQ(m.messages[2].content, "A");

  auto pr = parse_sft_line(R"({"prompt": "2+2?", "response": "4"})", "p.jsonl", 1);
  EXPECT_EQ(pr.format, SftFormat::kPromptResponse);
  ASSERT_EQ(pr.messages.size(), 2u);
  EXPECT_EQ(pr.messages[0].content, "2+2?");
  EXPECT_EQ(pr.messages[1].content, "4");
  auto pc = parse_sft_line(R"({"prompt": "Q", "completion": "C", "system": "S"})", "p.jsonl", 2);
  ASSERT_EQ(pc.messages.size(), 3u);
  EXPECT_EQ(pc.messages[2].content, "C");

  // A forced format reads a record that auto-detection would read otherwise.
  EXPECT_EQ(parse_sft_format("chatml"), SftFormat::kMessages);
  EXPECT_EQ(parse_sft_format("openai"), SftFormat::kMessages);
  EXPECT_EQ(parse_sft_format("prompt_response"), SftFormat::kPromptResponse);
  EXPECT_THROW(parse_sft_format("sharegpt"), ConfigError);
}

// Primus's SQuAD formatter (Megatron-Bridge's text): "Context: c Question: q Answer:" loss-free, then " a" as
// the loss, every field stripped of spaces, the first answer of several; no chat template renders it.
TEST(SftSample, SquadRecordsAsPrimusFormatsThem) {
  EXPECT_EQ(parse_sft_format("squad"), SftFormat::kSquad);
  EXPECT_EQ(parse_sft_format("bridge_squad"), SftFormat::kSquad);
  const std::string rec =
      R"({"id": "5733be", "title": "Notre_Dame", "context": " The Grotto is a replica. ",)"
      R"( "question": "What is the Grotto? ", "answers": {"text": [" a replica", "replica"],)"
      R"( "answer_start": [16, 18]}})";
  SftSample s = parse_sft_line(rec, "d.jsonl", 1, SftFormat::kSquad);
  EXPECT_EQ(s.format, SftFormat::kSquad);
  using Raw = std::vector<std::pair<std::string, bool>>;
  EXPECT_EQ(s.raw, (Raw{{"Context: The Grotto is a replica. Question: What is the Grotto? Answer:", false},
                        {" a replica", true}}));
  const ChatTemplate tmpl = real_template("meta-llama-Llama-3.1-8B-Instruct");  // unused for a raw sample
  const std::vector<TextSpan> spans = sft_sample_spans(tmpl, s, "<|begin_of_text|>", "<|eot_id|>");
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[1].text, " a replica");
  EXPECT_TRUE(spans[1].loss);
  EXPECT_FALSE(spans[0].loss);
  // The other spellings Primus reads: answers as a list, answer / output, instruction and input.
  s = parse_sft_line(R"({"question": "q", "context": "c", "answers": ["x", "y"]})", "d.jsonl", 2,
                     SftFormat::kSquad);
  EXPECT_EQ(s.raw, (Raw{{"Context: c Question: q Answer:", false}, {" x", true}}));
  s = parse_sft_line(R"({"instruction": "q", "input": "c", "output": "z"})", "d.jsonl", 3, SftFormat::kSquad);
  EXPECT_EQ(s.raw, (Raw{{"Context: c Question: q Answer:", false}, {" z", true}}));
  s = parse_sft_line(R"({"question": "q", "answer": "w"})", "d.jsonl", 4, SftFormat::kSquad);
  EXPECT_EQ(s.raw, (Raw{{"Context:  Question: q Answer:", false}, {" w", true}}));
  // Errors name the line and the missing or bad key.
  EXPECT_NE(config_error_of([] {
              parse_sft_line(R"({"context": "c", "answers": ["x"]})", "d.jsonl", 5, SftFormat::kSquad);
            }).find("d.jsonl:5: squad record without 'question'"),
            std::string::npos);
  EXPECT_NE(config_error_of([] {
              parse_sft_line(R"({"question": "q", "answers": {"text": []}})", "d.jsonl", 6,
                             SftFormat::kSquad);
            }).find("'answers' must be"),
            std::string::npos);
  EXPECT_NE(config_error_of([] {
              parse_sft_line(R"({"question": "q", "context": "c"})", "d.jsonl", 7, SftFormat::kSquad);
            }).find("squad record without 'answers'"),
            std::string::npos);
}

TEST(SftSample, BadLinesNameFileLineAndKeys) {
  EXPECT_EQ(config_error_of([] { parse_sft_line(R"({"text": "x", "id": 3})", "data/train.jsonl", 7); }),
            "data/train.jsonl:7: cannot tell the SFT format of this record (keys found: text, id)");
  EXPECT_EQ(config_error_of([] { parse_sft_line(R"({"instruction": "x", "input": "y"})", "d.jsonl", 2); }),
            "d.jsonl:2: alpaca record without 'output' (keys found: instruction, input)");
  EXPECT_EQ(config_error_of([] { parse_sft_line(R"({"prompt": "x", "answer": "y"})", "d.jsonl", 3); }),
            "d.jsonl:3: prompt record without 'response' or 'completion' (keys found: prompt, answer)");
  EXPECT_EQ(config_error_of(
                [] { parse_sft_line(R"({"messages": [{"role": "user", "content": "x"}]})", "d.jsonl", 4); }),
            "d.jsonl:4: no assistant message: nothing to train on (keys found: messages)");
  EXPECT_EQ(config_error_of(
                [] { parse_sft_line(R"({"messages": [{"role": "user", "content": 5}]})", "d.jsonl", 5); }),
            "d.jsonl:5: messages[0].content must be a string, not number (keys found: messages)");
  EXPECT_EQ(config_error_of([] { parse_sft_line(R"({"instruction": ["x"], "output": "y"})", "d.jsonl", 6); }),
            "d.jsonl:6: 'instruction' must be a string, not array (keys found: instruction, output)");
  EXPECT_EQ(config_error_of([] { parse_sft_line("[1, 2]", "d.jsonl", 8); }),
            "d.jsonl:8: an SFT record must be a JSON object, not array");
  std::string bad_json = config_error_of([] { parse_sft_line(R"({"prompt": )", "d.jsonl", 9); });
  EXPECT_EQ(bad_json.rfind("d.jsonl:9: not valid JSON: ", 0), 0u) << bad_json;
}

TEST(SftSample, ReadsJsonlSkippingBlankLinesAndCountingThem) {
  data_test::ScratchDir dir;
  std::string path = dir.path("train.jsonl");
  {
    std::ofstream out(path);
    out << R"({"prompt": "a", "response": "b"})"
        << "\n\n"
        << R"({"instruction": "c", "output": "d"})"
        << "\n"
        << R"({"messages": [{"role": "user", "content": "e"}, {"role": "assistant", "content": "f"}]})"
        << "\n";
  }
  auto samples = read_sft_jsonl(path);
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples[0].format, SftFormat::kPromptResponse);
  EXPECT_EQ(samples[1].format, SftFormat::kAlpaca);
  EXPECT_EQ(samples[2].format, SftFormat::kMessages);
  {
    std::ofstream out(path, std::ios::app);
    out << R"({"question": "g"})"
        << "\n";
  }
  EXPECT_EQ(config_error_of([&] { read_sft_jsonl(path); }),
            path + ":5: cannot tell the SFT format of this record (keys found: question)");
  EXPECT_THROW(read_sft_jsonl(dir.path("missing.jsonl")), ConfigError);
}

// ---------------------------------------------------------------------------------------------------------------
// Loss spans.

std::vector<ChatMessage> two_turns() {
  return {{"system", "You are a helpful assistant"},
          {"user", "Hello"},
          {"assistant", "Hi there"},
          {"user", "Who are you"},
          {"assistant", "  I am fine  "}};
}

void expect_spans(const std::vector<TextSpan>& got, const std::vector<TextSpan>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k].text, want[k].text) << "span " << k;
    EXPECT_EQ(got[k].loss, want[k].loss) << "span " << k;
  }
}

TEST(SftSample, Llama3LossOnAssistantContentAndEotId) {
  for (const char* model : {"meta-llama-Meta-Llama-3-8B-Instruct", "meta-llama-Llama-3.1-8B-Instruct"}) {
    SCOPED_TRACE(model);
    auto spans = render_sft_spans(real_template(model), two_turns(), "<|begin_of_text|>", "<|eot_id|>");
    std::string system =
        std::string(model).find("3.1") != std::string::npos
            ? "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are a helpful "
              "assistant"
            : "You are a helpful assistant";
    // The template trims content, so the loss starts at the trimmed text.
    expect_spans(spans,
                 {{"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" + system +
                       "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_"
                       "id|>assistant<|end_header_id|>\n\n",
                   false},
                  {"Hi there<|eot_id|>", true},
                  {"<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>"
                   "assistant<|end_header_id|>\n\n",
                   false},
                  {"I am fine<|eot_id|>", true}});
  }
}

TEST(SftSample, QwenLossStopsAtImEndNotTheNewlineAfterIt) {
  auto spans = render_sft_spans(real_template("Qwen-Qwen2.5-7B-Instruct"), two_turns(), "", "<|im_end|>");
  expect_spans(
      spans, {{"<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>"
               "\n<|im_start|>assistant\n",
               false},
              {"Hi there<|im_end|>", true},
              {"\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n", false},
              {"  I am fine  <|im_end|>", true},
              {"\n", false}});
}

TEST(SftSample, MistralDeepSeekAndFallbackSpans) {
  // Mistral v1 prints the content as given after a space; the loss takes it whole, then </s>.
  auto mistral =
      render_sft_spans(real_template("mistralai-Mistral-7B-Instruct-v0.2"), two_turns(), "<s>", "</s>");
  expect_spans(mistral, {{"<s> [INST] You are a helpful assistant\n\nHello [/INST] ", false},
                         {"Hi there</s>", true},
                         {" [INST] Who are you [/INST] ", false},
                         {"  I am fine  </s>", true}});
  auto mixtral = render_sft_spans(real_template("mistralai-Mixtral-8x7B-Instruct-v0.1"),
                                  {{"user", "Hello"}, {"assistant", "Hi"}}, "<s>", "</s>");
  expect_spans(mixtral, {{"<s>[INST] Hello [/INST]", false}, {"Hi</s>", true}});
  auto deepseek = render_sft_spans(real_template("deepseek-ai-DeepSeek-V3.1"), two_turns(),
                                   "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>");
  expect_spans(
      deepseek,
      {{"<｜begin▁of▁sentence｜>You are a helpful assistant<｜User｜>Hello<｜Assistant｜></think>", false},
       {"Hi there<｜end▁of▁sentence｜>", true},
       {"<｜User｜>Who are you<｜Assistant｜></think>", false},
       {"  I am fine  <｜end▁of▁sentence｜>", true}});
  auto fallback = render_sft_spans(chat_template_or_fallback(TokenizerChatConfig{}),
                                   {{"user", "Hello"}, {"assistant", "Hi"}}, "", "");
  expect_spans(fallback, {{"<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", false},
                          {"Hi<|im_end|>", true},
                          {"\n", false}});
}

TEST(SftSample, Qwen3SingleTurnKeepsTheEmptyThinkBlockOutOfTheLoss) {
  auto spans = render_sft_spans(real_template("Qwen-Qwen3-0.6B"), {{"user", "Hi"}, {"assistant", "Hello"}},
                                "", "<|im_end|>");
  expect_spans(spans,
               {{"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", false},
                {"Hello<|im_end|>", true},
                {"\n", false}});
}

TEST(SftSample, TemplatesThatAreNotPrefixStableAreRefused) {
  // Qwen 3 prints an empty think block only on assistant turns after the last user message, so an earlier
  // turn renders differently once the conversation goes on.
  std::string qwen3 = config_error_of(
      [] { render_sft_spans(real_template("Qwen-Qwen3-0.6B"), two_turns(), "", "<|im_end|>"); });
  EXPECT_NE(qwen3.find(
                "Qwen-Qwen3-0.6B: chat template is not prefix-stable at message 2 (assistant): the render of "
                "messages[:3] is not the start of the whole conversation's render"),
            std::string::npos)
      << qwen3;
  // A generation prompt that the assistant turn does not start with.
  auto odd = ChatTemplate::parse(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<bot>{% "
      "endif %}",
      "odd.jinja");
  std::string gen = config_error_of([&] {
    render_sft_spans(odd, {{"user", "a"}, {"assistant", "b"}}, "", "");
  });
  EXPECT_NE(
      gen.find("odd.jinja: chat template is not prefix-stable at message 1 (assistant): the generation "
               "prompt render differs from the render with the assistant turn at character 8: \"bot>\" vs "
               "\"assistant>b\""),
      std::string::npos)
      << gen;
}

TEST(SftSample, SpansConcatenateToTheFullRender) {
  for (const char* model : {"meta-llama-Llama-3.1-8B-Instruct", "Qwen-Qwen2.5-7B-Instruct",
                            "mistralai-Mistral-Nemo-Instruct-2407", "deepseek-ai-DeepSeek-V3.1"}) {
    SCOPED_TRACE(model);
    auto tmpl = real_template(model);
    std::vector<ChatMessage> msgs = {{"user", "Hello"}, {"assistant", "Hi there"}};
    std::string joined;
    size_t loss_spans = 0;
    for (const auto& s : render_sft_spans(tmpl, msgs, "<s>", "</s>")) {
      joined += s.text;
      loss_spans += s.loss;
    }
    EXPECT_EQ(joined, apply_chat_template(tmpl, msgs, false, "<s>", "</s>"));
    EXPECT_EQ(loss_spans, 1u);
  }
}

}  // namespace
}  // namespace primus::data
