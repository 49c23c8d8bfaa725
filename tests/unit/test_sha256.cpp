// SHA-256 against FIPS 180-4's examples (NIST's published digests), fed whole and in pieces that
// cross the 64-byte blocks.
#include <gtest/gtest.h>

#include <string>

#include "io/sha256.hpp"

namespace mpf {
namespace {

std::string sha256(const std::string& s, size_t piece) {
  Sha256 h;
  for (size_t at = 0; at < s.size(); at += piece) h.update(s.substr(at, piece));
  return h.hex();
}

TEST(Sha256, FipsExamples) {
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  for (size_t piece : {size_t(1), size_t(3), size_t(63), size_t(64), size_t(1000)}) {
    EXPECT_EQ(sha256("", piece),
              "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha256("abc", piece),
              "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(sha256(two_blocks, piece),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  }
  EXPECT_EQ(sha256(std::string(1000000, 'a'), 4096),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

}  // namespace
}  // namespace mpf
