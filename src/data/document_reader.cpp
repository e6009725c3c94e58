#include "data/document_reader.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace primus {

namespace fs = std::filesystem;

InputFormat parse_input_format(const std::string& s) {
  if (s == "auto" || s.empty()) return InputFormat::kAuto;
  if (s == "jsonl" || s == "json") return InputFormat::kJsonl;
  if (s == "txt" || s == "text") return InputFormat::kText;
  if (s == "fortune") return InputFormat::kFortune;
  throw ConfigError(fmt::format("--input-format: '{}' (expected auto, jsonl, txt or fortune)", s));
}

const char* input_format_name(InputFormat f) {
  switch (f) {
    case InputFormat::kAuto:
      return "auto";
    case InputFormat::kJsonl:
      return "jsonl";
    case InputFormat::kText:
      return "txt";
    case InputFormat::kFortune:
      return "fortune";
  }
  return "?";
}

namespace {
bool looks_binary(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  char buf[4096];
  in.read(buf, sizeof(buf));
  return std::find(buf, buf + in.gcount(), '\0') != buf + in.gcount();
}

// auto: *.jsonl / *.json are jsonl; a file with a line holding only "%" is a fortune file; else text.
InputFormat detect(const std::string& file) {
  const std::string ext = fs::path(file).extension().string();
  if (ext == ".jsonl" || ext == ".json") return InputFormat::kJsonl;
  std::ifstream in(file, std::ios::binary);
  std::string line;
  for (int i = 0; i < 2000 && std::getline(in, line); ++i)
    if (line == "%" || line == "%\r") return InputFormat::kFortune;
  return InputFormat::kText;
}
}  // namespace

std::vector<std::string> corpus_files(const std::string& path, const std::string& what,
                                      const std::string& hint) {
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec)) {
      if (!e.is_regular_file()) continue;
      const std::string ext = e.path().extension().string();
      if (ext == ".dat" || ext == ".u8") continue;  // fortune's index files and their UTF-8 duplicates
      if (looks_binary(e.path())) continue;
      files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
  } else if (fs::is_regular_file(path, ec)) {
    files.push_back(path);
  } else {
    throw ConfigError(fmt::format("{}: '{}' is neither a file nor a directory", what, path), hint);
  }
  return files;
}

DocumentReader::DocumentReader(const std::string& path, InputFormat format)
    : files_(corpus_files(path, "--input")), format_(format) {
  std::error_code ec;
  if (files_.empty()) throw ConfigError(fmt::format("--input: no readable text files under '{}'", path));
  for (const std::string& f : files_) total_bytes_ += static_cast<int64_t>(fs::file_size(f, ec));
  if (format_ == InputFormat::kAuto) format_ = detect(files_.front());
}

bool DocumentReader::open_next_file() {
  if (in_) bytes_done_ += bytes_in_file_;
  bytes_in_file_ = 0;
  line_ = 0;
  if (file_index_ >= files_.size()) {
    in_.reset();
    return false;
  }
  in_ = std::make_unique<std::ifstream>(files_[file_index_++], std::ios::binary);
  if (!*in_) throw Error(ErrorKind::kRuntime, fmt::format("cannot read {}", files_[file_index_ - 1]));
  return true;
}

bool DocumentReader::next(Record* r) {
  if (!in_ && !open_next_file()) return false;
  std::string line;
  while (true) {
    const std::string& file = files_[file_index_ - 1];
    if (format_ != InputFormat::kFortune) {
      while (std::getline(*in_, line)) {
        ++line_;
        bytes_in_file_ += static_cast<int64_t>(line.size()) + 1;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty()) continue;  // empty lines are no documents
        r->text = std::move(line);
        r->file = file;
        r->line = line_;
        return true;
      }
    } else {
      // A fortune: the lines up to a line holding only "%", each kept with its newline.
      r->text.clear();
      r->file = file;
      r->line = line_ + 1;
      bool any = false;
      while (std::getline(*in_, line)) {
        ++line_;
        bytes_in_file_ += static_cast<int64_t>(line.size()) + 1;
        if (line == "%" || line == "%\r") {
          if (any) return true;
          r->line = line_ + 1;
          continue;
        }
        r->text += line;
        r->text += '\n';
        any = true;
      }
      if (any) return true;
    }
    if (!open_next_file()) return false;
  }
}

std::vector<std::vector<std::string>> jsonl_texts(const Record& r, const std::vector<std::string>& keys) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(r.text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::kRuntime, fmt::format("{}:{}: not a JSON object: {}", r.file, r.line, e.what()),
                {}, "jsonl input has one JSON object per line; use --input-format txt for plain text");
  }
  if (!j.is_object())
    throw Error(ErrorKind::kRuntime,
                fmt::format("{}:{}: a jsonl line must be a JSON object", r.file, r.line));
  std::vector<std::vector<std::string>> out;
  for (const std::string& k : keys) {
    auto it = j.find(k);
    if (it == j.end())
      throw Error(ErrorKind::kRuntime, fmt::format("{}:{}: no key '{}' in this record", r.file, r.line, k),
                  {}, "choose the text field with --json-keys");
    std::vector<std::string> texts;
    if (it->is_string()) {
      texts.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      for (const auto& s : *it) {
        if (!s.is_string())
          throw Error(ErrorKind::kRuntime,
                      fmt::format("{}:{}: key '{}' holds a non-string list item", r.file, r.line, k));
        texts.push_back(s.get<std::string>());
      }
    } else {
      throw Error(ErrorKind::kRuntime,
                  fmt::format("{}:{}: key '{}' holds {}, not text", r.file, r.line, k, it->type_name()));
    }
    out.push_back(std::move(texts));
  }
  return out;
}

}  // namespace primus
