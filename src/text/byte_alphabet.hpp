// GPT-2's byte-to-character alphabet (OpenAI's encoder.py bytes_to_unicode, which Hugging Face's
// ByteLevel pre-tokenizer and decoder share): byte-level vocabularies write each byte as a
// printable character, so a token's key is text. Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand
// for themselves (as code points); the other 68 take U+0100 onwards in byte order (a space is
// U+0120 'Ġ', a newline U+010A 'Ċ').
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mpf::byte_alphabet {

// The character byte b is written as.
char32_t char_of(uint8_t b);

// A vocabulary key's bytes; nullopt when a character of it is not in the alphabet (the
// tokenizer is not byte-level) or it is not UTF-8.
std::optional<std::string> bytes_of(std::string_view key);

// The key a token's bytes are written as (UTF-8).
std::string key_of(std::string_view bytes);

// key_of and bytes_of appending to `out` (no string of their own). append_bytes returns false,
// `out` unchanged, where bytes_of gives nullopt.
void append_key(std::string& out, std::string_view bytes);
bool append_bytes(std::string& out, std::string_view key);

}  // namespace mpf::byte_alphabet
