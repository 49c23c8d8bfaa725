// TokenStream: llm.c shards and text files load to the expected tokens; every malformed input is
// an InputError naming the file, the problem and the fix.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data/token_stream.hpp"
#include "test_helpers.hpp"

namespace mpf {
namespace {

using test::input_error;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::vector<int32_t> all_tokens(const TokenStream& s) {
  std::vector<int32_t> v(s.size());
  s.read(0, s.size(), v.data());
  return v;
}

class TokenStreamTest : public test::ScratchDirTest {
 protected:
  std::string write_bytes(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }
  // A shard with an arbitrary header and payload, for the malformed cases write_shard refuses.
  template <class T = uint16_t>
  std::string write_raw_shard(const std::string& name, int32_t magic, int32_t version, int32_t n,
                              const std::vector<T>& tokens) const {
    std::vector<int32_t> header(256, 0);
    header[0] = magic;
    header[1] = version;
    header[2] = n;
    std::ofstream out(path(name), std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    out.write(reinterpret_cast<const char*>(tokens.data()), sizeof(T) * tokens.size());
    return path(name);
  }
};

TEST_F(TokenStreamTest, ShardRoundTrip) {
  const std::vector<uint16_t> tokens = {50256, 0, 1, 65535, 464, 50256};
  write_shard(path("a.bin"), tokens);
  EXPECT_EQ(std::filesystem::file_size(path("a.bin")), 1024u + 2 * tokens.size());

  TokenStream s(path("a.bin"), 65536);
  EXPECT_TRUE(s.is_shard());
  EXPECT_EQ(s.path(), path("a.bin"));
  ASSERT_EQ(s.size(), 6);
  EXPECT_EQ(all_tokens(s), (std::vector<int32_t>{50256, 0, 1, 65535, 464, 50256}));
}

TEST_F(TokenStreamTest, ShardHeaderIsLlmcLayout) {
  write_shard(path("a.bin"), {7, 8, 9});
  std::ifstream in(path("a.bin"), std::ios::binary);
  std::vector<int32_t> header(256);
  in.read(reinterpret_cast<char*>(header.data()), 1024);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 3);
  for (int i = 3; i < 256; ++i) EXPECT_EQ(header[i], 0) << "slot " << i;
  uint16_t payload[3];
  in.read(reinterpret_cast<char*>(payload), sizeof payload);
  EXPECT_EQ(payload[0], 7);
  EXPECT_EQ(payload[2], 9);
}

TEST_F(TokenStreamTest, Uint32ShardRoundTrip) {
  // Llama 3's vocabulary (128,256) needs ids above 65,535.
  const std::vector<uint32_t> tokens = {128000, 0, 65535, 65536, 128255, 9906};
  write_shard_uint32(path("l.bin"), tokens);
  EXPECT_EQ(std::filesystem::file_size(path("l.bin")), 1024u + 4 * tokens.size());
  TokenStream s(path("l.bin"), 128256);
  EXPECT_TRUE(s.is_shard());
  EXPECT_EQ(s.width(), 4);
  EXPECT_EQ(all_tokens(s), (std::vector<int32_t>{128000, 0, 65535, 65536, 128255, 9906}));
  std::vector<int32_t> middle(3);
  s.read(2, 3, middle.data());
  EXPECT_EQ(middle, (std::vector<int32_t>{65535, 65536, 128255}));
  EXPECT_EQ(s.token(4), 128255);
}

TEST_F(TokenStreamTest, Uint32ShardHeaderIsLlmcLlama3Layout) {
  write_shard_uint32(path("l.bin"), std::vector<uint32_t>{70000, 8});
  std::ifstream in(path("l.bin"), std::ios::binary);
  std::vector<int32_t> header(256);
  in.read(reinterpret_cast<char*>(header.data()), 1024);
  EXPECT_EQ(header[0], 20240801);
  EXPECT_EQ(header[1], 7);
  EXPECT_EQ(header[2], 2);
  for (int i = 3; i < 256; ++i) EXPECT_EQ(header[i], 0) << "slot " << i;
  uint32_t payload[2];
  in.read(reinterpret_cast<char*>(payload), sizeof payload);
  EXPECT_EQ(payload[0], 70000u);
  EXPECT_EQ(payload[1], 8u);
}

TEST_F(TokenStreamTest, Uint32ShardChecks) {
  write_raw_shard<uint32_t>("v1.bin", llmc::kShardMagicUint32, 1, 2, {1, 2});
  EXPECT_THAT(input_error([&] { TokenStream(path("v1.bin"), 256); }),
              AllOf(HasSubstr(path("v1.bin")), HasSubstr("version 1"), HasSubstr("only version 7"),
                    HasSubstr("regenerate")));
  // 3 uint32 tokens promised, 5 uint16-sized tokens' worth of bytes present: 1034 != 1036.
  write_raw_shard<uint16_t>("half.bin", llmc::kShardMagicUint32, 7, 3, {1, 2, 3, 4, 5});
  EXPECT_THAT(input_error([&] { TokenStream(path("half.bin"), 256); }),
              AllOf(HasSubstr("3 tokens of 4 bytes"), HasSubstr("expected 1036 bytes"),
                    HasSubstr("has 1034")));
  write_shard_uint32(path("big.bin"), std::vector<uint32_t>{1, 128256, 4000000000u});
  EXPECT_THAT(input_error([&] { TokenStream(path("big.bin"), 128256); }),
              AllOf(HasSubstr(path("big.bin")), HasSubstr("token 128256 at position 1"),
                    HasSubstr(">= vocab 128256"), HasSubstr("pass --vocab 4000000001")));
}

TEST_F(TokenStreamTest, LargeShardCrossesReadChunks) {
  // More tokens than one read chunk (2^20), so the chunked copy is exercised at its seams.
  std::vector<uint16_t> tokens((1 << 20) + 1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i * 7919 % 50257);
  write_shard(path("big.bin"), tokens);
  TokenStream s(path("big.bin"), 50257);
  ASSERT_EQ(s.size(), static_cast<int64_t>(tokens.size()));
  for (size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(s.token(i), tokens[i]) << "at " << i;
}

TEST_F(TokenStreamTest, TextFileIsOneTokenPerByte) {
  write_bytes("t.txt", std::string("Hi\n\xff\x00!", 6));
  TokenStream s(path("t.txt"), 256);
  EXPECT_FALSE(s.is_shard());
  EXPECT_EQ(all_tokens(s), (std::vector<int32_t>{'H', 'i', '\n', 255, 0, '!'}));
}

TEST_F(TokenStreamTest, LongTextFileReadsPastTheHeaderSizedPrefix) {
  std::string text;
  for (int i = 0; i < 3000; ++i) text += static_cast<char>('a' + i % 26);
  write_bytes("long.txt", text);
  TokenStream s(path("long.txt"), 256);
  ASSERT_EQ(s.size(), 3000);
  for (int i = 0; i < 3000; ++i) ASSERT_EQ(s.token(i), 'a' + i % 26) << "at " << i;
}

TEST_F(TokenStreamTest, ShortTextFileWithoutBinSuffixIsText) {
  write_bytes("short.txt", "abc");
  TokenStream s(path("short.txt"), 256);
  EXPECT_EQ(s.size(), 3);
}

TEST_F(TokenStreamTest, InMemoryStream) {
  TokenStream s("builtin:test", {3, 1, 4, 1, 5}, 10);
  EXPECT_EQ(s.path(), "builtin:test");
  EXPECT_FALSE(s.is_shard());
  EXPECT_EQ(all_tokens(s), (std::vector<int32_t>{3, 1, 4, 1, 5}));
}

TEST_F(TokenStreamTest, MissingFile) {
  const std::string msg = input_error([&] { TokenStream(path("nope.bin"), 256); });
  EXPECT_THAT(msg, AllOf(HasSubstr(path("nope.bin")), HasSubstr("cannot open"),
                         HasSubstr("No such file"), HasSubstr("check the path")));
}

TEST_F(TokenStreamTest, DirectoryIsNotAFile) {
  const std::string msg = input_error([&] { TokenStream(dir_, 256); });
  EXPECT_THAT(msg, AllOf(HasSubstr(dir_), HasSubstr("not a regular file")));
}

TEST_F(TokenStreamTest, EmptyFile) {
  write_bytes("empty.txt", "");
  const std::string msg = input_error([&] { TokenStream(path("empty.txt"), 256); });
  EXPECT_THAT(msg, AllOf(HasSubstr(path("empty.txt")), HasSubstr("empty")));
}

TEST_F(TokenStreamTest, ShortBinFileIsACorruptShardNotText) {
  write_bytes("short.bin", "0123456789");
  const std::string msg = input_error([&] { TokenStream(path("short.bin"), 256); });
  EXPECT_THAT(msg, AllOf(HasSubstr(path("short.bin")), HasSubstr("10 bytes"),
                         HasSubstr("too short"), HasSubstr("1024"), HasSubstr("regenerate")));
}

TEST_F(TokenStreamTest, TruncatedShardHeader) {
  // The magic is there but the header stops after 100 bytes; the name does not end in .bin.
  std::string bytes(100, '\0');
  const int32_t magic = llmc::kShardMagic;
  std::memcpy(&bytes[0], &magic, 4);
  write_bytes("cut.shard", bytes);
  const std::string msg = input_error([&] { TokenStream(path("cut.shard"), 256); });
  EXPECT_THAT(msg,
              AllOf(HasSubstr(path("cut.shard")), HasSubstr("100 bytes"), HasSubstr("too short")));
}

TEST_F(TokenStreamTest, WrongShardVersion) {
  write_raw_shard("v2.bin", llmc::kShardMagic, 2, 3, {1, 2, 3});
  const std::string msg = input_error([&] { TokenStream(path("v2.bin"), 256); });
  EXPECT_THAT(msg, AllOf(HasSubstr(path("v2.bin")), HasSubstr("version 2"),
                         HasSubstr("only version 1"), HasSubstr("regenerate")));
}

TEST_F(TokenStreamTest, CorruptTokenCount) {
  write_raw_shard("neg.bin", llmc::kShardMagic, 1, -5, {1, 2, 3});
  const std::string msg = input_error([&] { TokenStream(path("neg.bin"), 256); });
  EXPECT_THAT(
      msg, AllOf(HasSubstr(path("neg.bin")), HasSubstr("corrupt shard header"), HasSubstr("-5")));
}

TEST_F(TokenStreamTest, ShardSizeMismatch) {
  // Header promises 10 tokens, the file holds 8: 1040 bytes instead of 1044.
  write_raw_shard("trunc.bin", llmc::kShardMagic, 1, 10, std::vector<uint16_t>(8, 1));
  const std::string msg = input_error([&] { TokenStream(path("trunc.bin"), 256); });
  EXPECT_THAT(
      msg, AllOf(HasSubstr(path("trunc.bin")), HasSubstr("10 tokens"),
                 HasSubstr("expected 1044 bytes"), HasSubstr("has 1040"), HasSubstr("regenerate")));
}

TEST_F(TokenStreamTest, ShardWithTrailingBytes) {
  write_raw_shard("long.bin", llmc::kShardMagic, 1, 2, std::vector<uint16_t>(3, 1));
  const std::string msg = input_error([&] { TokenStream(path("long.bin"), 256); });
  EXPECT_THAT(msg, AllOf(HasSubstr("expected 1028 bytes"), HasSubstr("has 1030")));
}

TEST_F(TokenStreamTest, ShardTokenOutOfVocab) {
  write_shard(path("big.bin"), {1, 50256, 50300, 2, 50299});
  const std::string msg = input_error([&] { TokenStream(path("big.bin"), 50257); });
  EXPECT_THAT(msg, AllOf(HasSubstr(path("big.bin")), HasSubstr("token 50300 at position 2"),
                         HasSubstr(">= vocab 50257"), HasSubstr("pass --vocab 50301"),
                         HasSubstr("regenerate the shard")));
}

TEST_F(TokenStreamTest, TextByteOutOfVocab) {
  write_bytes("t.txt", "abz");
  const std::string msg = input_error([&] { TokenStream(path("t.txt"), 100); });
  EXPECT_THAT(
      msg, AllOf(HasSubstr(path("t.txt")), HasSubstr("text"), HasSubstr("token 122 at position 2"),
                 HasSubstr(">= vocab 100"), HasSubstr("256")));
}

TEST_F(TokenStreamTest, CheckpointPassedAsData) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240326;
  header[1] = 3;
  std::ofstream(path("model.bin"), std::ios::binary)
      .write(reinterpret_cast<const char*>(header.data()), 1024);
  const std::string msg = input_error([&] { TokenStream(path("model.bin"), 50257); });
  EXPECT_THAT(msg, AllOf(HasSubstr(path("model.bin")), HasSubstr("model checkpoint")));
}

TEST_F(TokenStreamTest, InMemoryBadInput) {
  EXPECT_THAT(
      input_error([] {
        TokenStream("mem", {1, 300, 2}, 256);
      }),
      AllOf(HasSubstr("mem"), HasSubstr("token 300 at position 1"), HasSubstr(">= vocab 256")));
  EXPECT_THAT(input_error([] {
                TokenStream("mem", {1, -1}, 256);
              }),
              AllOf(HasSubstr("mem"), HasSubstr("token -1 at position 1"), HasSubstr("negative")));
  EXPECT_THAT(input_error([] { TokenStream("mem", std::vector<int32_t>{}, 256); }),
              AllOf(HasSubstr("mem"), HasSubstr("no tokens")));
}

TEST_F(TokenStreamTest, NonPositiveVocab) {
  write_bytes("t.txt", "abc");
  EXPECT_THAT(input_error([&] { TokenStream(path("t.txt"), 0); }),
              AllOf(HasSubstr(path("t.txt")), HasSubstr("vocab must be positive")));
}

TEST_F(TokenStreamTest, WriteShardRefusesToOverwrite) {
  write_shard(path("a.bin"), {1, 2, 3});
  const std::string msg = input_error([&] { write_shard(path("a.bin"), {4, 5}); });
  EXPECT_THAT(msg, AllOf(HasSubstr(path("a.bin")), HasSubstr("already exists")));
  TokenStream s(path("a.bin"), 256);  // the original is untouched
  EXPECT_EQ(all_tokens(s), (std::vector<int32_t>{1, 2, 3}));
}

TEST_F(TokenStreamTest, WriteShardRejectsEmptyAndMissingDirectory) {
  EXPECT_THAT(input_error([&] { write_shard(path("e.bin"), {}); }),
              AllOf(HasSubstr(path("e.bin")), HasSubstr("0 tokens")));
  EXPECT_THAT(input_error([&] { write_shard(path("no/such/dir.bin"), {1}); }),
              AllOf(HasSubstr("no/such/dir.bin"), HasSubstr("cannot create")));
}

}  // namespace
}  // namespace mpf
