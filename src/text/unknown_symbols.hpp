// What a BPE model does with a character (at byte level, a byte) its vocabulary has no token for
// and no <0xNN> byte_fallback token stands for: SmolLM's and Falcon's vocabularies lack some
// control bytes, several GPT-NeoX-style ones the bytes 0xF5-0xFF.
#pragma once

#include <cstdint>

namespace mpf {

enum class UnknownSymbols {
  kDrop,     // as Hugging Face: the model's unk_token where it names one, else left out
  kReplace,  // the model's unk_token where it names one, else the tokens of U+FFFD
  kError,    // refused (InputError naming the byte or character)
};

// What was done, counted per character (symbol).
struct UnknownTally {
  int64_t dropped = 0, replaced = 0;
};

}  // namespace mpf
