#include "data/preprocess.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data/unicode.h"

namespace primus {

std::string preprocess_output_prefix(const std::string& prefix, const std::string& key) {
  return prefix + "_" + key + "_document";
}

namespace {

struct DocResult {
  std::vector<std::vector<std::vector<int32_t>>> per_key;  // key -> sequences -> ids
};

struct RecordBatch {
  int64_t seq = 0;
  std::vector<Record> records;
  std::vector<DocResult> docs;
  int64_t bytes_after = 0;  // input position after this batch
  int64_t text_bytes = 0, repaired = 0;
};

constexpr size_t kBatchRecords = 256;
constexpr size_t kBatchBytes = 1 << 20;

void process(const Tokenizer& tok, const PreprocessOptions& opt, bool jsonl, RecordBatch* b) {
  b->docs.resize(b->records.size());
  std::string fixed;
  for (size_t i = 0; i < b->records.size(); ++i) {
    const Record& r = b->records[i];
    std::vector<std::vector<std::string>> texts;
    if (jsonl) {
      texts = jsonl_texts(r, opt.json_keys);
    } else {
      texts = {{r.text}};
    }
    DocResult& d = b->docs[i];
    d.per_key.resize(texts.size());
    for (size_t k = 0; k < texts.size(); ++k) {
      for (const std::string& sentence : texts[k]) {
        b->text_bytes += static_cast<int64_t>(sentence.size());
        if (!utf8::is_valid(sentence)) b->repaired += static_cast<int64_t>(utf8::repair(sentence, &fixed));
        std::vector<int32_t> ids = tok.encode(sentence, opt.add_special_tokens);
        if (!ids.empty()) d.per_key[k].push_back(std::move(ids));
      }
      // Megatron appends EOD to the document's last sequence, and only to a document with tokens.
      if (opt.append_eod && !d.per_key[k].empty()) d.per_key[k].back().push_back(tok.eod_id());
    }
  }
}

}  // namespace

PreprocessStats preprocess(const Tokenizer& tok, const PreprocessOptions& opt,
                           const std::function<void(const PreprocessProgress&)>& progress) {
  if (opt.output_prefix.empty()) throw ConfigError("--output-prefix is required");
  if (opt.workers < 1) throw ConfigError(fmt::format("--workers {} (must be >= 1)", opt.workers));
  if (opt.append_eod && tok.eod_id() < 0)
    throw ConfigError(fmt::format("--append-eod: the tokenizer {} has no end-of-document token", tok.name()),
                      "add an eos_token to tokenizer_config.json or drop --append-eod");
  const auto start = std::chrono::steady_clock::now();
  DocumentReader reader(opt.input, opt.format);
  const bool jsonl = reader.format() == InputFormat::kJsonl;
  const std::vector<std::string> keys = jsonl ? opt.json_keys : std::vector<std::string>{"text"};
  if (keys.empty()) throw ConfigError("--json-keys: at least one key is needed");

  const std::filesystem::path parent = std::filesystem::path(opt.output_prefix).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  PreprocessStats st;
  st.format = reader.format();
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const std::string& k : keys) {
    st.outputs.push_back(preprocess_output_prefix(opt.output_prefix, k));
    writers.push_back(
        std::make_unique<IndexedDatasetWriter>(st.outputs.back(), optimal_token_dtype(tok.vocab_size())));
  }

  std::mutex mu;
  std::condition_variable cv;
  std::deque<RecordBatch> queued;
  std::map<int64_t, RecordBatch> done;
  int64_t batches_read = 0, in_flight = 0;
  bool reader_done = false, stop = false;
  std::exception_ptr error;
  const int64_t max_in_flight = 4 * opt.workers + 2;
  auto fail = [&](std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu);
    if (!error) error = e;
    stop = true;
    cv.notify_all();
  };

  std::thread read_thread([&] {
    try {
      RecordBatch b;
      size_t bytes = 0;
      Record r;
      auto push = [&] {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || in_flight < max_in_flight; });
        if (stop) return false;
        b.seq = batches_read++;
        b.bytes_after = reader.bytes_read();
        ++in_flight;
        queued.push_back(std::move(b));
        b = RecordBatch();
        bytes = 0;
        cv.notify_all();
        return true;
      };
      while (reader.next(&r)) {
        bytes += r.text.size();
        b.records.push_back(std::move(r));
        if ((b.records.size() >= kBatchRecords || bytes >= kBatchBytes) && !push()) return;
      }
      if (!b.records.empty() && !push()) return;
      std::lock_guard<std::mutex> lock(mu);
      reader_done = true;
      cv.notify_all();
    } catch (...) {
      fail(std::current_exception());
    }
  });
  std::vector<std::thread> workers;
  for (int w = 0; w < opt.workers; ++w) {
    workers.emplace_back([&] {
      try {
        while (true) {
          RecordBatch b;
          {
            std::unique_lock<std::mutex> lock(mu);
            cv.wait(lock, [&] { return stop || !queued.empty() || reader_done; });
            if (stop || (queued.empty() && reader_done)) return;
            b = std::move(queued.front());
            queued.pop_front();
          }
          process(tok, opt, jsonl, &b);
          std::lock_guard<std::mutex> lock(mu);
          const int64_t seq = b.seq;
          done.emplace(seq, std::move(b));
          cv.notify_all();
        }
      } catch (...) {
        fail(std::current_exception());
      }
    });
  }

  // The writer: batches in input order.
  int64_t next = 0;
  try {
    while (true) {
      RecordBatch b;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || done.count(next) > 0 || (reader_done && next == batches_read); });
        if (stop) break;
        if (reader_done && next == batches_read && done.count(next) == 0) break;
        b = std::move(done[next]);
        done.erase(next);
        --in_flight;
        cv.notify_all();
      }
      ++next;
      for (DocResult& d : b.docs) {
        bool any = false;
        for (size_t k = 0; k < d.per_key.size(); ++k) {
          for (const auto& seq_ids : d.per_key[k]) {
            writers[k]->add_sequence(seq_ids);
            st.tokens += static_cast<int64_t>(seq_ids.size());
          }
          // Megatron's builder closes a document even when it has no tokens (document_indices repeats the
          // sequence count), so an empty text still counts as a document and the files stay identical.
          writers[k]->end_document();
          any = any || !d.per_key[k].empty();
        }
        if (any) {
          ++st.docs;
        } else {
          ++st.skipped;
        }
      }
      st.input_bytes = b.bytes_after;
      st.text_bytes += b.text_bytes;
      st.repaired += b.repaired;
      if (progress) {
        PreprocessProgress p;
        p.docs = st.docs;
        p.tokens = st.tokens;
        p.bytes = st.input_bytes;
        p.total_bytes = reader.total_bytes();
        p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        progress(p);
      }
    }
  } catch (...) {
    fail(std::current_exception());
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    if (error) stop = true;
    cv.notify_all();
  }
  read_thread.join();
  for (auto& t : workers) t.join();
  if (error) std::rethrow_exception(error);
  for (auto& w : writers) w->finalize();
  st.input_bytes = reader.total_bytes();
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (progress) {
    PreprocessProgress p;
    p.docs = st.docs;
    p.tokens = st.tokens;
    p.bytes = p.total_bytes = st.input_bytes;
    p.seconds = st.seconds;
    p.final = true;
    progress(p);
  }
  return st;
}

}  // namespace primus
