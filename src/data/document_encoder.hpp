// What mpiformer-tokenize asks of a tokenizer: a document's text to token ids, the vocabulary's
// size (which sets the shards' width) and the token put before every document.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace mpf {

struct DocumentEncoder {
  // Plain text: special tokens written in it are not parsed (llm.c's encode_ordinary).
  std::function<std::vector<int32_t>(std::string_view)> encode;
  int64_t vocab_size = 0;
  int32_t doc_token = 0;
  std::string doc_token_text;
};

// A Hugging Face tokenizer.json's encoder. The document token is `doc_token` if given, else
// <|begin_of_text|> (Llama 3) if the tokenizer has it, else <|endoftext|> (GPT-2), as llm.c's
// data scripts put them. Throws InputError naming the file, or the token it lacks.
DocumentEncoder load_document_encoder(const std::string& tokenizer_json,
                                      const std::string& doc_token);

}  // namespace mpf
