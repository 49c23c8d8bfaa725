#include "generate/tokenizer_file.hpp"

#include <cctype>
#include <fstream>

#include "core/error.hpp"

namespace mpf {

bool is_tokenizer_json(const std::string& path) {
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) return true;
  std::ifstream in(path, std::ios::binary);
  char c = 0;
  while (in.get(c) && std::isspace(static_cast<unsigned char>(c))) {
  }
  return in && c == '{';  // llm.c's file starts with its magic, 20240328: '@' first
}

TokenizerFile read_tokenizer_file(const std::string& path) {
  TokenizerFile file;
  if (!is_tokenizer_json(path)) {
    file.decoder = read_tokenizer(path);
    return file;
  }
  file.encoder = BpeTokenizer::load(path);
  const BpeTokenizer& bpe = *file.encoder;
  file.decoder.pieces.resize(size_t(bpe.vocab_size()));
  for (int32_t id = 0; id < bpe.vocab_size(); ++id) {
    try {
      file.decoder.pieces[size_t(id)] = bpe.token_bytes(id);
    } catch (const InputError&) {
      // An id no token has (a gap in the vocabulary): decodes to nothing.
    }
  }
  for (const char* eot : {"<|endoftext|>", "<|end_of_text|>"}) {
    if (const auto id = bpe.token_id(eot)) {
      file.decoder.eot = *id;
      break;
    }
  }
  return file;
}

}  // namespace mpf
