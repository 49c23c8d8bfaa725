// A Hugging Face `tokenizer.json` with a BPE model (Sennrich et al. 2016), its whole pipeline:
// added tokens (added_tokens.hpp), the normalizer (normalizer.hpp), the pre-tokenizer
// (pre_tokenizer_steps.hpp, or the hand-written scanner it is equivalent to: pre_tokenizer.hpp),
// the model, the decoder (decoder_steps.hpp) and the post-processor's template. A component it
// does not implement (a Unigram or WordPiece model, a BertNormalizer, ...) is refused by name.
//
// The model: a pre-token's symbols are merged by rank, lowest first (leftmost among equals). With
// a ByteLevel pre-tokenizer the symbols are bytes and vocabulary keys are read through GPT-2's
// byte alphabet (byte_alphabet.hpp); else they are characters, one not in the vocabulary becoming
// its bytes' <0xNN> tokens (byte_fallback) or the unknown token (unk_token, fuse_unk).
// continuing_subword_prefix and end_of_word_suffix mark a symbol not first and last; with
// ignore_merges (Llama 3) a pre-token that is itself in the vocabulary is that one token.
//
// Text is bytes: a byte that is not part of well-formed UTF-8 (which Hugging Face's strings
// cannot hold) is a pre-token of its own, encoded as the model encodes that byte.
//
// The methods are const and may be called from several threads: a cache of pre-tokens' encodings
// serves one encode call at a time, the others run without it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/added_tokens.hpp"
#include "text/decoder_steps.hpp"
#include "text/merge_cuts.hpp"
#include "text/merge_table.hpp"
#include "text/normalizer.hpp"
#include "text/piece_table.hpp"
#include "text/pre_tokenizer_steps.hpp"
#include "text/unknown_symbols.hpp"

namespace mpf {

class BpeTokenizer {
 public:
  // Reads a tokenizer.json. Throws InputError naming the file and the field for: a missing or
  // unreadable file, invalid JSON, a component not implemented (by name), a missing or malformed
  // model.vocab or model.merges, a merge naming a token not in the vocabulary, an id repeated or
  // negative, a pattern that does not compile.
  static BpeTokenizer load(const std::string& tokenizer_json);

  // Hugging Face's encode(text, add_special_tokens=False) with its special tokens' text read as
  // text (encode_special_tokens): the added tokens not special are still matched.
  std::vector<int32_t> encode(std::string_view text) const;
  // One segment of such a text, cut where cut() allows, appended to `out`: the segments' tokens,
  // in order, are encode()'s of the whole. `first` marks the text's first segment.
  void encode_segment(std::string_view text, bool first, std::vector<int32_t>& out) const;
  // Hugging Face's encode(text, add_special_tokens=False): every added token is matched.
  std::vector<int32_t> encode_with_specials(std::string_view text) const;
  // The last place q >= from (q > 0) where `text`, a prefix of a longer text, may be cut so that
  // text[0, q) and the rest encode as the whole (encode_segment); 0 if there is none, or if this
  // tokenizer's pipeline has no such places (then a text is encoded whole).
  size_t cut(std::string_view text, size_t from) const;

  // The text of `ids` as Hugging Face's decode(ids) gives it (through the decoder). Throws
  // InputError for an id outside the vocabulary.
  std::string decode(const std::vector<int32_t>& ids) const;
  // One token's bytes as it prints inside a stream of tokens (decoder_steps.hpp).
  std::string token_bytes(int32_t id) const;
  // The largest id + 1, added tokens included.
  int vocab_size() const { return int(keys_.size()); }
  // An added token by its content ("<|endoftext|>", "<s>"), else a vocabulary token by its key.
  std::optional<int32_t> token_id(std::string_view token) const;

  // The scanner the pre-tokenizer is, if it is one (the fast path).
  std::optional<PreTokenizer> pre_tokenizer() const { return scanner_; }
  // The same tokenizer with `how` for a character (a byte at byte level) its vocabulary lacks,
  // with no <0xNN> token for it (unknown_symbols.hpp; load() gives kDrop, Hugging Face's way).
  BpeTokenizer with_unknown(UnknownSymbols how) const;
  // What this thread's encode calls did with such characters since the last take; resets it.
  static UnknownTally take_unknown_tally();

  // The same tokenizer on the general path (for tests): Oniguruma even where a scanner would do,
  // and a long piece merged whole, not cut where no merge can join (merge_cuts.hpp).
  BpeTokenizer without_scanner() const;
  // The pre-tokens of a plain text (one part, no added tokens), in the model's terms.
  std::vector<std::string> pre_tokens(std::string_view text) const;

  // The ids the post-processor's template puts before and after a single text (Llama 3's
  // <|begin_of_text|>, Llama 2's <s>; an end-of-sequence token after), as Hugging Face's
  // encode(text) adds them. encode() never does.
  const std::vector<int32_t>& template_prefix() const { return template_prefix_; }
  const std::vector<int32_t>& template_suffix() const { return template_suffix_; }
  // The file it was loaded from, for messages.
  const std::string& path() const { return path_; }

 private:
  // Pre-tokens' encodings, for the encode call that holds the mutex. Bounded: emptied when full.
  // With them, that call's working buffers, kept from call to call: a text's ids and normalized
  // text are megabytes, and fresh buffers of that size are fresh pages (glibc maps them or trims
  // them back), faulted in on every call.
  struct Cache {
    static constexpr size_t kMaxEntries = size_t(1) << 16;
    static constexpr size_t kMaxPieceBytes = 256;
    static constexpr size_t kMaxKeptBytes = size_t(64) << 20;  // larger buffers are let go
    std::mutex mutex;
    PieceTable table;
    std::vector<int32_t> ids;
    std::string normalized, spare, prefixed;
    void release_large();
  };
  // Where a long piece's symbols can never be joined (merge_cuts.hpp), worked out when a piece
  // first needs it.
  struct LazyCuts {
    std::once_flag once;
    MergeCuts cuts;
  };
  friend class BpeTokenizerLoader;

  BpeTokenizer() = default;  // load() makes one

  void encode_text(std::string_view text, bool parse_special, bool first, std::vector<int32_t>& out,
                   Cache* cache) const;
  std::vector<int32_t> encode_whole(std::string_view text, bool parse_special) const;
  void encode_part(std::string_view text, bool part_start, bool text_start, bool parse_special,
                   std::vector<int32_t>& out, Cache* cache) const;
  void encode_normalized(std::string_view text, bool part_start, bool text_start,
                         std::vector<int32_t>& out, Cache* cache) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out, Cache* cache) const;
  void initial_symbols(std::string_view piece, std::vector<int32_t>& out) const;
  size_t merge_long(int32_t* ids, size_t n) const;
  const MergeCuts& cuts() const;
  void unknown_bytes(std::string_view bytes, std::vector<int32_t>& out) const;
  void lost_symbol(std::string_view chars, bool first, bool last, std::vector<int32_t>& out) const;
  [[noreturn]] void refuse_symbol(std::string_view chars) const;
  std::optional<int32_t> vocab_id(std::string_view key) const {
    const PieceTable::Ids found = vocab_.find(key, PieceTable::hash(key));
    if (found.size == 0) return std::nullopt;
    return found.data[0];
  }
  // A token's string as the decoder reads it (a vocabulary key, an added token's content).
  std::string key_text(int32_t id) const;
  void check_id(int32_t id) const;

  std::string path_;
  Normalizer normalizer_;
  PreTokenizerSteps pre_;
  std::optional<PreTokenizer> scanner_;
  bool scanner_prefix_space_ = false;
  DecoderSteps decoder_;
  AddedTokens added_;

  // The model.
  bool byte_level_ = false;  // symbols are bytes, keys in GPT-2's byte alphabet
  bool ignore_merges_ = false, byte_fallback_ = false, fuse_unk_ = false;
  UnknownSymbols unknown_ = UnknownSymbols::kDrop;
  std::string prefix_, suffix_;  // continuing_subword_prefix, end_of_word_suffix (model terms)
  std::string unk_token_;
  int32_t unk_id_ = -1;
  std::vector<std::string> keys_;  // id -> key in the model's terms (bytes for byte level)
  std::vector<char> known_;        // id -> whether a token has it
  std::vector<char> is_added_;     // id -> an added token's (keys_ holds its content)
  PieceTable vocab_;               // key -> id (model.vocab)
  int32_t byte_ids_[256];          // byte level: a single byte's token, -1: none
  int32_t fallback_ids_[256];      // byte_fallback: <0xNN>'s id, -1: none
  // Not byte level, no prefix nor suffix: the id of the key that is code point cp alone, for
  // cp < kCharIds (ASCII, Latin, Greek, Cyrillic, ..., SentencePiece's U+2581); -1: none.
  static constexpr char32_t kCharIds = 0x3000;
  std::vector<int32_t> char_ids_;
  MergeTable merges_;
  std::vector<int32_t> template_prefix_, template_suffix_;
  bool cuttable_ = false, letter_cut_ = false;
  std::shared_ptr<Cache> cache_;
  std::shared_ptr<LazyCuts> cuts_ = std::make_shared<LazyCuts>();
  bool cut_long_pieces_ = true;
};

}  // namespace mpf
