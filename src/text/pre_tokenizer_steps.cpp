#include "text/pre_tokenizer_steps.hpp"

#include <algorithm>
#include <functional>

#include "text/byte_alphabet.hpp"
#include "text/split_matchers.hpp"
#include "text/unicode_text.hpp"
#include "text/utf8.hpp"

namespace mpf {

namespace {

// A piece covered by ranges, each a match of the step's pattern or not (Hugging Face's
// Pattern::find_matches).
struct Range {
  size_t begin, end;
  bool is_match;
};

// Buffers a thread reuses from text to text: a step allocates nothing once they have grown. A
// step leaves its pieces in `kept`, as spans of `source` (its text, or `text` where it rewrote it).
struct Scratch {
  std::vector<std::pair<size_t, size_t>> matches, kept;
  std::vector<Range> ranges;
  std::string text;
  std::string_view source;
};

// The characters a character-local step splits at, looked up by byte where it can be.
struct Delimiters {
  bool (*is)(char32_t) = nullptr;  // else the one character `only`
  char32_t only = 0;
  bool ascii[128] = {};  // the ASCII character is one
  bool byte[256] = {};   // the character of GPT-2's alphabet that the byte stands for is one

  bool operator()(char32_t c) const { return is ? is(c) : c == only; }
  void fill() {
    for (int b = 0; b < 128; ++b) ascii[b] = (*this)(char32_t(b));
    for (int b = 0; b < 256; ++b) byte[b] = (*this)(byte_alphabet::char_of(uint8_t(b)));
  }
};

void regex_ranges(const Regex& regex, std::string_view s, Scratch& w) {
  w.ranges.clear();
  if (s.empty()) {
    w.ranges.push_back({0, 0, false});
    return;
  }
  w.matches.clear();
  regex.append_matches(s, w.matches);
  size_t prev = 0;
  for (const auto& [begin, end] : w.matches) {
    if (prev != begin) w.ranges.push_back({prev, begin, false});
    w.ranges.push_back({begin, end, true});
    prev = end;
  }
  if (prev != s.size()) w.ranges.push_back({prev, s.size(), false});
}

// A scanner's pieces: the pattern's matches, which tile the text.
void scanner_ranges(PreTokenizer kind, std::string_view s, Scratch& w) {
  w.ranges.clear();
  if (s.empty()) w.ranges.push_back({0, 0, false});
  for (size_t at = 0; at < s.size();) {
    const size_t end = pre_token_end(kind, s, at);
    w.ranges.push_back({at, end, true});
    at = end;
  }
}

// A hand-written matcher's matches and the text between them.
void matcher_ranges(SplitMatcher m, std::string_view s, Scratch& w) {
  w.ranges.clear();
  if (s.empty()) {
    w.ranges.push_back({0, 0, false});
    return;
  }
  size_t prev = 0;
  for (Match found = next_match(m, s, 0); found.begin < s.size();
       found = next_match(m, s, found.end)) {
    if (prev != found.begin) w.ranges.push_back({prev, found.begin, false});
    w.ranges.push_back({found.begin, found.end, true});
    prev = found.end;
  }
  if (prev != s.size()) w.ranges.push_back({prev, s.size(), false});
}

void literal_ranges(const std::string& literal, std::string_view s, Scratch& w) {
  w.ranges.clear();
  if (s.empty()) {
    w.ranges.push_back({0, 0, false});
    return;
  }
  size_t prev = 0;
  for (size_t at = s.find(literal); at != std::string_view::npos; at = s.find(literal, prev)) {
    if (prev != at) w.ranges.push_back({prev, at, false});
    w.ranges.push_back({at, at + literal.size(), true});
    prev = at + literal.size();
  }
  if (prev != s.size()) w.ranges.push_back({prev, s.size(), false});
}

// The character at s[at]: UTF-8, or where `bytes`, the character of GPT-2's alphabet that the
// byte stands for (a step after ByteLevel sees those).
inline utf8::Char char_at(std::string_view s, size_t at, bool bytes) {
  if (bytes) return {byte_alphabet::char_of(static_cast<uint8_t>(s[at])), 1};
  return utf8::decode(s, at);
}

// Each delimiter a range of its own, and the runs between them.
void char_ranges(const Delimiters& d, std::string_view s, bool bytes, Scratch& w) {
  w.ranges.clear();
  if (s.empty()) {
    w.ranges.push_back({0, 0, false});
    return;
  }
  size_t last = 0;
  for (size_t at = 0; at < s.size();) {
    const uint8_t b = static_cast<uint8_t>(s[at]);
    size_t next = at + 1;
    bool delimiter;
    if (bytes) {
      delimiter = d.byte[b];
    } else if (b < 0x80) {
      delimiter = d.ascii[b];
    } else {
      const utf8::Char c = utf8::decode(s, at);
      next = at + size_t(c.length);
      delimiter = d(c.cp);
    }
    if (delimiter) {
      if (last < at) w.ranges.push_back({last, at, false});
      w.ranges.push_back({at, next, true});
      last = next;
    }
    at = next;
  }
  if (s.size() > last) w.ranges.push_back({last, s.size(), false});
}

// The ranges grouped by `behavior` into the pieces to keep (NormalizedString::split).
void apply_behavior(const std::vector<Range>& ranges, SplitBehavior behavior,
                    std::vector<std::pair<size_t, size_t>>& kept) {
  kept.clear();
  bool previous = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Range& r : ranges) kept.emplace_back(r.begin, r.end);
      break;
    case SplitBehavior::kRemoved:
      for (const Range& r : ranges)
        if (!r.is_match) kept.emplace_back(r.begin, r.end);
      break;
    case SplitBehavior::kContiguous:
      for (const Range& r : ranges) {
        if (r.is_match == previous && !kept.empty())
          kept.back().second = r.end;
        else
          kept.emplace_back(r.begin, r.end);
        previous = r.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Range& r : ranges) {
        if (r.is_match && !previous && !kept.empty())
          kept.back().second = r.end;
        else
          kept.emplace_back(r.begin, r.end);
        previous = r.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto r = ranges.rbegin(); r != ranges.rend(); ++r) {
        if (r->is_match && !previous && !kept.empty())
          kept.back().first = r->begin;
        else
          kept.emplace_back(r->begin, r->end);
        previous = r->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
}

// The pieces of `text` that w.ranges and `behavior` keep, into w.kept (empty ones too).
void keep(std::string_view text, SplitBehavior behavior, Scratch& w) {
  w.source = text;
  apply_behavior(w.ranges, behavior, w.kept);
}

// Hugging Face's Whitespace: the runs of \w+|[^\w\s]+, whitespace dropped.
void whitespace_runs(std::string_view s, bool bytes, Scratch& w) {
  w.source = s;
  w.kept.clear();
  int run = 0;  // 0: none, 1: word, 2: other
  size_t start = 0;
  for (size_t at = 0; at <= s.size();) {
    int kind = 0;
    size_t next = at + 1;
    if (at < s.size()) {
      const utf8::Char c = char_at(s, at, bytes);
      next = at + size_t(c.length);
      kind = unicode::is_word(c.cp) ? 1 : unicode::is_whitespace(c.cp) ? 0 : 2;
    }
    if (kind != run) {
      if (run != 0) w.kept.emplace_back(start, at);
      start = at;
      run = kind;
    }
    at = next;
  }
}

}  // namespace

struct PreTokenizerSteps::Step {
  enum class Kind {
    kByteLevel,
    kSplit,
    kDigits,
    kPunctuation,
    kWhitespace,
    kWhitespaceSplit,
    kCharDelimiter,
    kMetaspace
  } kind;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false, flag = false;  // flag: add_prefix_space, individual_digits, Metaspace split
  bool use_regex = true;
  std::string literal;  // Split's String pattern; Metaspace's replacement; the delimiter
  std::string pattern;  // Split's Regex pattern
  std::shared_ptr<const Regex> regex;
  std::optional<PreTokenizer> scanner;  // the scanner equal to `regex`, run in its place
  std::optional<SplitMatcher> matcher;  // else the matcher equal to it
  enum class Prepend { kAlways, kFirst, kNever } prepend = Prepend::kAlways;
  Delimiters delimiters;  // a character-local step's

  // Whether the step can split bytes as their characters: it looks at one character at a time,
  // or only at ASCII digits (a byte and its character are the same digit, or both none).
  bool char_local() const {
    return kind == Kind::kDigits || kind == Kind::kPunctuation || kind == Kind::kWhitespace ||
           kind == Kind::kWhitespaceSplit || kind == Kind::kCharDelimiter ||
           (kind == Kind::kSplit && matcher == SplitMatcher::kDigits3);
  }
  // The pieces of `text` into w.source and w.kept. `bytes`: text is bytes, seen as their
  // characters (char_local() steps only).
  void run(std::string_view text, bool text_start, bool bytes, Scratch& w) const;
  // Whether the step certainly leaves `text` (not empty) whole: a character-local split that finds
  // no delimiter in it (most pieces, for Digits after a ByteLevel split), found without ranges.
  bool intact(std::string_view text, bool bytes) const;
};

bool PreTokenizerSteps::Step::intact(std::string_view text, bool bytes) const {
  if (kind == Kind::kSplit && matcher == SplitMatcher::kDigits3) {
    // Without a match the one range is a match when inverted, which Removed drops.
    if (invert && behavior == SplitBehavior::kRemoved) return false;
    return next_match(*matcher, text, 0).begin == text.size();
  }
  if (kind != Kind::kDigits && kind != Kind::kPunctuation && kind != Kind::kWhitespaceSplit &&
      kind != Kind::kCharDelimiter)
    return false;
  for (size_t at = 0; at < text.size();) {
    const uint8_t b = static_cast<uint8_t>(text[at]);
    if (bytes || b < 0x80) {
      if (bytes ? delimiters.byte[b] : delimiters.ascii[b]) return false;
      ++at;
      continue;
    }
    const utf8::Char c = utf8::decode(text, at);
    if (delimiters(c.cp)) return false;
    at += size_t(c.length);
  }
  return true;
}

void PreTokenizerSteps::Step::run(std::string_view text, bool text_start, bool bytes,
                                  Scratch& w) const {
  switch (kind) {
    case Kind::kByteLevel: {
      if (flag && (text.empty() || text[0] != ' ')) {
        w.text.assign(1, ' ');
        w.text.append(text);
        text = w.text;
      }
      if (use_regex && scanner) {  // the scanner's pieces, kept as they are
        w.source = text;
        w.kept.clear();
        for (size_t at = 0; at < text.size();) {
          const size_t end = pre_token_end(*scanner, text, at);
          w.kept.emplace_back(at, end);
          at = end;
        }
      } else if (use_regex) {
        regex_ranges(*regex, text, w);
        keep(text, SplitBehavior::kIsolated, w);
      } else {
        w.source = text;
        w.kept.assign(1, {0, text.size()});
      }
      return;
    }
    case Kind::kSplit: {
      if (scanner)
        scanner_ranges(*scanner, text, w);
      else if (matcher)
        matcher_ranges(*matcher, text, w);
      else if (regex)
        regex_ranges(*regex, text, w);
      else
        literal_ranges(literal, text, w);
      if (invert)
        for (Range& r : w.ranges) r.is_match = !r.is_match;
      keep(text, behavior, w);
      return;
    }
    case Kind::kDigits:
      char_ranges(delimiters, text, bytes, w);
      keep(text, flag ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, w);
      return;
    case Kind::kPunctuation:
      char_ranges(delimiters, text, bytes, w);
      keep(text, behavior, w);
      return;
    case Kind::kWhitespace:
      whitespace_runs(text, bytes, w);
      return;
    case Kind::kWhitespaceSplit:
    case Kind::kCharDelimiter:
      char_ranges(delimiters, text, bytes, w);
      keep(text, SplitBehavior::kRemoved, w);
      return;
    case Kind::kMetaspace: {
      std::string& q = w.text;
      q.clear();
      q.reserve(text.size() + literal.size());
      for (const char c : text) {
        if (c == ' ')
          q += literal;
        else
          q += c;
      }
      const bool starts = q.compare(0, literal.size(), literal) == 0;
      if (!starts && (prepend == Prepend::kAlways || (prepend == Prepend::kFirst && text_start)))
        q.insert(0, literal);
      if (!flag) {
        w.source = q;
        w.kept.assign(1, {0, q.size()});
        return;
      }
      literal_ranges(literal, q, w);
      keep(q, SplitBehavior::kMergedWithNext, w);
      return;
    }
  }
}

namespace {

SplitBehavior behavior_of(const json::Value& v, const std::string& name, const JsonReader& r,
                          const char* otherwise) {
  const std::string b = r.string_or(v, "behavior", name + ".behavior", otherwise);
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  r.fail(name + ".behavior " + json::quote(b) +
         " is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

std::shared_ptr<const Regex> compile(const std::string& pattern, const std::string& name,
                                     const JsonReader& r) {
  try {
    return std::make_shared<const Regex>(pattern);
  } catch (const std::invalid_argument& e) {
    r.fail(name + " " + json::quote(pattern) + " does not compile: " + e.what());
  }
}

}  // namespace

void PreTokenizerSteps::read_step(const json::Value& v, const std::string& name,
                                  const JsonReader& r) {
  const std::string type = r.type_of(v, name);
  if (type == "Sequence") {
    const json::Value& list = r.array_at(v, "pretokenizers", name + ".pretokenizers");
    for (size_t i = 0; i < list.array().size(); ++i)
      read_step(list.array()[i], name + ".pretokenizers[" + std::to_string(i) + "]", r);
    return;
  }
  auto s = std::make_shared<Step>();
  using K = Step::Kind;
  if (type == "ByteLevel") {
    s->kind = K::kByteLevel;
    s->flag = r.bool_or(v, "add_prefix_space", name + ".add_prefix_space", true);
    s->use_regex = r.bool_or(v, "use_regex", name + ".use_regex", true);
    if (s->use_regex) {
      // ByteLevel's own split is GPT-2's pattern.
      s->regex = compile(split_pattern(PreTokenizer::kGpt2), name + "'s pattern", r);
      s->scanner = PreTokenizer::kGpt2;
    }
    byte_level_ = true;
  } else if (type == "Split") {
    s->kind = K::kSplit;
    const json::Value& pattern = r.object_at(v, "pattern", name + ".pattern");
    if (const json::Value* lit = pattern.find("String"); lit && lit->is_string()) {
      s->literal = lit->string();
      if (s->literal.empty()) s->regex = compile("", name + ".pattern.String", r);
    } else if (const json::Value* re = pattern.find("Regex"); re && re->is_string()) {
      s->pattern = re->string();
      s->regex = compile(s->pattern, name + ".pattern.Regex", r);
      for (const PreTokenizer kind :
           {PreTokenizer::kGpt2, PreTokenizer::kLlama3, PreTokenizer::kQwen2}) {
        if (s->pattern == split_pattern(kind)) s->scanner = kind;
      }
      if (!s->scanner) s->matcher = split_matcher(s->pattern);
    } else {
      r.fail(name + ".pattern is neither {\"String\": ...} nor {\"Regex\": ...}");
    }
    s->behavior = behavior_of(v, name, r, "");
    s->invert = r.bool_or(v, "invert", name + ".invert", false);
  } else if (type == "Digits") {
    s->kind = K::kDigits;
    s->flag = r.bool_or(v, "individual_digits", name + ".individual_digits", false);
    s->delimiters.is = unicode::is_numeric;
  } else if (type == "Punctuation") {
    s->kind = K::kPunctuation;
    s->behavior = behavior_of(v, name, r, "Isolated");
    s->delimiters.is = unicode::is_punctuation;
  } else if (type == "Whitespace") {
    s->kind = K::kWhitespace;
  } else if (type == "WhitespaceSplit") {
    s->kind = K::kWhitespaceSplit;
    s->delimiters.is = unicode::is_whitespace;
  } else if (type == "CharDelimiterSplit") {
    s->kind = K::kCharDelimiter;
    s->literal = r.string_or(v, "delimiter", name + ".delimiter", "");
    if (s->literal.empty() || size_t(utf8::decode(s->literal, 0).length) != s->literal.size())
      r.fail(name + ".delimiter must be one character");
    s->delimiters.only = utf8::decode(s->literal, 0).cp;
  } else if (type == "Metaspace") {
    s->kind = K::kMetaspace;
    s->literal = r.string_or(v, "replacement", name + ".replacement", "\xE2\x96\x81");
    if (s->literal.empty() || size_t(utf8::decode(s->literal, 0).length) != s->literal.size())
      r.fail(name + ".replacement must be one character");
    s->flag = r.bool_or(v, "split", name + ".split", true);
    // Files older than prepend_scheme say add_prefix_space instead: true is "always".
    const bool legacy = r.bool_or(v, "add_prefix_space", name + ".add_prefix_space", true);
    const std::string scheme =
        r.string_or(v, "prepend_scheme", name + ".prepend_scheme", legacy ? "always" : "never");
    if (scheme == "always")
      s->prepend = Step::Prepend::kAlways;
    else if (scheme == "first")
      s->prepend = Step::Prepend::kFirst;
    else if (scheme == "never")
      s->prepend = Step::Prepend::kNever;
    else
      r.fail(name + ".prepend_scheme " + json::quote(scheme) +
             " is not one of first, always, never");
  } else {
    r.unsupported(name, type);
  }
  s->delimiters.fill();
  steps_.push_back(std::move(s));
}

PreTokenizerSteps PreTokenizerSteps::read(const json::Value* pre_tokenizer, const JsonReader& r) {
  PreTokenizerSteps p;
  if (pre_tokenizer && !pre_tokenizer->is_null()) p.read_step(*pre_tokenizer, "pre_tokenizer", r);
  using K = Step::Kind;
  const auto& st = p.steps_;
  // The chains a hand-written scanner computes: ByteLevel's own split, or a Split whose pieces are
  // the pattern's matches (they tile the text) before a ByteLevel that only maps bytes.
  if (st.size() == 1 && st[0]->kind == K::kByteLevel && st[0]->use_regex) {
    p.scanner_ = PreTokenizer::kGpt2;
    p.scanner_prefix_space_ = st[0]->flag;
  } else if (st.size() == 2 && st[0]->kind == K::kSplit && st[0]->regex &&
             ((st[0]->behavior == SplitBehavior::kIsolated && !st[0]->invert) ||
              (st[0]->behavior == SplitBehavior::kRemoved && st[0]->invert)) &&
             st[1]->kind == K::kByteLevel && !st[1]->use_regex && !st[1]->flag) {
    for (const PreTokenizer kind :
         {PreTokenizer::kGpt2, PreTokenizer::kLlama3, PreTokenizer::kQwen2}) {
      if (st[0]->pattern == split_pattern(kind)) p.scanner_ = kind;
    }
  }
  // Cuttable: a step that always splits before a space following a letter, after only
  // character-local splits.
  for (const auto& s : st) {
    const bool known_split = s->kind == K::kSplit && s->regex &&
                             (s->pattern == split_pattern(PreTokenizer::kGpt2) ||
                              s->pattern == split_pattern(PreTokenizer::kLlama3) ||
                              s->pattern == split_pattern(PreTokenizer::kQwen2)) &&
                             ((s->behavior == SplitBehavior::kIsolated) ||
                              (s->behavior == SplitBehavior::kRemoved && s->invert));
    if ((s->kind == K::kByteLevel && s->use_regex) || known_split || s->kind == K::kWhitespace ||
        s->kind == K::kWhitespaceSplit || (s->kind == K::kMetaspace && s->flag)) {
      p.cuttable_ = true;
      break;
    }
    if (s->kind != K::kDigits && s->kind != K::kPunctuation) break;
  }
  return p;
}

PreTokenizerSteps PreTokenizerSteps::without_scanners() const {
  PreTokenizerSteps p = *this;
  for (auto& s : p.steps_) {
    auto general = std::make_shared<Step>(*s);
    general->scanner.reset();
    general->matcher.reset();
    s = std::move(general);
  }
  return p;
}

void PreTokenizerSteps::run(std::string_view text, bool text_start, PreTokens& out) const {
  out.clear();
  each(text, text_start, [&out](std::string_view piece, bool start) { out.add(piece, start); });
}

namespace {
// A step's buffers, one set per step of the chain: the steps run depth first, each on one piece
// of the step before it at a time, so the pieces of a whole text are never all held at once.
struct Level {
  Scratch w;
  std::string keys, bytes;  // the piece as keys for a step after ByteLevel; a piece back as bytes
};
thread_local std::vector<Level> levels;
}  // namespace

void PreTokenizerSteps::each_piece(std::string_view text, bool text_start, PieceFn fn,
                                   const void* sink) const {
  if (text.empty()) return;
  if (levels.size() < steps_.size()) levels.resize(steps_.size());
  descend(0, text, text_start, false, fn, sink);
}

void PreTokenizerSteps::descend(size_t k, std::string_view text, bool text_start, bool bytes,
                                PieceFn fn, const void* sink) const {
  if (k == steps_.size()) {
    fn(sink, text, text_start);
    return;
  }
  const Step& step = *steps_[k];
  Level& level = levels[k];
  // A step after ByteLevel sees its characters, and leaves bytes again: one that looks at a
  // character at a time reads the bytes as characters, the others are given the characters.
  const bool as_keys = bytes && !step.char_local();
  if (as_keys) {
    level.keys.clear();
    byte_alphabet::append_key(level.keys, text);
    text = level.keys;
  }
  const bool back = as_keys && step.kind != Step::Kind::kByteLevel;
  const bool next_bytes = bytes || step.kind == Step::Kind::kByteLevel;
  if (!as_keys && step.intact(text, bytes)) {
    descend(k + 1, text, text_start, next_bytes, fn, sink);
    return;
  }
  step.run(text, text_start, bytes && !as_keys, level.w);
  for (const auto& [begin, end] : level.w.kept) {
    if (begin == end) continue;  // empty pieces are dropped
    std::string_view piece = level.w.source.substr(begin, end - begin);
    if (back) {
      level.bytes.clear();
      if (!byte_alphabet::append_bytes(level.bytes, piece)) level.bytes.assign(piece);
      piece = level.bytes;
    }
    descend(k + 1, piece, text_start && begin == 0, next_bytes, fn, sink);
  }
}

}  // namespace mpf
