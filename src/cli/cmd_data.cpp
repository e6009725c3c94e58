// `primus data <command>`: data preparation, as Megatron's tools do it.
//   primus data preprocess --input corpus.jsonl --output-prefix out/corpus --tokenizer-type
//   HuggingFaceTokenizer
//                          --tokenizer-model tokenizer.json [--json-keys text] [--workers 4] [--append-eod]
//   primus data tokenize --tokenizer-model tokenizer.json [--text S | stdin] [--decode] [--jsonl]
//   primus data train-tokenizer --input corpus --vocab-size 4096 --output dir/
//   primus data inspect PREFIX [--show N] [--tokenizer-model ...]
//   primus data sft-wordnet --output FILE.jsonl [--wordnet-dir /usr/share/wordnet] [--max N] [--seed S]
//   primus data sft-inspect --data FILE.jsonl [--tokenizer-model ...] [--seq-length N] [--sample I] [--pack]
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli_context.h"
#include "core/error.h"
#include "data/bpe_trainer.h"
#include "data/document_reader.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "data/sft_dataset.h"
#include "data/tokenizer.h"
#include "data/tokenizer_files.h"
#include "data/wordnet_sft.h"

namespace primus::cli {
namespace {

struct TokenizerArgs {
  std::string type, model, vocab_file, merge_file;
  int64_t vocab_size = 0;
};

void add_tokenizer_options(CLI::App* app, TokenizerArgs& t) {
  app->add_option("--tokenizer-type,--tokenizer_type", t.type,
                  "HuggingFaceTokenizer | GPT2BPETokenizer | SentencePieceTokenizer | Llama2Tokenizer | "
                  "NullTokenizer | ByteTokenizer | ... (default: from the files given)");
  app->add_option("--tokenizer-model,--tokenizer_model", t.model,
                  "tokenizer.json, tokenizer.model, or a directory holding one");
  app->add_option("--vocab-file,--vocab_file", t.vocab_file, "GPT2BPETokenizer: vocab.json");
  app->add_option("--merge-file,--merge_file", t.merge_file, "GPT2BPETokenizer: merges.txt");
  app->add_option("--vocab-size,--vocab_size", t.vocab_size, "NullTokenizer: number of ids");
}

std::unique_ptr<Tokenizer> build_tokenizer(const TokenizerArgs& a) {
  TokenizerSpec s;
  s.type = a.type;
  s.model = a.model;
  s.vocab_file = a.vocab_file;
  s.merge_file = a.merge_file;
  s.vocab_size = a.vocab_size;
  if (s.type.empty()) {
    if (!a.vocab_file.empty()) {
      s.type = "GPT2BPETokenizer";
    } else if (a.vocab_size > 0 && a.model.empty()) {
      s.type = "NullTokenizer";
    } else if (!a.model.empty()) {
      const TokenizerFiles f = find_tokenizer_files(a.model);
      s.type = f.kind == TokenizerFiles::kSentencePiece     ? "SentencePieceTokenizer"
               : f.kind == TokenizerFiles::kGpt2VocabMerges ? "GPT2BPETokenizer"
                                                            : "HuggingFaceTokenizer";
    } else {
      s.type = "ByteTokenizer";
    }
  }
  return make_tokenizer(s);
}

std::string read_all(std::istream& in) {
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string json_text(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<int32_t> parse_ids(const std::string& text) {
  // A JSON array, or ids separated by spaces / commas.
  std::vector<int32_t> ids;
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    try {
      for (const auto& v : nlohmann::json::parse(text)) ids.push_back(v.get<int32_t>());
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError(fmt::format("--decode: input is not a JSON array of ids: {}", e.what()));
    }
    return ids;
  }
  std::string tok;
  std::string norm = text;
  std::replace(norm.begin(), norm.end(), ',', ' ');
  std::istringstream ss(norm);
  while (ss >> tok) {
    try {
      ids.push_back(std::stoi(tok));
    } catch (...) {
      throw ConfigError(fmt::format("--decode: '{}' is not a token id", tok));
    }
  }
  return ids;
}

std::string ids_json(const std::vector<int32_t>& ids) {
  return fmt::format("[{}]", fmt::join(ids, ","));
}

// ---------------------------------------------------------------------------------------------------------------
struct TokenizeArgs {
  TokenizerArgs tok;
  std::string text;
  bool has_text = false, decode = false, jsonl = false, no_special = false, skip_special = false,
       info = false;
};

int run_tokenize(const TokenizeArgs& a) {
  std::unique_ptr<Tokenizer> tok = build_tokenizer(a.tok);
  if (a.info) {
    nlohmann::ordered_json j;
    j["name"] = tok->name();
    j["vocab_size"] = tok->vocab_size();
    j["eod_id"] = tok->eod_id();
    j["bos_id"] = tok->bos_id();
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  const bool add_special = !a.no_special;
  if (a.jsonl) {
    // One JSON value per input line: a string to encode, or (with --decode) an array of ids.
    std::string line;
    std::string out;
    int64_t n = 0;
    while (std::getline(std::cin, line)) {
      ++n;
      if (line.empty()) continue;
      nlohmann::json v;
      try {
        v = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw ConfigError(fmt::format("stdin line {}: not JSON: {}", n, e.what()));
      }
      if (a.decode) {
        if (!v.is_array())
          throw ConfigError(fmt::format("stdin line {}: --decode expects an array of ids", n));
        out += json_text(tok->decode(v.get<std::vector<int32_t>>(), a.skip_special)) + "\n";
      } else {
        if (!v.is_string()) throw ConfigError(fmt::format("stdin line {}: expected a JSON string", n));
        out += ids_json(tok->encode(v.get<std::string>(), add_special)) + "\n";
      }
      if (out.size() > (1 << 20)) {
        std::fwrite(out.data(), 1, out.size(), stdout);
        out.clear();
      }
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  const std::string input = a.has_text ? a.text : read_all(std::cin);
  if (a.decode) {
    const std::string text = tok->decode(parse_ids(input), a.skip_special);
    std::fwrite(text.data(), 1, text.size(), stdout);
    if (isatty(1)) std::fputc('\n', stdout);
    return 0;
  }
  std::printf("%s\n", ids_json(tok->encode(input, add_special)).c_str());
  return 0;
}

void attach_tokenize(CLI::App* parent, CliContext& ctx) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* app = parent->add_subcommand("tokenize", "Print the token ids of a text as JSON (or decode ids)");
  add_tokenizer_options(app, a->tok);
  app->add_option("--text", a->text, "Text to encode (default: all of stdin)");
  app->add_flag("--decode", a->decode, "Decode ids (a JSON array or numbers) back to text");
  app->add_flag(
      "--jsonl", a->jsonl,
      "Batch mode: each stdin line is a JSON string (or with --decode a JSON array); one result per "
      "line");
  app->add_flag("--no-special-tokens", a->no_special,
                "Encode without the special tokens the tokenizer adds (HF add_special_tokens=False)");
  app->add_flag("--skip-special-tokens", a->skip_special, "Decode without special tokens");
  app->add_flag("--info", a->info, "Print the tokenizer's name, size, EOD and BOS ids as JSON");
  app->callback([a, app, &ctx] {
    a->has_text = app->count("--text") > 0;
    ctx.action = [a] { return run_tokenize(*a); };
  });
}

// ---------------------------------------------------------------------------------------------------------------
std::string mb(double bytes) {
  return fmt::format("{:.1f} MB", bytes / 1e6);
}
std::string count(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}
std::string duration(double s) {
  if (s < 60) return fmt::format("{:.0f}s", s);
  return fmt::format("{}m{:02d}s", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
}

struct PreprocessArgs {
  TokenizerArgs tok;
  PreprocessOptions opt;
  std::string format = "auto";
  bool no_special = false, split_sentences = false, keep_newlines = false, keep_sequential = false,
       quiet = false;
  int partitions = 1;
  std::string lang;
  int64_t log_interval = 0;
};

int run_preprocess(PreprocessArgs& a) {
  if (a.split_sentences)
    throw ConfigError("--split-sentences is not supported (documents are tokenized whole, one sequence each)",
                      "drop --split-sentences; the GPT dataset does not need sentence splits");
  if (a.partitions != 1)
    throw ConfigError("--partitions: only 1 is supported (use --workers for parallelism)");
  a.opt.format = parse_input_format(a.format);
  a.opt.add_special_tokens = !a.no_special;
  std::unique_ptr<Tokenizer> tok = build_tokenizer(a.tok);
  const bool tty = isatty(2) != 0;
  double last_print = -1;
  auto progress = [&](const PreprocessProgress& p) {
    if (a.quiet) return;
    const double interval = tty ? 0.25 : 5.0;
    if (!p.final && p.seconds - last_print < interval) return;
    last_print = p.seconds;
    const double secs = std::max(p.seconds, 1e-9);
    std::string line =
        fmt::format("preprocess: {} docs | {}", count(p.docs), mb(static_cast<double>(p.bytes)));
    if (p.total_bytes > 0)
      line += fmt::format(" / {} ({:.0f}%)", mb(static_cast<double>(p.total_bytes)),
                          100.0 * static_cast<double>(p.bytes) / static_cast<double>(p.total_bytes));
    line += fmt::format(" | {:.0f} docs/s | {:.2f} MB/s", static_cast<double>(p.docs) / secs,
                        static_cast<double>(p.bytes) / 1e6 / secs);
    if (p.total_bytes > 0 && p.bytes > 0 && !p.final)
      line += fmt::format(" | ETA {}", duration(secs * static_cast<double>(p.total_bytes - p.bytes) /
                                                static_cast<double>(p.bytes)));
    if (tty) {
      std::fprintf(stderr, "\r%-110s%s", line.c_str(), p.final ? "\n" : "");
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  };
  const PreprocessStats st = preprocess(*tok, a.opt, progress);
  const double secs = std::max(st.seconds, 1e-9);
  std::string outputs;
  for (const std::string& o : st.outputs)
    outputs += fmt::format("{}{}.{{bin,idx}}", outputs.empty() ? "" : ", ", o);
  std::printf("preprocess: done in %s\n", duration(st.seconds).c_str());
  std::printf("  input     %s (%s, %s)\n", a.opt.input.c_str(), input_format_name(st.format),
              mb(static_cast<double>(st.input_bytes)).c_str());
  std::printf("  tokenizer %s, %s\n", tok->name().c_str(),
              token_dtype_name(optimal_token_dtype(tok->vocab_size())));
  std::printf("  documents %s, %s of them empty (recorded as empty documents, as Megatron does)\n",
              count(st.docs + st.skipped).c_str(), count(st.skipped).c_str());
  std::printf("  tokens    %s (%.1f per document, %.2f bytes of text per token)\n", count(st.tokens).c_str(),
              st.docs > 0 ? static_cast<double>(st.tokens) / static_cast<double>(st.docs) : 0.0,
              st.tokens > 0 ? static_cast<double>(st.text_bytes) / static_cast<double>(st.tokens) : 0.0);
  std::printf("  speed     %.2f MB/s, %.0f docs/s, %.0f tokens/s with %d worker(s)\n",
              static_cast<double>(st.input_bytes) / 1e6 / secs, static_cast<double>(st.docs) / secs,
              static_cast<double>(st.tokens) / secs, a.opt.workers);
  if (st.repaired > 0)
    std::printf("  note      %s invalid UTF-8 sequences were replaced by U+FFFD\n",
                count(st.repaired).c_str());
  std::printf("  output    %s\n", outputs.c_str());
  return 0;
}

void attach_preprocess(CLI::App* parent, CliContext& ctx) {
  auto a = std::make_shared<PreprocessArgs>();
  CLI::App* app = parent->add_subcommand(
      "preprocess", "Tokenize a corpus into Megatron indexed datasets (<prefix>_<key>_document.bin/.idx)");
  app->add_option("--input", a->opt.input, "Input: a jsonl / text / fortune file, or a directory of them")
      ->required();
  app->add_option("--input-format", a->format, "auto | jsonl | txt (one document per line) | fortune")
      ->capture_default_str();
  app->add_option("--json-keys", a->opt.json_keys, "jsonl keys to tokenize (one dataset each)")
      ->capture_default_str();
  app->add_option("--output-prefix", a->opt.output_prefix, "Output prefix (Megatron's naming follows)")
      ->required();
  add_tokenizer_options(app, a->tok);
  app->add_option("--workers", a->opt.workers, "Tokenizer threads (the output does not depend on it)")
      ->capture_default_str();
  app->add_flag("--append-eod", a->opt.append_eod, "Append the end-of-document token to every document");
  app->add_flag("--no-special-tokens", a->no_special,
                "Do not add the tokenizer's special tokens (HF add_special_tokens=False)");
  app->add_flag("--split-sentences", a->split_sentences, "Megatron's sentence splitting (not supported)");
  app->add_flag("--keep-newlines", a->keep_newlines,
                "Accepted for Megatron compatibility (newlines are kept)");
  app->add_option("--lang", a->lang, "Accepted for Megatron compatibility (sentence splitting only)");
  app->add_option("--partitions", a->partitions, "Megatron's input partitions (only 1)");
  app->add_option("--log-interval", a->log_interval,
                  "Accepted for Megatron compatibility (progress is timed)");
  app->add_flag("--keep-sequential-samples", a->keep_sequential,
                "Accepted for Megatron compatibility (output is always in order)");
  app->add_flag("--quiet", a->quiet, "No progress line");
  app->callback([a, &ctx] { ctx.action = [a] { return run_preprocess(*a); }; });
}

// ---------------------------------------------------------------------------------------------------------------
struct TrainTokenizerArgs {
  std::string input, format = "auto", output;
  std::vector<std::string> json_keys{"text"};
  BpeTrainerOptions opt;
};

int run_train_tokenizer(const TrainTokenizerArgs& a) {
  DocumentReader reader(a.input, parse_input_format(a.format));
  BpeTrainer trainer;
  Record r;
  int64_t docs = 0;
  while (reader.next(&r)) {
    if (reader.format() == InputFormat::kJsonl) {
      for (const auto& texts : jsonl_texts(r, a.json_keys))
        for (const std::string& t : texts) trainer.add_text(t);
    } else {
      trainer.add_text(r.text);
    }
    ++docs;
  }
  int64_t merges = 0;
  const std::string json = trainer.train(a.opt, &merges);
  std::filesystem::create_directories(a.output);
  const std::string path = (std::filesystem::path(a.output) / "tokenizer.json").string();
  const std::string cfg = (std::filesystem::path(a.output) / "tokenizer_config.json").string();
  std::ofstream(path, std::ios::binary) << json;
  std::ofstream(cfg, std::ios::binary) << BpeTrainer::tokenizer_config(a.opt);
  std::printf("train-tokenizer: %s documents, %s distinct words -> %s merges, %s tokens\n  wrote %s and %s\n",
              count(docs).c_str(), count(trainer.words()).c_str(), count(merges).c_str(),
              count(256 + merges + static_cast<int64_t>(a.opt.special_tokens.size())).c_str(), path.c_str(),
              cfg.c_str());
  return 0;
}

void attach_train_tokenizer(CLI::App* parent, CliContext& ctx) {
  auto a = std::make_shared<TrainTokenizerArgs>();
  CLI::App* app = parent->add_subcommand(
      "train-tokenizer", "Train a byte-level BPE tokenizer (GPT-2 pre-tokenizer) into tokenizer.json");
  app->add_option("--input", a->input, "Corpus: a jsonl / text / fortune file, or a directory of them")
      ->required();
  app->add_option("--input-format", a->format, "auto | jsonl | txt | fortune")->capture_default_str();
  app->add_option("--json-keys", a->json_keys, "jsonl keys holding text")->capture_default_str();
  app->add_option("--vocab-size", a->opt.vocab_size, "Tokens in all: 256 bytes + merges + special tokens")
      ->capture_default_str();
  app->add_option("--min-frequency", a->opt.min_frequency, "Pairs seen fewer times are not merged")
      ->capture_default_str();
  app->add_option("--special-tokens", a->opt.special_tokens, "Special tokens (the first is EOS/BOS)")
      ->capture_default_str();
  app->add_option("--output", a->output, "Directory for tokenizer.json + tokenizer_config.json")->required();
  app->callback([a, &ctx] { ctx.action = [a] { return run_train_tokenizer(*a); }; });
}

// ---------------------------------------------------------------------------------------------------------------
struct InspectArgs {
  std::string prefix;
  TokenizerArgs tok;
  int64_t show = 0;
};

int run_inspect(const InspectArgs& a) {
  std::string prefix = a.prefix;
  if (prefix.ends_with(".bin") || prefix.ends_with(".idx")) prefix.resize(prefix.size() - 4);
  IndexedDataset ds(prefix);
  const auto& len = ds.sequence_lengths();
  int64_t mn = len.empty() ? 0 : *std::min_element(len.begin(), len.end());
  int64_t mx = len.empty() ? 0 : *std::max_element(len.begin(), len.end());
  std::printf("%s\n  dtype      %s\n  sequences  %s\n  documents  %s\n  tokens     %s\n", prefix.c_str(),
              token_dtype_name(ds.dtype()), count(ds.num_sequences()).c_str(),
              count(ds.num_documents()).c_str(), count(ds.total_tokens()).c_str());
  std::printf("  lengths    min %lld, mean %.1f, max %lld\n  files      .idx %s, .bin %s\n",
              static_cast<long long>(mn),
              ds.num_sequences() > 0
                  ? static_cast<double>(ds.total_tokens()) / static_cast<double>(ds.num_sequences())
                  : 0.0,
              static_cast<long long>(mx), count(static_cast<int64_t>(ds.idx_bytes())).c_str(),
              count(static_cast<int64_t>(ds.bin_bytes())).c_str());
  std::unique_ptr<Tokenizer> tok;
  if (!a.tok.model.empty() || !a.tok.type.empty() || !a.tok.vocab_file.empty()) tok = build_tokenizer(a.tok);
  for (int64_t i = 0; i < std::min<int64_t>(a.show, ds.num_sequences()); ++i) {
    const std::vector<int32_t> ids = ds.sequence(i);
    std::printf("  [%lld] %s\n", static_cast<long long>(i), ids_json(ids).c_str());
    if (tok) std::printf("       %s\n", json_text(tok->decode(ids)).c_str());
  }
  return 0;
}

void attach_inspect(CLI::App* parent, CliContext& ctx) {
  auto a = std::make_shared<InspectArgs>();
  CLI::App* app =
      parent->add_subcommand("inspect", "Validate and summarise an indexed dataset (.bin + .idx)");
  app->add_option("prefix", a->prefix, "Dataset prefix (without .bin/.idx)")->required();
  app->add_option("--show", a->show, "Print the first N sequences (decoded with a tokenizer if given)");
  add_tokenizer_options(app, a->tok);
  app->callback([a, &ctx] { ctx.action = [a] { return run_inspect(*a); }; });
}

// ---------------------------------------------------------------------------------------------------------------
struct SftWordnetArgs {
  std::string output, dir = "/usr/share/wordnet";
  data::WordNetSftOptions opt;
};

int run_sft_wordnet(const SftWordnetArgs& a) {
  const std::vector<data::WordNetSynset> synsets = data::read_wordnet(a.dir);
  const std::vector<nlohmann::ordered_json> records = data::wordnet_sft_records(synsets, a.opt);
  const std::filesystem::path out(a.output);
  if (out.has_parent_path()) std::filesystem::create_directories(out.parent_path());
  std::ofstream f(a.output, std::ios::binary);
  if (!f) throw ConfigError(fmt::format("--output {}: cannot write", a.output));
  int64_t define = 0, synonym = 0, sentence = 0;
  for (const auto& r : records) {
    f << r.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    const std::string& ins = r["instruction"].get_ref<const std::string&>();
    (ins.starts_with("Define") ? define : ins.starts_with("Give") ? synonym : sentence) += 1;
  }
  if (!f.flush()) throw Error(ErrorKind::kRuntime, fmt::format("--output {}: write failed", a.output));
  std::printf("sft-wordnet: %s synsets from %s -> %s records (%s definitions, %s synonyms, %s sentences)\n",
              count(static_cast<int64_t>(synsets.size())).c_str(), a.dir.c_str(),
              count(static_cast<int64_t>(records.size())).c_str(), count(define).c_str(),
              count(synonym).c_str(), count(sentence).c_str());
  std::printf("  wrote %s\n", a.output.c_str());
  return 0;
}

void attach_sft_wordnet(CLI::App* parent, CliContext& ctx) {
  auto a = std::make_shared<SftWordnetArgs>();
  CLI::App* app = parent->add_subcommand(
      "sft-wordnet", "Write an alpaca SFT corpus (define / synonym / sentence) from WordNet 3.0's database");
  app->add_option("--output", a->output, "The JSONL file to write")->required();
  app->add_option("--wordnet-dir", a->dir, "WordNet's data.noun/verb/adj/adv (Debian: wordnet-base)")
      ->capture_default_str();
  app->add_option("--max", a->opt.max, "Keep at most N records (0: all)")->capture_default_str();
  app->add_option("--seed", a->opt.seed, "Seed of the word choice and record order")->capture_default_str();
  app->callback([a, &ctx] { ctx.action = [a] { return run_sft_wordnet(*a); }; });
}

// ---------------------------------------------------------------------------------------------------------------
struct SftInspectArgs {
  std::string data, format = "auto", overflow = "truncate", chat_template;
  TokenizerArgs tok;
  int64_t seq_length = 2048, sample = 0;
  bool pack = false, tokens = false;
  uint64_t seed = 1234;
};

// The record `index` (0-based, blank lines skipped) of a JSONL file, with its line number.
data::SftSample read_sft_record(const std::string& path, int64_t index, data::SftFormat format,
                                size_t* line_out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("--data {}: cannot open (expected a JSONL file)", path));
  std::string line;
  size_t line_no = 0;
  int64_t seen = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    if (seen++ == index) {
      *line_out = line_no;
      return data::parse_sft_line(line, path, line_no, format);
    }
  }
  throw ConfigError(fmt::format("--sample {}: {} has only {} records", index, path, seen));
}

int run_sft_inspect(const SftInspectArgs& a) {
  std::unique_ptr<Tokenizer> tok = build_tokenizer(a.tok);
  const data::SftFormat format = data::parse_sft_format(a.format);
  const data::SftTokenizerSetup setup = data::read_sft_tokenizer_setup(a.tok.model);
  std::string template_source;
  if (!a.chat_template.empty()) {
    std::ifstream in(a.chat_template, std::ios::binary);
    if (!in) throw ConfigError(fmt::format("--chat-template {}: cannot read", a.chat_template));
    template_source = read_all(in);
  }
  const data::ChatTemplate tmpl = template_source.empty()
                                      ? data::chat_template_or_fallback(setup.chat)
                                      : data::ChatTemplate::parse(template_source, a.chat_template);
  size_t line = 0;
  const data::SftSample sample = read_sft_record(a.data, a.sample, format, &line);
  const std::string where = fmt::format("{}:{}", a.data, line);
  std::vector<data::TextSpan> spans;
  data::SftTokens t;
  try {
    spans = data::sft_sample_spans(tmpl, sample, setup.chat.bos_token, setup.chat.eos_token);
    t = data::tokenize_sft_sample(*tok, tmpl, sample, setup.chat.bos_token, setup.chat.eos_token,
                                  data::sft_required_bos(*tok));
  } catch (const Error& e) {
    throw ConfigError(fmt::format("{}: {}", where, e.what()), e.hint());
  }
  std::printf("%s (%s), %zu messages, template %s, tokenizer %s\n", where.c_str(),
              data::sft_format_name(sample.format), sample.messages.size(), tmpl.origin().c_str(),
              tok->name().c_str());
  std::printf("--- rendered (loss on the text between \u00ab and \u00bb)\n");
  std::string text;
  for (const data::TextSpan& s : spans) text += s.loss ? "\u00ab" + s.text + "\u00bb" : s.text;
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (!text.ends_with("\n")) std::fputc('\n', stdout);
  std::printf("---\n");
  const int64_t n = static_cast<int64_t>(t.ids.size());
  const int64_t loss = std::count(t.loss.begin(), t.loss.end(), uint8_t{1});
  std::printf("tokens %lld, loss tokens %lld, prompt tokens %lld%s\n", static_cast<long long>(n),
              static_cast<long long>(loss), static_cast<long long>(n - loss),
              n > a.seq_length ? fmt::format(" (longer than --seq-length {}: {})", a.seq_length,
                                             a.overflow == "drop" ? "dropped" : "truncated")
                                     .c_str()
                               : "");
  if (a.tokens) {
    for (int64_t i = 0; i < n; ++i)
      std::printf("  %5lld %8d %s %s\n", static_cast<long long>(i), t.ids[i], t.loss[i] ? "loss" : "    ",
                  json_text(tok->decode({t.ids[i]})).c_str());
  }
  if (!a.pack) return 0;

  data::SftDatasetOptions o;
  o.paths = {a.data};
  o.seq_length = a.seq_length;
  o.pack = true;
  o.seed = a.seed;
  o.overflow = data::parse_sft_overflow(a.overflow);
  o.format = format;
  o.tokenizer = tok.get();
  o.tokenizer_model = a.tok.model;
  o.chat_template = template_source;
  const data::SftDataset ds(o);
  std::printf("%s\n", ds.describe().c_str());
  const int64_t row = ds.row_of(0);
  const auto layout = ds.row_layout(row);
  int64_t used = 0;
  for (const auto& e : layout) used += e.length;
  std::printf(
      "first row (row %lld of %lld in packing order): %zu samples, %lld tokens, %lld padding (id %d)\n",
      static_cast<long long>(row), static_cast<long long>(ds.num_samples()), layout.size(),
      static_cast<long long>(used), static_cast<long long>(a.seq_length - used), ds.pad_id());
  for (const auto& e : layout) {
    const data::SftTokens st = ds.sample_tokens(e.sample);
    const int64_t targets = std::count(st.loss.begin() + 1, st.loss.end(), uint8_t{1});
    std::printf("  start %6lld  length %6lld  targets %6lld  %s\n", static_cast<long long>(e.start),
                static_cast<long long>(e.length), static_cast<long long>(targets),
                ds.sample_source(e.sample).c_str());
  }
  if (used < a.seq_length)
    std::printf("  start %6lld  length %6lld  padding\n", static_cast<long long>(used),
                static_cast<long long>(a.seq_length - used));
  return 0;
}

void attach_sft_inspect(CLI::App* parent, CliContext& ctx) {
  auto a = std::make_shared<SftInspectArgs>();
  CLI::App* app = parent->add_subcommand(
      "sft-inspect",
      "Show an SFT sample rendered through the chat template with its loss spans (and a packed row)");
  app->add_option("--data", a->data, "SFT JSONL file (alpaca, messages or prompt/response records)")
      ->required();
  add_tokenizer_options(app, a->tok);
  app->add_option("--format", a->format, "auto | alpaca | messages | prompt_response")->capture_default_str();
  app->add_option("--chat-template", a->chat_template,
                  "A Jinja chat template file (default: the tokenizer's tokenizer_config.json, else ChatML)");
  app->add_option("--seq-length", a->seq_length, "Row length in tokens")->capture_default_str();
  app->add_option("--sample", a->sample, "Which record to show (0-based, blank lines skipped)")
      ->capture_default_str();
  app->add_option("--overflow", a->overflow, "Samples longer than --seq-length: truncate | drop")
      ->capture_default_str();
  app->add_option("--seed", a->seed, "Seed of the row order (--pack)")->capture_default_str();
  app->add_flag("--tokens", a->tokens, "Also list the sample's tokens with their loss flags");
  app->add_flag("--pack", a->pack, "Pack the whole file and show the first row's layout");
  app->callback([a, &ctx] { ctx.action = [a] { return run_sft_inspect(*a); }; });
}

}  // namespace

void attach_data(CLI::App& root, CliContext& ctx) {
  CLI::App* data = root.add_subcommand(
      "data", "Data preparation: preprocess, tokenize, train-tokenizer, inspect, sft-wordnet, sft-inspect");
  data->require_subcommand(1);
  attach_preprocess(data, ctx);
  attach_tokenize(data, ctx);
  attach_train_tokenizer(data, ctx);
  attach_inspect(data, ctx);
  attach_sft_wordnet(data, ctx);
  attach_sft_inspect(data, ctx);
}

}  // namespace primus::cli
