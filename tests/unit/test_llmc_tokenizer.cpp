// llm.c's tokenizer file: written here byte by byte from the format (llm.c's llmc/tokenizer.h;
// docs/file-formats.md), read back, known ids decoded; every malformed file refused with a
// message naming the problem.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/llmc_tokenizer.hpp"
#include "test_helpers.hpp"

namespace mpf {

namespace {

struct TokenizerFile {
  int32_t magic = 20240328, version = 2, eot = 0;
  std::optional<int32_t> vocab;  // default: the pieces' count
  std::vector<std::string> pieces;
  std::string trailer;  // bytes after the records
  size_t cut = 0;       // bytes cut off the end

  void write(const std::string& path) const {
    std::vector<int32_t> header(256, 0);
    header[0] = magic;
    header[1] = version;
    header[2] = vocab.value_or(int32_t(pieces.size()));
    header[3] = eot;
    std::string bytes(reinterpret_cast<const char*>(header.data()), 1024);
    for (const std::string& p : pieces) bytes += char(uint8_t(p.size())) + p;
    bytes += trailer;
    bytes.resize(bytes.size() - cut);
    std::ofstream(path, std::ios::binary) << bytes;
  }
};

// GPT-2-like pieces: a byte, a leading-space word, a character split over two tokens (é is
// C3 A9 in UTF-8), and the end-of-text marker.
const std::vector<std::string> kPieces = {"!", " the", "\xC3", "\xA9", "<|endoftext|>", "cat"};

class TokenizerFileTest : public test::ScratchDirTest {
 protected:
  std::string error_for(const TokenizerFile& f) {
    f.write(path("tok.bin"));
    return test::input_error([&] { read_tokenizer(path("tok.bin")); });
  }
};

}  // namespace

TEST_F(TokenizerFileTest, RoundTripDecodesKnownIds) {
  TokenizerFile f;
  f.pieces = kPieces;
  f.eot = 4;
  f.write(path("v2.bin"));
  const Tokenizer t = read_tokenizer(path("v2.bin"));
  EXPECT_EQ(t.version, 2);
  EXPECT_EQ(t.vocab(), 6);
  EXPECT_EQ(t.eot, 4);
  std::string text;
  for (const int32_t id : {1, 5, 0, 1, 2, 3}) text += t.decode(id);
  EXPECT_EQ(text, " thecat! the\xC3\xA9");  // the two halves of é join into one character

  // Version 1 has no end-of-text slot: none, unless the vocabulary is GPT-2's 50257 tokens.
  f.version = 1;
  f.eot = 99;  // ignored: version 1 does not have the slot
  f.write(path("v1.bin"));
  EXPECT_EQ(read_tokenizer(path("v1.bin")).eot, -1);
  f.pieces.assign(50257, "x");
  f.write(path("gpt2_v1.bin"));
  const Tokenizer gpt2 = read_tokenizer(path("gpt2_v1.bin"));
  EXPECT_EQ(gpt2.eot, 50256);
  EXPECT_EQ(gpt2.vocab(), 50257);
}

TEST_F(TokenizerFileTest, MalformedFilesAreRefused) {
  TokenizerFile good;
  good.pieces = kPieces;
  good.eot = 4;
  // Each case: what is wrong with the file, and what the message must say.
  const std::vector<std::pair<std::function<void(TokenizerFile&)>, std::string>> cases = {
      {[](auto& f) { f.magic = 20240326; },
       "bad magic 20240326 (expected 20240328): an llm.c model file"},
      {[](auto& f) { f.magic = 20240520; }, "an llm.c token shard"},
      {[](auto& f) { f.version = 3; }, "unsupported version 3"},
      {[](auto& f) { f.vocab = 0; }, "vocabulary size 0 is not positive"},
      {[](auto& f) { f.vocab = -5; }, "vocabulary size -5 is not positive"},
      // A header asking for more than the file holds (nothing of it is allocated).
      {[](auto& f) { f.vocab = 1 << 30; }, "ends after 6 of 1073741824 tokens"},
      {[](auto& f) { f.eot = 6; }, "end-of-text id 6 is outside the vocabulary of 6 tokens"},
      {[](auto& f) { f.eot = -1; }, "end-of-text id -1"},
      {[](auto& f) { f.vocab = 7; }, "ends after 6 of 7 tokens"},
      {[](auto& f) { f.cut = 2; }, "token 5 (3 bytes) runs past the end of the file"},
      {[](auto& f) { f.pieces[2] = ""; }, "token 2 has length 0"},
      {[](auto& f) { f.trailer = "xyz"; }, "3 bytes after the last of its 6 tokens"},
      {[](auto& f) {
         f.pieces.clear();
         f.vocab = 6;
         f.cut = 1000;  // 24 bytes: not even the header
       },
       "too short for the 1024-byte header"},
  };
  for (const auto& [damage, fragment] : cases) {
    TokenizerFile f = good;
    damage(f);
    const std::string message = error_for(f);
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
    EXPECT_NE(message.find("tok.bin"), std::string::npos) << message;
  }
  EXPECT_NE(test::input_error([&] { read_tokenizer(path("missing.bin")); }).find("cannot open"),
            std::string::npos);
  EXPECT_NE(test::input_error([&] { read_tokenizer(dir_); }).find("not a regular file"),
            std::string::npos);
}

}  // namespace mpf
