// What --tokenizer names, for mpiformer-generate and mpiformer-train's samples: llm.c's
// gpt2_tokenizer.bin (io/llmc_tokenizer.hpp), which decodes only, or a Hugging Face tokenizer.json
// (text/bpe_tokenizer.hpp), which also encodes a text prompt. A file is taken for tokenizer.json
// when its name ends in .json or its first non-blank byte is '{'.
#pragma once

#include <optional>
#include <string>

#include "io/llmc_tokenizer.hpp"
#include "text/bpe_tokenizer.hpp"

namespace mpf {

struct TokenizerFile {
  Tokenizer decoder;                    // each id's bytes and the end-of-text id, either kind
  std::optional<BpeTokenizer> encoder;  // tokenizer.json only
};

bool is_tokenizer_json(const std::string& path);

// Reads either kind; InputError naming the file for anything wrong with it. A tokenizer.json's
// end-of-text is its "<|endoftext|>" (GPT-2, Qwen), else "<|end_of_text|>" (Llama 3), else "</s>"
// (Llama 2, Mistral), else "<eos>" (Gemma), else the EOS its template appends, else none.
TokenizerFile read_tokenizer_file(const std::string& path);

}  // namespace mpf
