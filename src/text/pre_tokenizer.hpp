// The pre-tokenizers of byte-level BPE: text is split into pieces ("pre-tokens") before BPE runs on
// each. Each is a hand-written scanner equivalent to a regular expression that needs Unicode
// classes (\p{L}, \p{N}, \s; unicode_classes.hpp) and a lookahead, which std::regex lacks; the
// pieces are those the pattern's successive leftmost matches give (Python's regex.findall), and
// they tile the text.
//
// kGpt2 (OpenAI's GPT-2 encoder.py; Hugging Face's ByteLevel pre-tokenizer):
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// kLlama3 (Meta's Llama 3 tiktoken model; Hugging Face's Split pre-tokenizer in its
// tokenizer.json):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
// kQwen2 (Qwen2's and Qwen2.5's Split): Llama 3's with \p{N} for \p{N}{1,3} (digits one by one).
// Bytes that are not UTF-8 are characters of class "other" (utf8.hpp).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace mpf {

enum class PreTokenizer { kGpt2, kLlama3, kQwen2 };

// The pattern `kind` is equivalent to, exactly as a tokenizer.json writes it (JSON-unescaped).
const char* split_pattern(PreTokenizer kind);

// The end of the pre-token that starts at text[begin] (begin < text.size()).
size_t pre_token_end(PreTokenizer kind, std::string_view text, size_t begin);

// The last position q in [from, text.size() - 4] (and q > 0) where a letter ends and a character
// that is not a letter begins; 0 if there is none. Both patterns end a pre-token there, and no
// pre-token before q looks past q, so text[0, q) and text[q, ...) give the pre-tokens the whole
// text gives: a long document can be encoded in segments cut there. (The 4 bytes kept after q let
// the character at q be seen whole when `text` is a prefix of the document.)
size_t last_safe_cut(std::string_view text, size_t from);

// Every pre-token of `text`, in order.
std::vector<std::string_view> pre_tokenize(PreTokenizer kind, std::string_view text);

}  // namespace mpf
