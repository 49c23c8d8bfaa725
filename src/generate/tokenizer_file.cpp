#include "generate/tokenizer_file.hpp"

#include <cctype>
#include <fstream>

#include "core/error.hpp"
#include "io/input_file.hpp"

namespace mpf {

bool is_tokenizer_json(const std::string& path) {
  if (path.empty()) return false;
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) return true;
  int64_t bytes = 0;
  const File f = open_for_reading(path, "--tokenizer " + path,
                                  "llm.c's tokenizer .bin or a Hugging Face tokenizer.json", bytes);
  int c = 0;
  while ((c = std::fgetc(f.get())) != EOF && std::isspace(c)) {
  }
  return c == '{';  // llm.c's file starts with its magic, 20240328: '@' first
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
  // GPT-2's and Llama 3's end of text, then SentencePiece-style files' (Llama 2 and Mistral's
  // </s>, Gemma's <eos>), then the EOS the file's template puts after a text.
  for (const char* eot : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"}) {
    if (const auto id = bpe.token_id(eot)) {
      file.decoder.eot = *id;
      return file;
    }
  }
  if (!bpe.template_suffix().empty()) file.decoder.eot = bpe.template_suffix().back();
  return file;
}

}  // namespace mpf
