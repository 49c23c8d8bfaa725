// Hugging Face's pre-tokenizers, in general: ByteLevel (with or without its split, with
// add_prefix_space), Split (a literal or an Oniguruma pattern; Removed, Isolated,
// MergedWithPrevious, MergedWithNext, Contiguous; invert), Digits, Metaspace, Punctuation,
// Whitespace, WhitespaceSplit, CharDelimiterSplit and Sequence. Each step splits every piece the
// steps before it left, never joining two.
//
// Pieces come out in the model's terms: after a ByteLevel step they are the text's bytes (the
// characters of GPT-2's byte alphabet that ByteLevel writes, read back as bytes:
// byte_alphabet.hpp), else UTF-8 text. A chain that one hand-written scanner computes
// (pre_tokenizer.hpp) says so in scanner(); tests prove the two the same.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/json_reader.hpp"
#include "text/pre_tokenizer.hpp"
#include "text/regex.hpp"

namespace mpf {

// Pieces as spans of one buffer: a step's output without a string per piece.
class PreTokens {
 public:
  void clear() {
    text_.clear();
    spans_.clear();
  }
  // Appends a piece (`piece` must not view this object's own buffer).
  void add(std::string_view piece, bool text_start) {
    spans_.push_back({text_.size(), text_.size() + piece.size(), text_start});
    text_.append(piece);
  }
  // Appends a piece that the caller writes at the end of buffer() first.
  void add_written(size_t begin, bool text_start) {
    spans_.push_back({begin, text_.size(), text_start});
  }
  std::string& buffer() { return text_; }
  size_t size() const { return spans_.size(); }
  std::string_view operator[](size_t i) const {
    return std::string_view(text_).substr(spans_[i].begin, spans_[i].end - spans_[i].begin);
  }
  // Whether piece i begins at the input's first character.
  bool text_start(size_t i) const { return spans_[i].text_start; }

 private:
  struct Span {
    size_t begin, end;
    bool text_start;
  };
  std::string text_;
  std::vector<Span> spans_;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizerSteps {
 public:
  // tokenizer.json's "pre_tokenizer" (null or absent: the whole text is one piece). Refuses by
  // name a pre-tokenizer this encoder does not implement.
  static PreTokenizerSteps read(const json::Value* pre_tokenizer, const JsonReader& r);

  // Whether a ByteLevel step runs: the model's vocabulary is in GPT-2's byte alphabet.
  bool byte_level() const { return byte_level_; }
  // The hand-written scanner the whole chain is (with ByteLevel's add_prefix_space when
  // scanner_prefix_space()), if it is one.
  std::optional<PreTokenizer> scanner() const { return scanner_; }
  bool scanner_prefix_space() const { return scanner_prefix_space_; }
  // The same steps with every pattern run by Oniguruma, none by the scanner or matcher it is equal
  // to (for tests: a ByteLevel or Split step whose pattern is a scanner's runs the scanner, a
  // Split whose pattern is a matcher's, split_matchers.hpp, the matcher).
  PreTokenizerSteps without_scanners() const;

  // The pieces of `text` (well-formed UTF-8, one part of a text between added tokens, or a
  // segment of one), replacing `out`'s. `text_start`: the text begins the whole input (where
  // Metaspace's prepend_scheme "first" adds its replacement).
  void run(std::string_view text, bool text_start, PreTokens& out) const;
  // The same pieces passed one at a time to sink(piece, piece_text_start), which must not run
  // this object's steps itself; `piece` is valid during the call.
  template <class Sink>
  void each(std::string_view text, bool text_start, const Sink& sink) const {
    each_piece(
        text, text_start,
        [](const void* s, std::string_view piece, bool start) {
          (*static_cast<const Sink*>(s))(piece, start);
        },
        &sink);
  }

  // Whether text cut just before an ASCII space that follows a letter gives, piece by piece, the
  // pieces of the whole: some step splits there whatever came before, and only character-local
  // steps (Digits, Punctuation) run before it.
  bool cuttable() const { return cuttable_; }

  struct Step;

 private:
  void read_step(const json::Value& v, const std::string& name, const JsonReader& r);
  using PieceFn = void (*)(const void* sink, std::string_view piece, bool text_start);
  void each_piece(std::string_view text, bool text_start, PieceFn fn, const void* sink) const;
  // Runs steps k on over `text`, a piece the steps before k left (in bytes when `bytes`).
  void descend(size_t k, std::string_view text, bool text_start, bool bytes, PieceFn fn,
               const void* sink) const;

  std::vector<std::shared_ptr<const Step>> steps_;
  bool byte_level_ = false, cuttable_ = false;
  std::optional<PreTokenizer> scanner_;
  bool scanner_prefix_space_ = false;
};

}  // namespace mpf
