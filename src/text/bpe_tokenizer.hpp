// Byte-level BPE (Sennrich et al. 2016, as OpenAI's GPT-2 applies it to bytes) from a Hugging Face
// `tokenizer.json`: its model.vocab and model.merges (as "a b" strings or ["a", "b"] pairs), its
// added tokens, and its pre-tokenizer, recognised as GPT-2's or Llama 3's (pre_tokenizer.hpp).
//
// Text is bytes: a pre-token's bytes are merged by rank, lowest first (leftmost among equals),
// starting from one token per byte; vocabulary keys are written in GPT-2's byte-to-character
// alphabet (byte_alphabet.hpp) and read back into bytes. With model.ignore_merges (Llama 3) a
// pre-token that is itself in the vocabulary is that one token. Decoding concatenates the tokens'
// bytes, which need not be whole UTF-8 characters token by token.
//
// The methods are const and may be called from several threads: a cache of pre-tokens' encodings
// serves one encode call at a time, the others run without it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/merge_table.hpp"
#include "text/piece_table.hpp"
#include "text/pre_tokenizer.hpp"

namespace mpf {

class BpeTokenizer {
 public:
  // Reads a tokenizer.json. Throws InputError naming the file for: a missing or unreadable file,
  // invalid JSON, a model that is not BPE, a missing or malformed model.vocab or model.merges, a
  // merge naming a token not in the vocabulary, a vocabulary key outside the byte-level alphabet,
  // an id repeated or negative, and a normalizer, pre-tokenizer or BPE option this encoder does not
  // implement (a Split pattern other than GPT-2's or Llama 3's, byte fallback, dropout, ...).
  static BpeTokenizer load(const std::string& tokenizer_json);

  // Plain text: an added token's text in it is encoded as any other text.
  std::vector<int32_t> encode(std::string_view text) const;
  // One segment of a plain text, cut where last_safe_cut (pre_tokenizer.hpp) allows, appended to
  // `out`: the segments' tokens, in order, are encode()'s of the whole. `first` marks the text's
  // first segment (where a prefix space goes).
  void encode_segment(std::string_view text, bool first, std::vector<int32_t>& out) const;
  // Added tokens in the text (leftmost, longest first) become their ids; the text between is
  // encoded as by encode().
  std::vector<int32_t> encode_with_specials(std::string_view text) const;
  // The tokens' bytes, concatenated (an added token's are its content). Throws InputError for an
  // id outside the vocabulary.
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string token_bytes(int32_t id) const;
  // The largest id + 1, added tokens included.
  int vocab_size() const { return int(pieces_.size()); }
  // An added token by its content ("<|endoftext|>", "<|begin_of_text|>"), else a vocabulary
  // token by its bytes.
  std::optional<int32_t> token_id(std::string_view token) const;
  PreTokenizer pre_tokenizer() const { return pre_tokenizer_; }

  // The ids tokenizer.json's post-processor puts before a single text (its TemplateProcessing's
  // leading special tokens: Llama 3's <|begin_of_text|>; none for GPT-2), as Hugging Face's
  // encode(text) adds them. encode() never does.
  const std::vector<int32_t>& template_prefix() const { return template_prefix_; }
  // The file it was loaded from, for messages.
  const std::string& path() const { return path_; }

 private:
  struct AddedToken {
    std::string content;
    int32_t id;
  };
  struct Cache;
  friend class BpeTokenizerLoader;

  BpeTokenizer() = default;  // load() makes one

  void encode_piece(std::string_view piece, std::vector<int32_t>& out, Cache* cache) const;
  // `first`: the text starts a document (add_prefix_space applies).
  void encode_plain(std::string_view text, std::vector<int32_t>& out, Cache* cache,
                    bool first = true) const;
  std::optional<int32_t> vocab_id(std::string_view bytes) const {
    const PieceTable::Ids found = vocab_.find(bytes, PieceTable::hash(bytes));
    if (found.size == 0) return std::nullopt;
    return found.data[0];
  }

  std::string path_;
  PreTokenizer pre_tokenizer_ = PreTokenizer::kGpt2;
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;
  std::vector<std::string> pieces_;  // id -> bytes (empty for an id no token has)
  std::vector<char> known_;          // id -> whether a token has it
  PieceTable vocab_;                 // bytes -> id (model.vocab)
  int32_t byte_ids_[256];            // a single byte's token, -1: none
  MergeTable merges_;
  std::vector<AddedToken> added_;  // longest first
  bool added_starts_[256] = {};    // whether an added token starts with the byte
  std::vector<int32_t> template_prefix_;
  std::shared_ptr<Cache> cache_;
};

}  // namespace mpf
