#include "text/bpe_tokenizer.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <functional>

#include "core/error.hpp"
#include "text/byte_alphabet.hpp"
#include "text/unicode_classes.hpp"
#include "text/utf8.hpp"

namespace mpf {

namespace {

// The lowest-ranked pair merged first, the leftmost of equals: on a piece of n tokens, a scan of
// the n - 1 pairs per merge (pieces are short: words, numbers). Returns the tokens left.
constexpr size_t kScanMax = 64;
size_t merge_by_scan(const MergeTable& merges, int32_t* ids, size_t n) {
  MergeTable::Merge pairs[kScanMax];
  for (size_t p = 0; p + 1 < n; ++p) pairs[p] = merges.find(ids[p], ids[p + 1]);
  for (;;) {
    size_t best = n;
    int32_t best_rank = INT32_MAX;
    for (size_t p = 0; p + 1 < n; ++p) {
      if (pairs[p].rank >= 0 && pairs[p].rank < best_rank) {
        best_rank = pairs[p].rank;
        best = p;
      }
    }
    if (best == n) break;
    ids[best] = pairs[best].merged;
    for (size_t p = best + 1; p + 1 < n; ++p) {
      ids[p] = ids[p + 1];
      pairs[p] = pairs[p + 1];
    }
    --n;
    if (best > 0) pairs[best - 1] = merges.find(ids[best - 1], ids[best]);
    if (best + 1 < n) pairs[best] = merges.find(ids[best], ids[best + 1]);
  }
  return n;
}

// The same order for long pieces (a sentence of CJK letters, a run of spaces, a segment of a
// whole document when nothing splits it): a heap of pairs by (rank, position) over a linked list
// of tokens; a pair whose tokens changed since it was pushed is skipped when it comes up. Merges
// ids[0, n) in place; returns the tokens left.
size_t merge_by_heap(const MergeTable& merges, int32_t* ids, size_t n) {
  struct Node {
    int32_t id, prev, next;
  };
  struct Pair {
    int32_t rank, left, right, left_id, right_id, merged;
    bool operator>(const Pair& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  // Reused from piece to piece: no allocation once grown.
  thread_local std::vector<Node> nodes;
  thread_local std::vector<Pair> heap;
  nodes.resize(n);
  heap.clear();
  const int32_t count = int32_t(n);
  for (int32_t i = 0; i < count; ++i)
    nodes[size_t(i)] = {ids[size_t(i)], i - 1, i + 1 < count ? i + 1 : -1};
  const std::greater<Pair> later;
  const auto push = [&](int32_t left, int32_t right) {
    const int32_t a = nodes[size_t(left)].id, b = nodes[size_t(right)].id;
    const MergeTable::Merge m = merges.find(a, b);
    if (m.rank < 0) return;
    heap.push_back({m.rank, left, right, a, b, m.merged});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (int32_t i = 0; i + 1 < count; ++i) push(i, i + 1);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Pair p = heap.back();
    heap.pop_back();
    Node& left = nodes[size_t(p.left)];
    if (left.id != p.left_id || left.next != p.right || nodes[size_t(p.right)].id != p.right_id)
      continue;
    Node& right = nodes[size_t(p.right)];
    left.id = p.merged;
    left.next = right.next;
    if (right.next >= 0) nodes[size_t(right.next)].prev = p.left;
    right.id = -1;
    if (left.prev >= 0) push(left.prev, p.left);
    if (left.next >= 0) push(p.left, left.next);
  }
  size_t k = 0;
  for (int32_t i = 0; i >= 0; i = nodes[size_t(i)].next) ids[k++] = nodes[size_t(i)].id;
  return k;
}

// What became of the characters no token stands for, in this thread's encode calls.
thread_local UnknownTally t_unknown;

}  // namespace

UnknownTally BpeTokenizer::take_unknown_tally() {
  const UnknownTally t = t_unknown;
  t_unknown = UnknownTally{};
  return t;
}

BpeTokenizer BpeTokenizer::with_unknown(UnknownSymbols how) const {
  BpeTokenizer t = *this;
  t.unknown_ = how;
  t.cache_ = std::make_shared<Cache>();
  return t;
}

void BpeTokenizer::refuse_symbol(std::string_view chars) const {
  const utf8::Char c = byte_level_ ? utf8::Char{utf8::kInvalid, 1} : utf8::decode(chars, 0);
  char what[48];
  if (c.cp == utf8::kInvalid) {
    std::snprintf(what, sizeof what, "the byte 0x%02X", static_cast<unsigned>(uint8_t(chars[0])));
  } else {
    std::snprintf(what, sizeof what, "the character U+%04X", static_cast<unsigned>(c.cp));
  }
  throw InputError("tokenizer " + path_ + ": model.vocab has no token for " + what +
                   ", which the text holds; pass --unknown-bytes drop to leave such characters "
                   "out (as Hugging Face does) or --unknown-bytes replace");
}

// A character no token stands for, in a model with no unknown token: left out (Hugging Face's
// merge_word), U+FFFD's symbols in its place (kReplace), or refused (kError). `first` and `last`:
// its place in the piece, for the subword prefix and suffix.
void BpeTokenizer::lost_symbol(std::string_view chars, bool first, bool last,
                               std::vector<int32_t>& out) const {
  if (unknown_ == UnknownSymbols::kError) refuse_symbol(chars);
  if (unknown_ == UnknownSymbols::kReplace) {
    const std::string_view fffd = "\xEF\xBF\xBD";
    const size_t start = out.size();
    std::string key;
    const auto add = [&](std::string_view symbol, bool at_start, bool at_end) {
      key.assign(at_start ? "" : prefix_);
      key.append(symbol);
      if (at_end) key += suffix_;
      const std::optional<int32_t> id = vocab_id(key);
      if (id) out.push_back(*id);
      return id.has_value();
    };
    bool found = true;
    if (byte_level_) {
      for (size_t i = 0; found && i < 3; ++i)
        found = add(fffd.substr(i, 1), first && i == 0, last && i == 2);
    } else if (!add(fffd, first, last)) {
      for (size_t i = 0; found && i < 3; ++i) {
        const int32_t id = byte_fallback_ ? fallback_ids_[static_cast<uint8_t>(fffd[i])] : -1;
        found = id >= 0;
        if (found) out.push_back(id);
      }
    }
    if (found) {
      ++t_unknown.replaced;
      return;
    }
    out.resize(start);
  }
  ++t_unknown.dropped;
}

// Symbols for bytes the model has no token for, as Hugging Face's merge_word gives them: their
// <0xNN> tokens (byte_fallback), else the unknown token.
void BpeTokenizer::unknown_bytes(std::string_view bytes, std::vector<int32_t>& out) const {
  bool all = byte_fallback_ && !bytes.empty();
  for (size_t i = 0; all && i < bytes.size(); ++i)
    all = fallback_ids_[static_cast<uint8_t>(bytes[i])] >= 0;
  if (all) {
    for (const char b : bytes) out.push_back(fallback_ids_[static_cast<uint8_t>(b)]);
    return;
  }
  if (unk_token_.empty()) {  // no unknown token
    lost_symbol(bytes, true, true, out);
    return;
  }
  if (unk_id_ < 0)
    throw InputError("tokenizer " + path_ + ": model.unk_token " + json::quote(unk_token_) +
                     " is not in model.vocab, and the text holds a character the vocabulary " +
                     "lacks; add the token to the vocabulary");
  if (unknown_ == UnknownSymbols::kError && !bytes.empty()) refuse_symbol(bytes);
  ++t_unknown.replaced;
  out.push_back(unk_id_);
}

void BpeTokenizer::initial_symbols(std::string_view piece, std::vector<int32_t>& out) const {
  if (byte_level_ && prefix_.empty() && suffix_.empty()) {
    const size_t start = out.size();
    for (const char ch : piece) {
      const int32_t id = byte_ids_[static_cast<uint8_t>(ch)];
      if (id < 0) break;
      out.push_back(id);
    }
    if (out.size() - start == piece.size()) return;
    out.resize(start);  // a byte with no token: the general loop below
  }
  // Hugging Face's merge_word: a symbol per character (per byte at byte level), marked with the
  // prefix when not first and the suffix when last; one not in the vocabulary becomes its bytes'
  // <0xNN> tokens, else the unknown token (consecutive ones fused with fuse_unk), else nothing.
  std::string key;
  bool pending_unk = false;  // an unknown symbol not yet written
  for (size_t at = 0; at < piece.size();) {
    const utf8::Char c = byte_level_ ? utf8::Char{0, 1} : utf8::decode(piece, at);
    const size_t length = size_t(c.length);
    if (!char_ids_.empty() && c.cp < kCharIds && char_ids_[c.cp] >= 0) {  // the common case
      if (pending_unk) out.push_back(unk_id_);
      pending_unk = false;
      out.push_back(char_ids_[c.cp]);
      at += length;
      continue;
    }
    const std::string_view ch = piece.substr(at, length);
    const bool first = at == 0;
    key.clear();
    if (!first) key += prefix_;
    key.append(ch);
    at += length;
    if (at == piece.size()) key += suffix_;
    if (const std::optional<int32_t> id = vocab_id(key)) {
      if (pending_unk) out.push_back(unk_id_);
      pending_unk = false;
      out.push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (const char b : key) all = all && fallback_ids_[static_cast<uint8_t>(b)] >= 0;
      if (all) {  // written before an unknown still pending, as there
        for (const char b : key) out.push_back(fallback_ids_[static_cast<uint8_t>(b)]);
        continue;
      }
    }
    if (unk_token_.empty()) {
      lost_symbol(ch, first, at == piece.size(), out);
      continue;
    }
    if (unk_id_ < 0) unknown_bytes(std::string_view(), out);  // throws: no such token
    if (unknown_ == UnknownSymbols::kError) refuse_symbol(ch);
    ++t_unknown.replaced;
    if (pending_unk && !fuse_unk_) out.push_back(unk_id_);
    pending_unk = true;
  }
  if (pending_unk) out.push_back(unk_id_);
}

const MergeCuts& BpeTokenizer::cuts() const {
  std::call_once(cuts_->once, [this] {
    // The ids initial_symbols() may give: a key that is one character (one byte at byte level),
    // with or without the prefix and the suffix; a <0xNN> token; the unknown token.
    std::vector<char> initial(keys_.size(), 0);
    for (size_t id = 0; id < keys_.size(); ++id) {
      const std::string_view key = keys_[id];
      for (const std::string_view pre : {std::string_view(), std::string_view(prefix_)}) {
        for (const std::string_view suf : {std::string_view(), std::string_view(suffix_)}) {
          if (key.size() < pre.size() + suf.size() || key.substr(0, pre.size()) != pre ||
              key.substr(key.size() - suf.size()) != suf)
            continue;
          const std::string_view c = key.substr(pre.size(), key.size() - pre.size() - suf.size());
          if (!c.empty() && (c.size() == 1 || size_t(utf8::decode(c, 0).length) == c.size()))
            initial[id] = 1;
        }
      }
    }
    for (const int32_t id : fallback_ids_)
      if (id >= 0) initial[size_t(id)] = 1;
    if (unk_id_ >= 0) initial[size_t(unk_id_)] = 1;
    cuts_->cuts = MergeCuts::build(merges_, initial);
  });
  return cuts_->cuts;
}

// A long piece's symbols ids[0, n), merged in place: segment by segment between neighbours no
// merge can join (merge_cuts.hpp), each as if it were the whole. Returns the tokens left.
size_t BpeTokenizer::merge_long(int32_t* ids, size_t n) const {
  if (!cut_long_pieces_) return merge_by_heap(merges_, ids, n);
  const MergeCuts& c = cuts();
  size_t kept = 0;
  for (size_t begin = 0; begin < n;) {
    size_t end = begin + 1;
    while (end < n && c.joinable(ids[end - 1], ids[end])) ++end;
    if (end - begin == 1) {  // a symbol alone (most of them, with few merges): no call
      ids[kept++] = ids[begin];
      begin = end;
      continue;
    }
    const size_t left = end - begin <= kScanMax ? merge_by_scan(merges_, ids + begin, end - begin)
                                                : merge_by_heap(merges_, ids + begin, end - begin);
    std::memmove(ids + kept, ids + begin, left * sizeof(int32_t));
    kept += left;
    begin = end;
  }
  return kept;
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out,
                                Cache* cache) const {
  if (piece.empty()) return;
  const bool cached = cache && piece.size() <= Cache::kMaxPieceBytes;
  // (A long piece, a whole text at times, is hashed only where a lookup needs it.)
  const uint64_t h = cached || ignore_merges_ ? PieceTable::hash(piece) : 0;
  if (ignore_merges_) {  // Llama 3's rule: a pre-token in the vocabulary is that token
    const PieceTable::Ids word = vocab_.find(piece, h);
    if (word.size > 0) {
      out.push_back(word.data[0]);
      return;
    }
  }
  if (cached) {
    const PieceTable::Ids hit = cache->table.find(piece, h);
    if (hit.size == 1) {  // most pieces: one token, without a call to memmove
      out.push_back(hit.data[0]);
      return;
    }
    if (hit.size > 1) {
      out.insert(out.end(), hit.data, hit.data + hit.size);
      return;
    }
  }
  const size_t start = out.size();
  // At most a symbol per byte; grown geometrically, as push_back would.
  if (out.capacity() < start + piece.size())
    out.reserve(std::max(start + piece.size(), 2 * out.capacity()));
  const int64_t lost = t_unknown.dropped + t_unknown.replaced;
  initial_symbols(piece, out);
  // A piece with a character no token stands for is not cached: each encoding counts it.
  const bool cache_it = cached && t_unknown.dropped + t_unknown.replaced == lost;
  const size_t n = out.size() - start;
  // Merged in place at the end of `out`.
  if (n <= kScanMax) {
    out.resize(start + merge_by_scan(merges_, out.data() + start, n));
  } else {
    out.resize(start + merge_long(out.data() + start, n));
  }
  if (cache_it && out.size() > start && piece.size() > 1) {
    if (cache->table.size() >= Cache::kMaxEntries) cache->table.clear();
    cache->table.insert(piece, h, out.data() + start, out.size() - start);
  }
}

// Well-formed text after the normalizer and the normalized added tokens: pre-tokens, then BPE.
void BpeTokenizer::encode_normalized(std::string_view text, bool part_start, bool text_start,
                                     std::vector<int32_t>& out, Cache* cache) const {
  if (!scanner_) {
    pre_.each(text, text_start,
              [&](std::string_view piece, bool) { encode_piece(piece, out, cache); });
    return;
  }
  std::string local;
  std::string& prefixed = cache ? cache->prefixed : local;
  // (A later segment of a part is no part's start: no prefix space.)
  if (scanner_prefix_space_ && part_start && !text.empty() && text[0] != ' ') {
    prefixed.assign(1, ' ');
    prefixed.append(text);
    text = prefixed;
  }
  for (size_t at = 0; at < text.size();) {
    const size_t end = pre_token_end(*scanner_, text, at);
    encode_piece(text.substr(at, end - at), out, cache);
    at = end;
  }
}

// One part of a text between added tokens matched in the raw text.
void BpeTokenizer::encode_part(std::string_view text, bool part_start, bool text_start,
                               bool parse_special, std::vector<int32_t>& out, Cache* cache) const {
  // Ill-formed bytes are pre-tokens of their own; the well-formed runs between go through the
  // pipeline as parts.
  for (size_t at = 0; at < text.size() || (at == 0 && text.empty());) {
    const size_t good = at + utf8::well_formed_prefix(text.substr(at));
    const std::string_view run = text.substr(at, good - at);
    const bool run_start = part_start && at == 0;
    if (!run.empty()) {
      std::string local, local_spare;
      std::string& normalized = cache ? cache->normalized : local;
      std::string_view n = run;
      if (!normalizer_.empty()) {
        normalizer_.apply(run, run_start, normalized, cache ? cache->spare : local_spare);
        n = normalized;
      }
      if (!added_.matchable(true, parse_special)) {
        encode_normalized(n, run_start, text_start && at == 0, out, cache);
      } else {
        std::vector<AddedTokens::Part> parts;
        added_.split(n, true, parse_special, parts);
        for (const AddedTokens::Part& p : parts) {
          if (p.id >= 0)
            out.push_back(p.id);
          else
            encode_normalized(n.substr(p.begin, p.end - p.begin), run_start || p.begin > 0,
                              text_start && at == 0 && p.begin == 0, out, cache);
        }
      }
    }
    if (good == text.size()) break;
    const std::string_view byte = text.substr(good, 1);
    if (byte_level_) {
      encode_piece(byte, out, nullptr);
    } else {
      unknown_bytes(byte, out);
    }
    at = good + 1;
  }
}

void BpeTokenizer::encode_text(std::string_view text, bool parse_special, bool first,
                               std::vector<int32_t>& out, Cache* cache) const {
  if (!added_.matchable(false, parse_special)) {
    encode_part(text, first, first, parse_special, out, cache);
    return;
  }
  std::vector<AddedTokens::Part> parts;
  added_.split(text, false, parse_special, parts);
  for (const AddedTokens::Part& p : parts) {
    if (p.id >= 0) {
      out.push_back(p.id);
      continue;
    }
    const bool start = first || p.begin > 0;
    encode_part(text.substr(p.begin, p.end - p.begin), start, first && p.begin == 0, parse_special,
                out, cache);
  }
}

void BpeTokenizer::Cache::release_large() {
  if (ids.capacity() * sizeof(int32_t) > kMaxKeptBytes) std::vector<int32_t>().swap(ids);
  for (std::string* s : {&normalized, &spare, &prefixed})
    if (s->capacity() > kMaxKeptBytes) std::string().swap(*s);
}

std::vector<int32_t> BpeTokenizer::encode_whole(std::string_view text, bool parse_special) const {
  std::unique_lock<std::mutex> lock(cache_->mutex, std::try_to_lock);
  if (!lock.owns_lock()) {  // another thread's call holds the buffers
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 1);
    encode_text(text, parse_special, true, out, nullptr);
    return out;
  }
  Cache& cache = *cache_;
  cache.ids.clear();
  cache.ids.reserve(text.size() / 3 + 1);
  encode_text(text, parse_special, true, cache.ids, &cache);
  // The one allocation of the call, of the size it needs, written once.
  std::vector<int32_t> out(cache.ids.begin(), cache.ids.end());
  cache.release_large();
  return out;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  return encode_whole(text, false);
}

void BpeTokenizer::encode_segment(std::string_view text, bool first,
                                  std::vector<int32_t>& out) const {
  std::unique_lock<std::mutex> lock(cache_->mutex, std::try_to_lock);
  encode_text(text, false, first, out, lock.owns_lock() ? cache_.get() : nullptr);
}

std::vector<int32_t> BpeTokenizer::encode_with_specials(std::string_view text) const {
  return encode_whole(text, true);
}

size_t BpeTokenizer::cut(std::string_view text, size_t from) const {
  if (!cuttable_) return 0;
  if (letter_cut_) return last_safe_cut(text, from);
  if (text.size() < 5) return 0;
  // Before an ASCII space whose character before is a letter (the 4 bytes kept at the end let a
  // character there be seen whole when `text` is a prefix).
  for (size_t q = text.size() - 4; q >= std::max<size_t>(from, 1); --q) {
    if (text[q] != ' ') continue;
    size_t start = q - 1;
    while (start > 0 && q - start < 4 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
      --start;
    const utf8::Char before = utf8::decode(text, start);
    if (start + size_t(before.length) == q &&
        unicode::char_class(before.cp) == unicode::CharClass::kLetter)
      return q;
  }
  return 0;
}

void BpeTokenizer::check_id(int32_t id) const {
  require(id >= 0 && id < vocab_size() && known_[size_t(id)],
          "tokenizer " + path_ + ": no token has id " + std::to_string(id) +
              " (its vocabulary has " + std::to_string(vocab_size()) + " ids)");
}

std::string BpeTokenizer::key_text(int32_t id) const {
  check_id(id);
  const std::string& key = keys_[size_t(id)];
  return byte_level_ && !is_added_[size_t(id)] ? byte_alphabet::key_of(key) : key;
}

std::string BpeTokenizer::token_bytes(int32_t id) const {
  check_id(id);
  // A byte-level key is its bytes already: the ByteLevel decoder's work.
  if (decoder_.empty() || (byte_level_ && decoder_.byte_level_only())) return keys_[size_t(id)];
  return decoder_.token_bytes(key_text(id));
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  if (byte_level_ && decoder_.empty()) {  // no decoder: the bytes, not the keys joined by spaces
    std::string text;
    for (const int32_t id : ids) text += token_bytes(id);
    return text;
  }
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) tokens.push_back(key_text(id));
  return decoder_.decode(std::move(tokens));
}

std::optional<int32_t> BpeTokenizer::token_id(std::string_view token) const {
  for (const AddedToken& a : added_.tokens()) {
    if (a.content == token) return a.id;
  }
  return vocab_id(token);
}

BpeTokenizer BpeTokenizer::without_scanner() const {
  BpeTokenizer t = *this;
  t.scanner_.reset();
  t.pre_ = pre_.without_scanners();
  t.cut_long_pieces_ = false;
  t.cache_ = std::make_shared<Cache>();
  return t;
}

std::vector<std::string> BpeTokenizer::pre_tokens(std::string_view text) const {
  std::vector<std::string> pieces;
  const std::string n = normalizer_.empty() ? std::string(text) : normalizer_.apply(text);
  if (!scanner_) {
    PreTokens p;
    pre_.run(n, true, p);
    for (size_t i = 0; i < p.size(); ++i) pieces.emplace_back(p[i]);
    return pieces;
  }
  std::string s = n;
  if (scanner_prefix_space_ && !s.empty() && s[0] != ' ') s.insert(0, " ");
  for (const std::string_view p : pre_tokenize(*scanner_, s)) pieces.emplace_back(p);
  return pieces;
}

}  // namespace mpf
