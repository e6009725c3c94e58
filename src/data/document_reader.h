#pragma once
// Streams the records of a corpus for `primus data preprocess` and `primus data train-tokenizer`: jsonl (one
// JSON object per line, the text under --json-keys), plain text (one document per line), or fortune files
// (documents separated by lines holding only "%"). The input is a file or a directory of files (sorted by
// name; fortune's *.dat / *.u8 index files and binary files are skipped).
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace primus {

enum class InputFormat { kAuto, kJsonl, kText, kFortune };
InputFormat parse_input_format(const std::string& s);  // auto | jsonl | txt | fortune (ConfigError otherwise)
const char* input_format_name(InputFormat f);

struct Record {
  std::string text;  // a jsonl line (parsed later), a line of text, or a fortune
  std::string file;
  int64_t line = 0;  // 1-based line where the record starts
};

// The files of a corpus: `path` itself, or the regular files of directory `path` sorted by name, without
// fortune's *.dat / *.u8 index files and without binary files. Throws ConfigError naming `what` (the key or
// flag that gave the path, with `hint`) when `path` is neither a file nor a directory.
std::vector<std::string> corpus_files(const std::string& path, const std::string& what,
                                      const std::string& hint = "");

class DocumentReader {
 public:
  // Throws ConfigError when `path` does not exist or holds no readable file.
  DocumentReader(const std::string& path, InputFormat format);
  // The next record; false at the end.
  bool next(Record* r);
  int64_t total_bytes() const { return total_bytes_; }
  int64_t bytes_read() const { return bytes_done_ + bytes_in_file_; }
  InputFormat format() const { return format_; }
  const std::vector<std::string>& files() const { return files_; }

 private:
  bool open_next_file();
  std::vector<std::string> files_;
  size_t file_index_ = 0;
  std::unique_ptr<std::ifstream> in_;
  InputFormat format_;
  int64_t total_bytes_ = 0, bytes_done_ = 0, bytes_in_file_ = 0, line_ = 0;
};

// Extracts the texts of one jsonl record: one entry per key; a key whose value is a list of strings gives
// several sentences. Throws Error naming file:line for bad JSON, a missing key or a non-text value.
std::vector<std::vector<std::string>> jsonl_texts(const Record& r, const std::vector<std::string>& keys);

}  // namespace primus
