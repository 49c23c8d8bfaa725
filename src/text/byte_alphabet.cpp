#include "text/byte_alphabet.hpp"

#include <array>

#include "text/utf8.hpp"

namespace mpf::byte_alphabet {

namespace {

bool stands_for_itself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

std::array<char32_t, 256> make_chars() {
  std::array<char32_t, 256> chars{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) chars[size_t(b)] = stands_for_itself(b) ? char32_t(b) : next++;
  return chars;
}

const std::array<char32_t, 256> kChars = make_chars();

// Every character of the alphabet is below U+0144: the reverse map is a small table.
constexpr char32_t kAlphabetEnd = 0x144;
std::array<int16_t, kAlphabetEnd> make_bytes() {
  std::array<int16_t, kAlphabetEnd> bytes;
  bytes.fill(-1);
  for (int b = 0; b < 256; ++b) bytes[kChars[size_t(b)]] = int16_t(b);
  return bytes;
}

const std::array<int16_t, kAlphabetEnd> kBytes = make_bytes();

}  // namespace

char32_t char_of(uint8_t b) {
  return kChars[b];
}

std::optional<std::string> bytes_of(std::string_view key) {
  std::string bytes;
  bytes.reserve(key.size());
  if (!append_bytes(bytes, key)) return std::nullopt;
  return bytes;
}

std::string key_of(std::string_view bytes) {
  std::string key;
  append_key(key, bytes);
  return key;
}

void append_key(std::string& out, std::string_view bytes) {
  for (const char c : bytes) utf8::append(out, kChars[static_cast<uint8_t>(c)]);
}

bool append_bytes(std::string& out, std::string_view key) {
  const size_t start = out.size();
  for (size_t at = 0; at < key.size();) {
    const utf8::Char c = utf8::decode(key, at);
    if (c.cp >= kAlphabetEnd || kBytes[c.cp] < 0) {
      out.resize(start);
      return false;
    }
    out += char(kBytes[c.cp]);
    at += size_t(c.length);
  }
  return true;
}

}  // namespace mpf::byte_alphabet
