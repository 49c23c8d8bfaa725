// DataLoader: batches are llm.c's consecutive windows (shuffle off), advance by B*T, move to the
// next file (wrapping) when a batch would run past the end, and DP ranks get row slices of the
// same global batch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data/batch_layout.hpp"
#include "data/builtin_corpus.hpp"
#include "data/loader.hpp"
#include "test_helpers.hpp"

namespace mpf {
namespace {

using test::input_error;
using ::testing::AllOf;
using ::testing::HasSubstr;
using Tokens = std::vector<int32_t>;

class LoaderTest : public test::ScratchDirTest {
 protected:
  // A shard holding first, first+1, ..., first+n-1.
  std::string shard(const std::string& name, int first, int n) const {
    std::vector<uint16_t> tokens(n);
    std::iota(tokens.begin(), tokens.end(), static_cast<uint16_t>(first));
    write_shard(path(name), tokens);
    return path(name);
  }
};

struct Batch {
  Tokens inputs, targets;
};

Batch next(DataLoader& loader, int row_begin, int rows) {
  Batch b{Tokens(size_t(rows) * loader.T()), Tokens(size_t(rows) * loader.T())};
  loader.next_batch(row_begin, rows, b.inputs.data(), b.targets.data());
  return b;
}

Batch next(DataLoader& loader) {
  return next(loader, 0, loader.B());
}

TEST_F(LoaderTest, OneFileWindowsAdvanceAndWrap) {
  // 20 tokens 0..19, B=2, T=3: batches start at 0, 6, 12; at 18, 18+7 > 20, so back to 0.
  DataLoader loader(shard("a.bin", 0, 20), 2, 3, 256);
  EXPECT_EQ(loader.total_tokens(), 20);
  Batch b = next(loader);
  EXPECT_EQ(b.inputs, (Tokens{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(b.targets, (Tokens{1, 2, 3, 4, 5, 6}));
  b = next(loader);
  EXPECT_EQ(b.inputs, (Tokens{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(b.targets, (Tokens{7, 8, 9, 10, 11, 12}));
  b = next(loader);
  EXPECT_EQ(b.inputs, (Tokens{12, 13, 14, 15, 16, 17}));
  EXPECT_EQ(b.targets, (Tokens{13, 14, 15, 16, 17, 18}));
  b = next(loader);
  EXPECT_EQ(b.inputs, (Tokens{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(b.targets, (Tokens{1, 2, 3, 4, 5, 6}));
}

TEST_F(LoaderTest, LastTokenOfFileIsUsedAsATarget) {
  // 13 tokens, B*T = 6: the batch at 6 needs tokens 6..12, exactly the end of the file.
  DataLoader loader(shard("a.bin", 100, 13), 2, 3, 256);
  next(loader);
  Batch b = next(loader);
  EXPECT_EQ(b.inputs, (Tokens{106, 107, 108, 109, 110, 111}));
  EXPECT_EQ(b.targets, (Tokens{107, 108, 109, 110, 111, 112}));
  EXPECT_EQ(next(loader).inputs, (Tokens{100, 101, 102, 103, 104, 105}));
}

TEST_F(LoaderTest, Uint32ShardsMixWithUint16Ones) {
  // A Llama 3 shard (ids above 65,535) then a GPT-2 one, B=1, T=2: each file's windows in turn.
  write_shard_uint32(path("wide.bin"), {70000, 70001, 70002, 128255});
  shard("narrow.bin", 7, 3);
  DataLoader loader(path("wide.bin") + "," + path("narrow.bin"), 1, 2, 128256);
  EXPECT_EQ(loader.total_tokens(), 7);
  Batch b = next(loader);
  EXPECT_EQ(b.inputs, (Tokens{70000, 70001}));
  EXPECT_EQ(b.targets, (Tokens{70001, 70002}));
  b = next(loader);  // 2 + 3 > 4: the next file
  EXPECT_EQ(b.inputs, (Tokens{7, 8}));
  EXPECT_EQ(b.targets, (Tokens{8, 9}));
}

TEST_F(LoaderTest, MultiFileAdvanceAndWrap) {
  // a: 100..109 (10 tokens), b: 200..214 (15); B=1, T=4, so B*T+1 = 5.
  // a at 0, 4; a at 8 would need 13 > 10 -> b at 0, 4, 8; b at 12 needs 17 > 15 -> a at 0.
  DataLoader loader(shard("a.bin", 100, 10) + "," + shard("b.bin", 200, 15), 1, 4, 256);
  ASSERT_EQ(loader.files().size(), 2u);
  EXPECT_EQ(loader.total_tokens(), 25);
  const std::vector<Batch> expected = {
      {{100, 101, 102, 103}, {101, 102, 103, 104}}, {{104, 105, 106, 107}, {105, 106, 107, 108}},
      {{200, 201, 202, 203}, {201, 202, 203, 204}}, {{204, 205, 206, 207}, {205, 206, 207, 208}},
      {{208, 209, 210, 211}, {209, 210, 211, 212}}, {{100, 101, 102, 103}, {101, 102, 103, 104}},
      {{104, 105, 106, 107}, {105, 106, 107, 108}}, {{200, 201, 202, 203}, {201, 202, 203, 204}},
  };
  for (size_t k = 0; k < expected.size(); ++k) {
    const Batch b = next(loader);
    EXPECT_EQ(b.inputs, expected[k].inputs) << "batch " << k;
    EXPECT_EQ(b.targets, expected[k].targets) << "batch " << k;
  }
}

TEST_F(LoaderTest, DataParallelRowSlicesMakeTheGlobalBatch) {
  // B=4, T=2 over 0..29: every D in {1, 2, 4} sees the same global batches, split by rows, for
  // long enough to wrap (30 tokens hold 3 batches of 8 + 1).
  const std::string file = shard("a.bin", 0, 30);
  const int B = 4, T = 2;
  DataLoader serial(file, B, T, 256);
  std::vector<Batch> global;
  for (int k = 0; k < 7; ++k) global.push_back(next(serial));
  EXPECT_EQ(global[1].inputs, (Tokens{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(global[3].inputs, global[0].inputs);  // wrapped

  for (int D : {2, 4}) {
    for (int d = 0; d < D; ++d) {
      DataLoader rank(file, B, T, 256);
      const int row_begin = d * B / D, rows = (d + 1) * B / D - row_begin;
      for (int k = 0; k < 7; ++k) {
        const Batch b = next(rank, row_begin, rows);
        const auto first = global[k].inputs.begin() + row_begin * T;
        EXPECT_EQ(b.inputs, Tokens(first, first + rows * T)) << "D " << D << " d " << d;
        const auto tfirst = global[k].targets.begin() + row_begin * T;
        EXPECT_EQ(b.targets, Tokens(tfirst, tfirst + rows * T)) << "D " << D << " d " << d;
      }
    }
  }
  // Hand-computed: rank 1 of 2 in batch 1 gets rows 2..3, tokens 12..15.
  DataLoader rank1(file, B, T, 256);
  next(rank1, 2, 2);
  const Batch b = next(rank1, 2, 2);
  EXPECT_EQ(b.inputs, (Tokens{12, 13, 14, 15}));
  EXPECT_EQ(b.targets, (Tokens{13, 14, 15, 16}));
}

TEST_F(LoaderTest, ResetRestartsAtTheFirstBatch) {
  DataLoader loader(shard("a.bin", 0, 10) + "," + shard("b.bin", 50, 10), 1, 4, 256);
  const Batch first = next(loader);
  for (int k = 0; k < 3; ++k) next(loader);  // now inside b.bin
  loader.reset();
  const Batch again = next(loader);
  EXPECT_EQ(again.inputs, first.inputs);
  EXPECT_EQ(again.targets, first.targets);
}

TEST_F(LoaderTest, GlobIsSorted) {
  shard("c_02.bin", 20, 5);
  shard("c_00.bin", 0, 5);
  shard("c_01.bin", 10, 5);
  shard("other.bin", 90, 5);
  DataLoader loader(path("c_*.bin"), 1, 4, 256);
  ASSERT_EQ(loader.files().size(), 3u);
  EXPECT_EQ(loader.files()[0].path(), path("c_00.bin"));
  EXPECT_EQ(loader.files()[1].path(), path("c_01.bin"));
  EXPECT_EQ(loader.files()[2].path(), path("c_02.bin"));
  EXPECT_EQ(next(loader).inputs, (Tokens{0, 1, 2, 3}));
  EXPECT_EQ(next(loader).inputs, (Tokens{10, 11, 12, 13}));
  EXPECT_EQ(next(loader).inputs, (Tokens{20, 21, 22, 23}));
  EXPECT_EQ(next(loader).inputs, (Tokens{0, 1, 2, 3}));
}

TEST_F(LoaderTest, CommaListKeepsItsOrder) {
  shard("x.bin", 10, 5);
  shard("y.bin", 20, 5);
  DataLoader loader(path("y.bin") + "," + path("x.bin"), 1, 4, 256);
  ASSERT_EQ(loader.files().size(), 2u);
  EXPECT_EQ(loader.files()[0].path(), path("y.bin"));
  EXPECT_EQ(next(loader).inputs, (Tokens{20, 21, 22, 23}));
  EXPECT_EQ(next(loader).inputs, (Tokens{10, 11, 12, 13}));
}

TEST_F(LoaderTest, TextFile) {
  std::ofstream(path("t.txt")) << "hello world";
  DataLoader loader(path("t.txt"), 2, 2, 256);
  const Batch b = next(loader);
  EXPECT_EQ(b.inputs, (Tokens{'h', 'e', 'l', 'l'}));
  EXPECT_EQ(b.targets, (Tokens{'e', 'l', 'l', 'o'}));
}

TEST_F(LoaderTest, BuiltinCorpus) {
  const Tokens corpus = builtin_corpus("val");
  DataLoader loader("builtin:val", 2, 8, 256);
  ASSERT_EQ(loader.files().size(), 1u);
  EXPECT_EQ(loader.files()[0].path(), "builtin:val");
  EXPECT_EQ(loader.total_tokens(), static_cast<int64_t>(corpus.size()));
  next(loader);
  const Batch b = next(loader);  // starts at B*T = 16
  EXPECT_EQ(b.inputs, Tokens(corpus.begin() + 16, corpus.begin() + 32));
  EXPECT_EQ(b.targets, Tokens(corpus.begin() + 17, corpus.begin() + 33));
  EXPECT_EQ(DataLoader("builtin:train", 2, 8, 256).total_tokens(),
            static_cast<int64_t>(builtin_corpus("train").size()));
}

TEST_F(LoaderTest, UnknownBuiltin) {
  EXPECT_THAT(input_error([] { DataLoader("builtin:test", 1, 4, 256); }),
              AllOf(HasSubstr("builtin:test"), HasSubstr("unknown built-in corpus"),
                    HasSubstr("builtin:train")));
}

TEST_F(LoaderTest, GlobMatchingNothing) {
  EXPECT_THAT(input_error([&] { DataLoader(path("none_*.bin"), 1, 4, 256); }),
              AllOf(HasSubstr(path("none_*.bin")), HasSubstr("matched no files")));
}

TEST_F(LoaderTest, MissingFileInList) {
  const std::string a = shard("a.bin", 0, 10);
  EXPECT_THAT(input_error([&] { DataLoader(a + "," + path("gone.bin"), 1, 4, 256); }),
              AllOf(HasSubstr(path("gone.bin")), HasSubstr("cannot open")));
}

TEST_F(LoaderTest, EmptyPatternOrEntry) {
  EXPECT_THAT(input_error([] { DataLoader("", 1, 4, 256); }), HasSubstr("empty"));
  const std::string a = shard("a.bin", 0, 10);
  EXPECT_THAT(input_error([&] { DataLoader(a + ",", 1, 4, 256); }),
              AllOf(HasSubstr("empty entry"), HasSubstr(a)));
}

TEST_F(LoaderTest, FileShorterThanOneBatch) {
  // B*T+1 = 2*4+1 = 9; the second file holds only 8.
  const std::string list = shard("a.bin", 0, 20) + "," + shard("b.bin", 0, 8);
  EXPECT_THAT(input_error([&] { DataLoader(list, 2, 4, 256); }),
              AllOf(HasSubstr(path("b.bin")), HasSubstr("needs at least B*T+1 = 9 tokens, has 8"),
                    HasSubstr("--batch/--seq-len")));
  // Exactly B*T+1 tokens is enough, and every batch is then the same one.
  DataLoader exact(shard("c.bin", 0, 9), 2, 4, 256);
  EXPECT_EQ(next(exact).targets, (Tokens{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(next(exact).targets, (Tokens{1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST_F(LoaderTest, TokenOutOfVocabNamesTheFile) {
  const std::string list = shard("a.bin", 0, 20) + "," + shard("b.bin", 1000, 20);
  EXPECT_THAT(input_error([&] { DataLoader(list, 1, 4, 1010); }),
              AllOf(HasSubstr(path("b.bin")), HasSubstr("token 1010 at position 10"),
                    HasSubstr(">= vocab 1010")));
}

TEST_F(LoaderTest, NonPositiveBatchOrSequence) {
  const std::string a = shard("a.bin", 0, 20);
  EXPECT_THAT(input_error([&] { DataLoader(a, 0, 4, 256); }), HasSubstr("--batch"));
  EXPECT_THAT(input_error([&] { DataLoader(a, 2, -1, 256); }), HasSubstr("--seq-len"));
}

// A context-parallel rank's rows: chunks i and 2N-1-i of each sequence, in that order; and the
// document starts --doc-mask reads, found on the whole row.
TEST(BatchLayout, ContextParallelChunksAndDocumentStarts) {
  const int rows = 2, T = 16;
  std::vector<int32_t> full(rows * T);
  std::iota(full.begin(), full.end(), 100);
  const PositionRuns mine = PositionRuns::two(4, 4, 8);  // CP rank 1 of 2: chunks 1 and 2 of 4
  std::vector<int32_t> out(rows * mine.rows);
  take_positions(full.data(), rows, T, mine, out.data());
  const std::vector<int32_t> want = {104, 105, 106, 107, 108, 109, 110, 111,
                                     120, 121, 122, 123, 124, 125, 126, 127};
  EXPECT_EQ(out, want);

  const std::vector<int32_t> tokens = {7, 1, 2, 0, 3, 0, 0, 5,   // docs start at 3, 5 and 6
                                       0, 1, 1, 1, 1, 1, 1, 1};  // one doc from position 0
  std::vector<int32_t> starts(tokens.size());
  document_starts(tokens.data(), 2, 8, 0, starts.data());
  const std::vector<int32_t> expected = {0, 0, 0, 3, 3, 5, 6, 6, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(starts, expected);
  // An end-of-sequence token ends its document: the next starts after it.
  document_starts(tokens.data(), 2, 8, 0, starts.data(), /*after=*/true);
  const std::vector<int32_t> after = {0, 0, 0, 0, 4, 4, 6, 7, 0, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_EQ(starts, after);
}

}  // namespace
}  // namespace mpf
