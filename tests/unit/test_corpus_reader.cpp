// The corpus reader: inputs resolve in the order given (directories and globs sorted), and the
// work units, however small, hold every document exactly once and in order: a .jsonl line belongs
// to the unit its first byte lies in.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data/corpus_reader.hpp"
#include "test_helpers.hpp"

namespace mpf {
namespace {

using test::input_error;
using ::testing::HasSubstr;

class CorpusReaderTest : public test::ScratchDirTest {
 protected:
  std::vector<std::string> documents(const std::vector<CorpusFile>& files, int64_t unit) const {
    std::vector<std::string> docs;
    for (const CorpusUnit& u : plan_units(files, unit)) {
      int64_t bytes = 0;
      for (const CorpusPiece& p : u) bytes += p.end - p.begin;
      // Only a text file (one document, never cut) overfills a unit.
      EXPECT_TRUE(bytes <= unit || files[size_t(u.back().file)].format == CorpusFormat::kText);
      std::string doc;
      read_unit(files, u, "text", [&](std::string_view chunk, bool last) {
        doc += chunk;
        if (last) docs.push_back(std::move(doc)), doc.clear();
      });
      EXPECT_TRUE(doc.empty()) << "a document without its last chunk";
    }
    return docs;
  }
};

TEST_F(CorpusReaderTest, EveryUnitSizeGivesEveryDocumentOnceInOrder) {
  test::write_file(path("a.txt"), "first\nfile");
  test::write_file(path("e.txt"), "");
  // CRLF, a blank line, escapes, a long line and no newline at the end.
  test::write_file(path("c.jsonl"),
                   "{\"text\": \"one\"}\r\n\n{\"id\": 7, \"text\": \"t\\u00e9\\n2\"}\n" +
                       std::string("{\"text\": \"") + std::string(50, 'z') +
                       "\"}\n  \n{\"text\": \"\"}\n{\"text\": \"last\"}");
  const std::vector<CorpusFile> files =
      resolve_corpus({path("a.txt"), path("e.txt"), path("c.jsonl")});
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[2].format, CorpusFormat::kJsonl);
  const std::vector<std::string> expected = {"first\nfile",        "", "one", "t\xc3\xa9\n2",
                                             std::string(50, 'z'), "", "last"};
  for (int64_t unit = 1; unit <= 120; ++unit) {
    EXPECT_EQ(documents(files, unit), expected) << "unit " << unit;
  }
}

TEST_F(CorpusReaderTest, DirectoriesAndGlobsAreSortedInputsKeepTheirOrder) {
  std::filesystem::create_directories(path("d/sub"));
  test::write_file(path("d/sub/b.txt"), "b");
  test::write_file(path("d/a.jsonl"), "{\"text\": \"a\"}\n");
  test::write_file(path("d/skip.md"), "not a corpus file");
  test::write_file(path("z.txt"), "z");
  test::write_file(path("g1.txt"), "1");
  test::write_file(path("g2.txt"), "2");
  const std::vector<CorpusFile> files = resolve_corpus({path("z.txt"), path("d"), path("g*.txt")});
  std::vector<std::string> names;
  for (const auto& f : files) names.push_back(f.path.substr(dir_.size() + 1));
  EXPECT_EQ(names,
            (std::vector<std::string>{"z.txt", "d/a.jsonl", "d/sub/b.txt", "g1.txt", "g2.txt"}));
  EXPECT_EQ(documents(files, 1 << 20), (std::vector<std::string>{"z", "a", "b", "1", "2"}));
}

TEST_F(CorpusReaderTest, BadInputs) {
  EXPECT_THAT(input_error([&] { resolve_corpus({path("missing.txt")}); }),
              HasSubstr("missing.txt: cannot open"));
  EXPECT_THAT(input_error([&] { resolve_corpus({path("nothing*.txt")}); }),
              HasSubstr("matched no files"));
  std::filesystem::create_directories(path("empty"));
  EXPECT_THAT(input_error([&] { resolve_corpus({path("empty")}); }),
              HasSubstr("holds no .txt or .jsonl file"));
  test::write_file(path("s.jsonl"), "{\"text\": 5}\n");
  const auto files = resolve_corpus({path("s.jsonl")});
  EXPECT_THAT(input_error([&] { documents(files, 100); }),
              HasSubstr("s.jsonl:1: the \"text\" field is a number, not a string"));
}

}  // namespace
}  // namespace mpf
