// The Unicode data Hugging Face's tokenizers read: utf8proc's (Unicode 15.0), with the general
// categories of the characters 15.1 and 16.0 added (unicode_text.cpp): normalization forms,
// lowercase, and the properties its normalizers and pre-tokenizers test a character for. Text
// given here is well-formed UTF-8 (the pipeline routes ill-formed bytes around it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mpf::unicode {

enum class Form { kNFC, kNFD, kNFKC, kNFKD };

std::string normalize(std::string_view text, Form form);
// Rust's char::to_lowercase, a character at a time (no context: a final sigma stays σ).
std::string lowercase(std::string_view text);

bool is_whitespace(char32_t cp);   // the White_Space property (Rust's char::is_whitespace)
bool is_mark(char32_t cp);         // general category M* (combining marks)
bool is_numeric(char32_t cp);      // N* (Rust's char::is_numeric)
bool is_punctuation(char32_t cp);  // P*, or ASCII punctuation (symbols such as $ + < = > ^ ` | ~)
bool is_letter(char32_t cp);       // L*
bool is_word(char32_t cp);         // \w of Rust's regex: alphabetic, marks, Nd, Pc, joiners

// General categories, in utf8proc's order (Cn first).
enum class Category : uint8_t {
  kCn,
  kLu,
  kLl,
  kLt,
  kLm,
  kLo,
  kMn,
  kMc,
  kMe,
  kNd,
  kNl,
  kNo,
  kPc,
  kPd,
  kPs,
  kPe,
  kPi,
  kPf,
  kPo,
  kSm,
  kSc,
  kSk,
  kSo,
  kZs,
  kZl,
  kZp,
  kCc,
  kCf,
  kCs,
  kCo
};
Category general_category(char32_t cp);  // above U+10FFFF: kCn

// The Unicode version of the data.
const char* version();
// What the classes are read from, for messages and the manifest: utf8proc's version, and the
// newer letters and digits added over it (unicode_text.cpp).
std::string data_version();

}  // namespace mpf::unicode
