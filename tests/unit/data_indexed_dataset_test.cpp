// Megatron indexed dataset (.bin + .idx): writer -> reader round trips for every integer dtype, the exact
// byte layout of reference.md §1.1, and one named error (file + byte offset) for each kind of damage.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "data/indexed_dataset.h"
#include "data_test_util.h"

namespace primus {
namespace {

using data_test::error_of;
using data_test::read_bytes;
using data_test::ScratchDir;
using data_test::write_bytes;
using data_test::write_dataset;

template <typename T>
T at(const std::string& bytes, size_t off) {
  T v;
  std::memcpy(&v, bytes.data() + off, sizeof(T));
  return v;
}
template <typename T>
void put(std::string& bytes, size_t off, T v) {
  std::memcpy(bytes.data() + off, &v, sizeof(T));
}

TEST(IndexedDataset, RoundTripEveryIntegerDtype) {
  ScratchDir dir;
  const std::vector<std::vector<int32_t>> docs = {{1, 2, 3}, {}, {7}, {100, 0, 126, 5, 9}};
  for (TokenDType t : {TokenDType::kU8, TokenDType::kI8, TokenDType::kI16, TokenDType::kU16, TokenDType::kI32,
                       TokenDType::kI64}) {
    const std::string prefix = write_dataset(dir.path(token_dtype_name(t)), docs, t);
    IndexedDataset ds(prefix);
    ASSERT_EQ(ds.dtype(), t);
    ASSERT_EQ(ds.num_sequences(), 4);
    EXPECT_EQ(ds.num_documents(), 4);
    EXPECT_EQ(ds.total_tokens(), 9);
    EXPECT_EQ(ds.document_indices(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
    int64_t ptr = 0;
    for (int64_t i = 0; i < 4; ++i) {
      EXPECT_EQ(ds.sequence(i), docs[static_cast<size_t>(i)]) << token_dtype_name(t) << " sequence " << i;
      EXPECT_EQ(ds.sequence_pointer(i), ptr);
      ptr += static_cast<int64_t>(docs[static_cast<size_t>(i)].size() * token_dtype_size(t));
    }
    EXPECT_EQ(static_cast<int64_t>(ds.bin_bytes()), ptr);
  }
}

TEST(IndexedDataset, ByteLayoutIsMegatrons) {
  ScratchDir dir;
  const std::string prefix = write_dataset(dir.path("d"), {{5, 6}, {7, 8, 9}}, TokenDType::kU16);
  const std::string idx = read_bytes(prefix + ".idx"), bin = read_bytes(prefix + ".bin");
  ASSERT_EQ(idx.size(), 34u + 12 * 2 + 8 * 3);
  EXPECT_EQ(idx.substr(0, 9), std::string("MMIDIDX\0\0", 9));
  EXPECT_EQ(at<uint64_t>(idx, 9), 1u);
  EXPECT_EQ(static_cast<uint8_t>(idx[17]), 8);  // uint16
  EXPECT_EQ(at<uint64_t>(idx, 18), 2u);
  EXPECT_EQ(at<uint64_t>(idx, 26), 3u);
  EXPECT_EQ(at<int32_t>(idx, 34), 2);
  EXPECT_EQ(at<int32_t>(idx, 38), 3);
  EXPECT_EQ(at<int64_t>(idx, 42), 0);
  EXPECT_EQ(at<int64_t>(idx, 50), 4);  // byte offset: 2 tokens x 2 bytes
  EXPECT_EQ(at<int64_t>(idx, 58), 0);
  EXPECT_EQ(at<int64_t>(idx, 66), 1);
  EXPECT_EQ(at<int64_t>(idx, 74), 2);
  ASSERT_EQ(bin.size(), 10u);
  EXPECT_EQ(at<uint16_t>(bin, 0), 5);
  EXPECT_EQ(at<uint16_t>(bin, 8), 9);
}

TEST(IndexedDataset, SeveralSequencesPerDocument) {
  ScratchDir dir;
  const std::string prefix = dir.path("s");
  IndexedDatasetWriter w(prefix, TokenDType::kI32);
  w.add_sequence(std::vector<int32_t>{1, 2});
  w.add_sequence(std::vector<int32_t>{3});
  w.end_document();
  w.add_sequence(std::vector<int32_t>{100000});
  w.end_document();
  w.finalize();
  IndexedDataset ds(prefix);
  EXPECT_EQ(ds.num_sequences(), 3);
  EXPECT_EQ(ds.num_documents(), 2);
  EXPECT_EQ(ds.document_indices(), (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(ds.sequence(2), std::vector<int32_t>{100000});
}

TEST(IndexedDataset, PartialReadsAndOptimalDtype) {
  ScratchDir dir;
  const std::string prefix = write_dataset(dir.path("p"), {{10, 11, 12, 13, 14}});
  IndexedDataset ds(prefix);
  int32_t out[3];
  ds.read(0, 1, 3, out);
  EXPECT_EQ(out[0], 11);
  EXPECT_EQ(out[2], 13);
  EXPECT_NE(error_of([&] { ds.read(0, 3, 3, out); }), "");
  EXPECT_EQ(optimal_token_dtype(50257), TokenDType::kU16);
  EXPECT_EQ(optimal_token_dtype(65500), TokenDType::kI32);
  EXPECT_EQ(optimal_token_dtype(128256), TokenDType::kI32);
}

TEST(IndexedDataset, WriterRejectsIdsOutsideTheDtype) {
  ScratchDir dir;
  IndexedDatasetWriter w(dir.path("w"), TokenDType::kU16);
  const std::string msg = error_of([&] { w.add_document(std::vector<int32_t>{1, 70000}); });
  EXPECT_NE(msg.find("token id 70000 does not fit the dataset's dtype uint16"), std::string::npos) << msg;
}

TEST(IndexedDataset, UnfinalizedWriterLeavesNoFiles) {
  ScratchDir dir;
  {
    IndexedDatasetWriter w(dir.path("u"), TokenDType::kU16);
    w.add_document(std::vector<int32_t>{1, 2, 3});
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// ---- damage: each case names the file and the byte offset
// ---------------------------------------------------

class IndexedDatasetDamage : public ::testing::Test {
 protected:
  void SetUp() override {
    prefix_ = write_dataset(dir_.path("c"), {{1, 2, 3}, {4, 5}, {6, 7, 8, 9}});
    idx_ = read_bytes(prefix_ + ".idx");
    bin_ = read_bytes(prefix_ + ".bin");
  }
  // Writes the (modified) files and returns the error message of opening them.
  std::string open_error() {
    write_bytes(prefix_ + ".idx", idx_);
    write_bytes(prefix_ + ".bin", bin_);
    return error_of([&] { IndexedDataset ds(prefix_); });
  }
  void expect(const std::string& msg, const std::string& file, uint64_t offset, const std::string& what) {
    EXPECT_NE(msg.find(fmt::format("{}: byte offset {}: ", file, offset)), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
  ScratchDir dir_;
  std::string prefix_, idx_, bin_;
};

TEST_F(IndexedDatasetDamage, IntactFilesOpen) {
  EXPECT_EQ(open_error(), "");
}

TEST_F(IndexedDatasetDamage, TruncatedHeader) {
  idx_.resize(20);
  expect(open_error(), prefix_ + ".idx", 20, "truncated header: the file has 20 bytes, the header needs 34");
}

TEST_F(IndexedDatasetDamage, TruncatedIndexArrays) {
  const size_t full = idx_.size();
  idx_.resize(full - 5);
  expect(open_error(), prefix_ + ".idx", full - 5,
         "truncated: the header declares 3 sequences and 4 document");
}

TEST_F(IndexedDatasetDamage, EmptyIndexFile) {
  idx_.clear();
  expect(open_error(), prefix_ + ".idx", 0, "truncated header");
}

TEST_F(IndexedDatasetDamage, WrongMagic) {
  idx_[3] = 'X';
  expect(open_error(), prefix_ + ".idx", 0, "wrong magic 4d4d4958");
}

TEST_F(IndexedDatasetDamage, WrongVersion) {
  put<uint64_t>(idx_, 9, 2);
  expect(open_error(), prefix_ + ".idx", 9, "unsupported version 2");
}

TEST_F(IndexedDatasetDamage, UnknownDtype) {
  idx_[17] = 9;
  expect(open_error(), prefix_ + ".idx", 17, "unknown dtype code 9");
  idx_[17] = 0;
  expect(open_error(), prefix_ + ".idx", 17, "unknown dtype code 0");
}

TEST_F(IndexedDatasetDamage, PointerOutsideBin) {
  put<int64_t>(idx_, 34 + 12 + 8 * 2, 1000);  // third sequence's pointer
  expect(open_error(), prefix_ + ".idx", 34 + 12 + 16, "sequence 2: pointer 1000 with 4 tokens of 2 bytes");
}

TEST_F(IndexedDatasetDamage, NegativeAndMisalignedPointers) {
  put<int64_t>(idx_, 34 + 12 + 8, -2);
  expect(open_error(), prefix_ + ".idx", 34 + 12 + 8, "sequence 1: pointer -2");
  put<int64_t>(idx_, 34 + 12 + 8, 3);  // not a multiple of the 2-byte item
  expect(open_error(), prefix_ + ".idx", 34 + 12 + 8, "sequence 1: pointer 3");
}

TEST_F(IndexedDatasetDamage, TruncatedBin) {
  bin_.resize(bin_.size() - 1);
  expect(open_error(), prefix_ + ".idx", 34 + 12 + 16, "is outside " + prefix_ + ".bin (17 bytes)");
}

TEST_F(IndexedDatasetDamage, NegativeLength) {
  put<int32_t>(idx_, 34 + 4, -1);
  expect(open_error(), prefix_ + ".idx", 38, "sequence 1 has negative length -1");
}

TEST_F(IndexedDatasetDamage, CountsTooLargeDoNotOverflow) {
  put<uint64_t>(idx_, 18, UINT64_MAX / 4);
  expect(open_error(), prefix_ + ".idx", idx_.size(), "truncated: the header declares");
}

TEST_F(IndexedDatasetDamage, BadDocumentIndices) {
  const size_t doc = 34 + 12 * 3;
  put<int64_t>(idx_, doc, 1);  // must start at 0
  expect(open_error(), prefix_ + ".idx", doc, "document index 0 is 1");
  put<int64_t>(idx_, doc, 0);
  put<int64_t>(idx_, doc + 16, 0);  // decreasing
  expect(open_error(), prefix_ + ".idx", doc + 16, "document index 2 is 0");
  put<int64_t>(idx_, doc + 16, 2);
  put<int64_t>(idx_, doc + 24, 2);  // must end at the sequence count
  expect(open_error(), prefix_ + ".idx", doc + 24, "the last document index is 2, not the sequence count 3");
}

TEST_F(IndexedDatasetDamage, TrailingBytes) {
  idx_ += std::string(7, '\0');
  expect(open_error(), prefix_ + ".idx", 34 + 12 * 3 + 8 * 4, "7 unexpected bytes");
}

TEST_F(IndexedDatasetDamage, TokenOutsideTheVocabularyNamesTheBinOffset) {
  IndexedDataset ds(prefix_);
  int32_t out[4];
  const std::string msg = error_of([&] { ds.read(2, 0, 4, out, /*vocab_limit=*/8); });
  // Sequence 2 (6, 7, 8, 9) starts at byte 10; its third token (8) is the first outside [0, 8), at byte 14.
  expect(msg, prefix_ + ".bin", 14, "token 8 is not an id of the vocabulary [0, 8)");
}

TEST_F(IndexedDatasetDamage, RandomDamageIsAnErrorOrValidData) {
  // 3000 random corruptions (byte flips anywhere in .idx, truncations of either file): opening either throws
  // a primus::Error or yields a dataset whose every sequence reads inside .bin. Never a crash.
  const std::string idx0 = idx_, bin0 = bin_;
  uint64_t x = 88172645463325252ull;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  int opened = 0, refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    idx_ = idx0;
    bin_ = bin0;
    switch (next() % 3) {
      case 0:
        for (uint64_t k = 0, n = 1 + next() % 3; k < n; ++k)
          idx_[next() % idx_.size()] = static_cast<char>(next() & 0xff);
        break;
      case 1:
        idx_.resize(next() % idx_.size());
        break;
      default:
        bin_.resize(next() % (bin_.size() + 1));
    }
    write_bytes(prefix_ + ".idx", idx_);
    write_bytes(prefix_ + ".bin", bin_);
    try {
      IndexedDataset ds(prefix_);
      for (int64_t i = 0; i < ds.num_sequences(); ++i) ds.sequence(i);
      ++opened;
    } catch (const Error& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find(prefix_), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(refused, 1000);
  // Some damage leaves a consistent file (a pointer moved elsewhere inside .bin, a flip to the same value):
  // those open, and their sequences read inside .bin.
  EXPECT_GT(opened, 0);
}

TEST_F(IndexedDatasetDamage, MissingFilesAreNamed) {
  std::filesystem::remove(prefix_ + ".bin");
  const std::string msg = error_of([&] { IndexedDataset ds(prefix_); });
  EXPECT_NE(msg.find("cannot open " + prefix_ + ".bin"), std::string::npos) << msg;
}

// ---- a .bin that changes under a running reader: a named error, never SIGBUS (the .bin is read with pread)

TEST_F(IndexedDatasetDamage, BinTruncatedAfterOpenIsANamedError) {
  IndexedDataset ds(prefix_);
  EXPECT_EQ(ds.sequence(0), (std::vector<int32_t>{1, 2, 3}));
  std::filesystem::resize_file(prefix_ + ".bin", 6);  // sequence 0 (bytes 0..5) still fits; 1 and 2 do not
  const std::string msg = error_of([&] { ds.sequence(2); });
  EXPECT_NE(msg.find(prefix_ + ".bin: reading bytes [10, 18) came back short at byte 10: the file had 18 "
                               "bytes when opened and has 6 now"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("truncated or rewritten while in use"), std::string::npos) << msg;
}

TEST_F(IndexedDatasetDamage, BinRewrittenInPlaceAfterOpenIsANamedError) {
  IndexedDataset ds(prefix_);
  EXPECT_EQ(ds.sequence(1), (std::vector<int32_t>{4, 5}));
  // Same size, other tokens, a later modification time (file times tick in milliseconds at best).
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  std::string other = bin_;
  other[2] = 9;
  {
    std::fstream f(prefix_ + ".bin", std::ios::in | std::ios::out | std::ios::binary);
    f.write(other.data(), static_cast<std::streamsize>(other.size()));
  }
  const std::string msg = error_of([&] { ds.sequence(1); });
  EXPECT_NE(msg.find(prefix_ + ".bin: the file changed while in use"), std::string::npos) << msg;
}

TEST_F(IndexedDatasetDamage, BinTruncatedUnderAReaderThread) {
  // A reader loops over every sequence while the main thread cuts the .bin to 2 bytes. With a memory map the
  // reader would die of SIGBUS; here it must stop with the named error.
  const std::vector<std::vector<int32_t>> docs = data_test::numbered_docs(400, 100, 300);
  const std::string prefix = write_dataset(dir_.path("big"), docs);
  IndexedDataset ds(prefix);
  std::atomic<bool> started{false};
  std::string msg;
  std::thread reader([&] {
    msg = error_of([&] {
      for (int pass = 0; pass < 100000; ++pass) {
        for (int64_t s = 0; s < ds.num_sequences(); ++s) {
          if (ds.sequence(s) != docs[static_cast<size_t>(s)])
            throw Error(ErrorKind::kRuntime, "a sequence read back different tokens");
        }
        started = true;
      }
    });
  });
  while (!started) std::this_thread::yield();
  std::filesystem::resize_file(prefix + ".bin", 2);
  reader.join();
  // Either a read came back short or the size check after a read saw the change: both name the file.
  EXPECT_EQ(msg.rfind(prefix + ".bin: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("while in use"), std::string::npos) << msg;
}

}  // namespace
}  // namespace primus
