// Hugging Face's decoders: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace and Sequence,
// applied in order to a list of tokens' strings (vocabulary keys, added tokens' contents).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/json_reader.hpp"
#include "text/regex.hpp"

namespace mpf {

class DecoderSteps {
 public:
  // tokenizer.json's "decoder" (null or absent: none). Refuses by name a decoder this encoder does
  // not implement (WordPiece, CTC, ...).
  static DecoderSteps read(const json::Value* decoder, const JsonReader& r);

  bool empty() const { return steps_.empty(); }
  // Whether the steps are ByteLevel's alone (byte-level keys' bytes are then their text).
  bool byte_level_only() const;
  // The text of `tokens` as Hugging Face's decode gives it: the steps in order, the strings they
  // leave concatenated (with no steps: joined by spaces). Bytes that ByteFallback gathers and
  // that are not UTF-8 become U+FFFD each, as there.
  std::string decode(std::vector<std::string> tokens) const;
  // One token's bytes where it stands inside a text (not first: no step's first-token rule
  // applies), a ByteFallback byte as itself: what a stream of tokens prints token by token.
  std::string token_bytes(const std::string& token) const;

  struct Step;

 private:
  void read_step(const json::Value& v, const std::string& name, const JsonReader& r);
  std::vector<std::string> run(std::vector<std::string> tokens, bool raw_bytes,
                               bool first_is_inside) const;

  std::vector<std::shared_ptr<const Step>> steps_;
};

}  // namespace mpf
