// mpiformer-tokenize's run under mpiexec (1, 2 and 4 ranks) with a byte-level encoder: the shards
// hold exactly the serial stream (the document token, then the document's bytes, document after
// document) cut at the validation split and every shard_tokens, whatever the rank count and the
// work unit size, documents of millions of tokens included; the manifest agrees with the files;
// bad input is one InputError on every rank and leaves nothing behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data/tokenize_run.hpp"
#include "io/json.hpp"
#include "io/sha256.hpp"
#include "parallel/grid.hpp"
#include "test_helpers.hpp"

namespace mpf {
namespace {

using test::rank_of;
using ::testing::HasSubstr;

// Token = byte; the document token is the last id.
DocumentEncoder byte_encoder(int64_t vocab) {
  DocumentEncoder e;
  e.encode = [](std::string_view text, bool, std::vector<int32_t>& out) {
    out.insert(out.end(), reinterpret_cast<const unsigned char*>(text.data()),
               reinterpret_cast<const unsigned char*>(text.data()) + text.size());
  };
  e.cut = [](std::string_view text, size_t) { return text.size(); };  // any byte is a cut
  e.vocab_size = vocab;
  e.doc_token = int32_t(vocab - 1);
  e.before = {e.doc_token};
  e.doc_token_text = "<|endoftext|>";
  return e;
}

struct Shard {
  std::vector<int32_t> header;
  std::vector<int64_t> tokens;
};

Shard read_shard(const std::string& path, int width) {
  std::ifstream in(path, std::ios::binary);
  Shard s;
  s.header.resize(256);
  in.read(reinterpret_cast<char*>(s.header.data()), 1024);
  std::vector<char> body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t i = 0; i + width <= body.size(); i += size_t(width)) {
    uint32_t v = 0;
    std::memcpy(&v, body.data() + i, size_t(width));
    s.tokens.push_back(v);
  }
  return s;
}

class TokenizeRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir;
    if (rank_of(world_) == 0) {
      char tmpl[] = "/tmp/mpf_tokenize_XXXXXX";
      ASSERT_NE(mkdtemp(tmpl), nullptr);
      dir = tmpl;
      write_corpus(dir);
    }
    dir_ = broadcast(dir, 0, world_);
  }
  void TearDown() override {
    MPI_Barrier(world_);
    if (rank_of(world_) == 0) std::filesystem::remove_all(dir_);
  }
  // Documents in corpus order: a.txt, b.txt (empty), c.jsonl's lines, d.txt (longer than a shard).
  void write_corpus(const std::string& dir) const {
    std::filesystem::create_directories(dir + "/in");
    test::write_file(dir + "/in/a.txt", docs_[0]);
    test::write_file(dir + "/in/b.txt", docs_[1]);
    test::write_file(dir + "/in/c.jsonl",
                     "{\"text\": " + json::quote(docs_[2]) + ", \"id\": 1}\n\n   \n" +
                         "{\"id\": 2, \"text\": " + json::quote(docs_[3]) + "}\r\n" +
                         "{\"text\": \"\"}");  // the last line has no newline
    test::write_file(dir + "/in/d.txt", docs_[5]);
  }
  std::vector<int64_t> serial_stream(int32_t doc_token) const {
    std::vector<int64_t> s;
    for (const auto& d : docs_) {
      s.push_back(doc_token);
      for (unsigned char c : d) s.push_back(c);
    }
    return s;
  }
  TokenizeOptions options(const std::string& out) const {
    TokenizeOptions o;
    o.inputs = {dir_ + "/in/a.txt", dir_ + "/in/b.txt", dir_ + "/in/c.jsonl", dir_ + "/in/d.txt"};
    o.tokenizer = "bytes.json";
    o.output_dir = dir_ + "/" + out;
    o.name = "t";
    o.shard_tokens = 100;
    o.val_tokens = 20;
    return o;
  }
  MPI_Comm world_ = MPI_COMM_WORLD;
  std::string dir_;
  // Rank 0 writes them; every rank builds the expected stream from them.
  const std::vector<std::string> docs_ = {
      "first document\n",           "", "h\xc3\xa9llo \xe2\x82\xac",
      "line \"two\"\nwith newline", "", std::string(300, 'x') + "end"};
};

TEST_F(TokenizeRunTest, ShardsAreTheSerialStreamForAnyUnitSize) {
  const std::vector<int64_t> stream = serial_stream(256);
  // The validation split: whole documents up to the one holding token 19 (documents 0..2).
  const int64_t val_end = int64_t(1 + docs_[0].size() + 1 + docs_[1].size() + 1 + docs_[2].size());
  ASSERT_GE(val_end, 20);
  int run = 0;
  for (int64_t unit : {int64_t(16), int64_t(1) << 20}) {
    TokenizeOptions o = options("out" + std::to_string(run++));
    o.unit_bytes = unit;
    const TokenizeSummary sum = run_tokenize(o, byte_encoder(257), "abc", world_);
    EXPECT_EQ(sum.documents, 6);
    EXPECT_EQ(sum.tokens, int64_t(stream.size()));
    // val: [0, val_end); train: 100-token shards from val_end.
    const int64_t train = int64_t(stream.size()) - val_end;
    const int64_t n_train = (train + 99) / 100;
    ASSERT_EQ(sum.shards, 1 + n_train);
    std::vector<int64_t> joined;
    for (int64_t i = 0; i <= n_train; ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "t_%s_%06lld.bin", i == 0 ? "val" : "train", (long long)i);
      const Shard s = read_shard(o.output_dir + "/" + name, 2);
      EXPECT_EQ(s.header[0], 20240520) << name;
      EXPECT_EQ(s.header[1], 1) << name;
      const int64_t expected = i == 0 ? val_end : std::min<int64_t>(100, train - (i - 1) * 100);
      EXPECT_EQ(s.header[2], expected) << name << " unit " << unit;
      EXPECT_EQ(int64_t(s.tokens.size()), expected) << name;
      joined.insert(joined.end(), s.tokens.begin(), s.tokens.end());
    }
    EXPECT_EQ(joined, stream) << "unit " << unit;
    // The manifest: counts and checksums of the files as they are.
    const json::Value m = json::parse(test::read_file(o.output_dir + "/manifest.json"), "manifest");
    EXPECT_EQ(m.find("documents")->integer(), 6);
    EXPECT_EQ(m.find("val_documents")->integer(), 3);
    EXPECT_EQ(m.find("tokens")->integer(), int64_t(stream.size()));
    EXPECT_EQ(m.find("tokenizer")->find("sha256")->string(), "abc");
    const auto& shards = m.find("shards")->array();
    ASSERT_EQ(int64_t(shards.size()), 1 + n_train);
    for (const auto& s : shards) {
      const std::string file = o.output_dir + "/" + s.find("file")->string();
      EXPECT_EQ(s.find("sha256")->string(), sha256_of_file(file, file));
    }
    for (const auto& entry : std::filesystem::directory_iterator(o.output_dir)) {
      EXPECT_EQ(entry.path().string().find(".partial"), std::string::npos) << entry.path();
    }
  }
}

TEST_F(TokenizeRunTest, LargeVocabularyWritesUint32Shards) {
  TokenizeOptions o = options("wide");
  o.val_tokens = 0;
  o.shard_tokens = 1000;
  o.unit_bytes = 64;
  run_tokenize(o, byte_encoder(70000), "abc", world_);
  const Shard s = read_shard(o.output_dir + "/t_train_000000.bin", 4);
  EXPECT_EQ(s.header[0], 20240801);
  EXPECT_EQ(s.header[1], 7);
  EXPECT_EQ(s.tokens, serial_stream(69999));
}

// A unit's tokens past what a rank keeps in memory wait in a spool file: documents of millions of
// tokens come out as the serial stream all the same, and a document skipped at its last byte
// (--invalid-utf8 skip-document) is taken back, spilled tokens too; the manifest lists it.
TEST_F(TokenizeRunTest, LargeDocumentsSpillAndASkippedOneIsTakenBack) {
  std::string big;
  for (int i = 0; big.size() < (size_t(5) << 19); ++i) big += "line " + std::to_string(i) + "\n";
  if (rank_of(world_) == 0) {
    test::write_file(dir_ + "/in/big.txt", big);
    test::write_file(dir_ + "/in/bad.txt", big + "\xff");
    test::write_file(dir_ + "/in/end.txt", "end");
  }
  MPI_Barrier(world_);
  std::vector<int64_t> stream = {256};
  stream.insert(stream.end(), big.begin(), big.end());
  stream.insert(stream.end(), {256, 'e', 'n', 'd'});
  DocumentEncoder e = byte_encoder(257);
  e.invalid_utf8 = InvalidUtf8::kSkipDocument;
  int run = 0;
  for (int64_t unit : {int64_t(1), int64_t(1) << 30}) {  // a file a unit; all in rank 0's
    TokenizeOptions o = options("spill" + std::to_string(run++));
    o.inputs = {dir_ + "/in/big.txt", dir_ + "/in/bad.txt", dir_ + "/in/end.txt"};
    o.val_tokens = 0;
    o.shard_tokens = int64_t(1) << 30;
    o.unit_bytes = unit;
    o.invalid_utf8 = InvalidUtf8::kSkipDocument;
    const TokenizeSummary sum = run_tokenize(o, e, "abc", world_);
    EXPECT_EQ(sum.documents, 2);
    EXPECT_EQ(read_shard(o.output_dir + "/t_train_000000.bin", 2).tokens, stream)
        << "unit " << unit;
    const json::Value m = json::parse(test::read_file(o.output_dir + "/manifest.json"), "manifest");
    EXPECT_EQ(m.find("repairs")->find("skipped_documents")->integer(), 1);
    const auto& listed = m.find("repaired_documents")->array();
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_EQ(listed[0].find("input")->string(), dir_ + "/in/bad.txt");
    EXPECT_TRUE(listed[0].find("skipped")->boolean());
    for (const auto& entry : std::filesystem::directory_iterator(o.output_dir)) {
      EXPECT_EQ(entry.path().filename().string().find("spool"), std::string::npos) << entry.path();
    }
  }
}

TEST_F(TokenizeRunTest, BadInputIsOneErrorAndLeavesNothing) {
  if (rank_of(world_) == 0) {
    test::write_file(dir_ + "/in/bad.jsonl",
                     "{\"text\": \"ok\"}\n{\"text\": \"ok\"}\n{\"text: 1}\n");
    test::write_file(dir_ + "/in/nofield.jsonl", "{\"text\": \"ok\"}\n\n{\"body\": \"x\"}\n");
    test::write_file(dir_ + "/in/array.jsonl", "[1, 2]\n");
  }
  MPI_Barrier(world_);
  auto fails = [&](const std::string& out, const std::vector<std::string>& inputs) {
    TokenizeOptions o = options(out);
    o.unit_bytes = 64;
    if (!inputs.empty()) o.inputs = inputs;
    return test::input_error([&] { run_tokenize(o, byte_encoder(257), "abc", world_); });
  };
  std::string msg = fails("o1", {dir_ + "/in/a.txt", dir_ + "/in/bad.jsonl"});
  EXPECT_THAT(msg, HasSubstr(dir_ + "/in/bad.jsonl:3: invalid JSON"));
  msg = fails("o2", {dir_ + "/in/nofield.jsonl"});
  EXPECT_THAT(msg, HasSubstr(dir_ + "/in/nofield.jsonl:3: no \"text\" field"));
  EXPECT_THAT(msg, HasSubstr("--text-field"));
  msg = fails("o3", {dir_ + "/in/array.jsonl"});
  EXPECT_THAT(msg, HasSubstr("array.jsonl:1: the line is an array, not an object"));
  msg = fails("o4", {dir_ + "/in/missing.txt"});
  EXPECT_THAT(msg, HasSubstr("missing.txt: cannot open"));
  // Everything in the validation split.
  {
    TokenizeOptions o = options("o5");
    o.val_tokens = 100000;
    msg = test::input_error([&] { run_tokenize(o, byte_encoder(257), "abc", world_); });
    EXPECT_THAT(msg, HasSubstr("leaving none to train on"));
  }
  MPI_Barrier(world_);
  for (const char* out : {"o1", "o2", "o3", "o5"}) {
    const std::string d = dir_ + "/" + out;
    if (!std::filesystem::exists(d)) continue;
    EXPECT_TRUE(std::filesystem::is_empty(d)) << d << " holds files after a failed run";
  }
  // An existing data set is never overwritten.
  TokenizeOptions o = options("o6");
  run_tokenize(o, byte_encoder(257), "abc", world_);
  MPI_Barrier(world_);
  msg = test::input_error([&] { run_tokenize(o, byte_encoder(257), "abc", world_); });
  EXPECT_THAT(msg, HasSubstr("already holds manifest.json"));
}

}  // namespace
}  // namespace mpf
