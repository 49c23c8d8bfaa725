#include "text/bpe_tokenizer.hpp"

#include <algorithm>
#include <climits>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "core/error.hpp"
#include "io/input_file.hpp"
#include "io/json.hpp"
#include "text/byte_alphabet.hpp"

namespace mpf {

// Pre-tokens' encodings, for the encode call that holds the mutex. Bounded: emptied when full.
struct BpeTokenizer::Cache {
  static constexpr size_t kMaxEntries = size_t(1) << 16;
  static constexpr size_t kMaxPieceBytes = 256;
  std::mutex mutex;
  PieceTable table;
};

// Token ids at or above this are refused (Llama 3 has 128,256; the largest byte-level BPE
// vocabularies a few hundred thousand).
constexpr int64_t kMaxTokenId = int64_t(1) << 22;

// Reads tokenizer.json into a BpeTokenizer; every problem an InputError naming the file.
class BpeTokenizerLoader {
 public:
  explicit BpeTokenizerLoader(const std::string& path) : what_("tokenizer " + path) {}

  BpeTokenizer load(const std::string& path);

 private:
  [[noreturn]] void fail(const std::string& problem) const {
    throw InputError(what_ + ": " + problem);
  }
  static std::string quoted(std::string_view s) { return json::quote(s); }

  const json::Value& object_at(const json::Value& parent, std::string_view key,
                               const std::string& name) const;
  std::string string_or(const json::Value& obj, std::string_view key, const std::string& name,
                        const std::string& otherwise) const;
  bool bool_or(const json::Value& obj, std::string_view key, const std::string& name,
               bool otherwise) const;
  // `name()` makes the key's name for a message, only when there is one to give.
  template <class Name>
  int32_t id_of(const json::Value& v, Name&& name) const {
    int64_t id = -1;
    try {
      id = v.integer();
    } catch (const json::TypeError&) {
      fail(name() + " is not an integer token id");
    }
    if (id < 0) fail(name() + " is " + std::to_string(id) + ", not a token id");
    // The id table is as long as the largest id: a corrupt id in the billions would allocate
    // gigabytes before any check could name it.
    if (id >= kMaxTokenId)
      fail(name() + " is " + std::to_string(id) + ", above " + std::to_string(kMaxTokenId - 1) +
           "; no byte-level BPE vocabulary is that large (the file is corrupt)");
    return int32_t(id);
  }

  void read_pre_tokenizer(const json::Value& doc, BpeTokenizer& t) const;
  void read_model_options(const json::Value& model) const;
  void read_added_tokens(const json::Value& doc, BpeTokenizer& t) const;
  void read_vocab(const json::Value& model, BpeTokenizer& t) const;
  void read_merges(const json::Value& model, BpeTokenizer& t) const;
  void read_template(const json::Value& processor, const std::string& name, BpeTokenizer& t) const;

  std::string what_;
};

const json::Value& BpeTokenizerLoader::object_at(const json::Value& parent, std::string_view key,
                                                 const std::string& name) const {
  const json::Value* v = parent.find(key);
  if (!v || v->is_null()) fail("has no " + name + "; " + "is this a Hugging Face tokenizer.json?");
  if (!v->is_object()) fail(name + " is " + json::kind_name(v->kind()) + ", not an object");
  return *v;
}

std::string BpeTokenizerLoader::string_or(const json::Value& obj, std::string_view key,
                                          const std::string& name,
                                          const std::string& otherwise) const {
  const json::Value* v = obj.find(key);
  if (!v || v->is_null()) return otherwise;
  if (!v->is_string()) fail(name + " is " + json::kind_name(v->kind()) + ", not a string");
  return v->string();
}

bool BpeTokenizerLoader::bool_or(const json::Value& obj, std::string_view key,
                                 const std::string& name, bool otherwise) const {
  const json::Value* v = obj.find(key);
  if (!v || v->is_null()) return otherwise;
  if (!v->is_bool()) fail(name + " is " + json::kind_name(v->kind()) + ", not true or false");
  return v->boolean();
}

void BpeTokenizerLoader::read_pre_tokenizer(const json::Value& doc, BpeTokenizer& t) const {
  const std::string supported =
      ": only byte-level BPE with GPT-2's pre-tokenizer (ByteLevel) or Llama 3's (Sequence of "
      "Split and ByteLevel) is supported";
  const json::Value& pre = object_at(doc, "pre_tokenizer", "pre_tokenizer");
  const std::string type = string_or(pre, "type", "pre_tokenizer.type", "");
  if (type == "ByteLevel") {
    if (!bool_or(pre, "use_regex", "pre_tokenizer.use_regex", true))
      fail("pre_tokenizer ByteLevel has use_regex false and nothing else splits the text" +
           supported);
    t.pre_tokenizer_ = PreTokenizer::kGpt2;
    t.add_prefix_space_ = bool_or(pre, "add_prefix_space", "pre_tokenizer.add_prefix_space", false);
    return;
  }
  if (type != "Sequence")
    fail("pre_tokenizer type " + quoted(type) + " is not supported" + supported);
  const json::Value* list = pre.find("pretokenizers");
  if (!list || !list->is_array() || list->array().size() != 2 || !list->array()[0].is_object() ||
      !list->array()[1].is_object() ||
      string_or(list->array()[0], "type", "pre_tokenizer.pretokenizers[0].type", "") != "Split" ||
      string_or(list->array()[1], "type", "pre_tokenizer.pretokenizers[1].type", "") !=
          "ByteLevel") {
    fail("pre_tokenizer Sequence is not [Split, ByteLevel]" + supported);
  }
  const json::Value& split = list->array()[0];
  const json::Value& level = list->array()[1];
  const json::Value& pattern = object_at(split, "pattern", "pre_tokenizer Split's pattern");
  // {"String": ...} splits on a literal string, not a pattern: no known byte-level tokenizer's.
  const std::string regex = string_or(pattern, "Regex", "pre_tokenizer Split's pattern.Regex", "");
  if (regex == split_pattern(PreTokenizer::kLlama3)) {
    t.pre_tokenizer_ = PreTokenizer::kLlama3;
  } else if (regex == split_pattern(PreTokenizer::kGpt2)) {
    t.pre_tokenizer_ = PreTokenizer::kGpt2;
  } else {
    fail("pre_tokenizer Split's pattern " + quoted(regex) +
         " is neither GPT-2's nor Llama 3's; those are the two split rules implemented");
  }
  const std::string behavior = string_or(split, "behavior", "pre_tokenizer Split's behavior", "");
  if (behavior != "Isolated" || bool_or(split, "invert", "pre_tokenizer Split's invert", false))
    fail("pre_tokenizer Split has behavior " + quoted(behavior) +
         " (or invert true); only Isolated, not inverted, is supported");
  if (bool_or(level, "use_regex", "pre_tokenizer ByteLevel's use_regex", true))
    fail("pre_tokenizer ByteLevel after Split has use_regex true (a second split)" + supported);
  // There a prefix space would go before every piece of the split, which this encoder does not do.
  if (bool_or(level, "add_prefix_space", "pre_tokenizer ByteLevel's add_prefix_space", false))
    fail("pre_tokenizer ByteLevel after Split has add_prefix_space true; only false is supported");
}

void BpeTokenizerLoader::read_model_options(const json::Value& model) const {
  const std::string type = string_or(model, "type", "model.type", "BPE");
  if (type != "BPE") fail("model.type is " + quoted(type) + "; only BPE models are supported");
  if (bool_or(model, "byte_fallback", "model.byte_fallback", false))
    fail(
        "model.byte_fallback is true (a SentencePiece-style BPE); only byte-level BPE is "
        "supported");
  const json::Value* dropout = model.find("dropout");
  if (dropout && !dropout->is_null() && !(dropout->is_number() && dropout->number() == 0))
    fail("model.dropout is set (BPE-dropout is for training); set it to null");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!string_or(model, key, std::string("model.") + key, "").empty())
      fail(std::string("model.") + key + " is set; byte-level BPE has none");
  }
}

void BpeTokenizerLoader::read_added_tokens(const json::Value& doc, BpeTokenizer& t) const {
  const json::Value* list = doc.find("added_tokens");
  if (!list || list->is_null()) return;
  if (!list->is_array()) fail("added_tokens is not an array");
  for (size_t i = 0; i < list->array().size(); ++i) {
    const json::Value& item = list->array()[i];
    const std::string name = "added_tokens[" + std::to_string(i) + "]";
    if (!item.is_object()) fail(name + " is not an object");
    const json::Value* id = item.find("id");
    if (!id) fail(name + " has no id");
    const std::string content = string_or(item, "content", name + ".content", "");
    if (content.empty()) fail(name + " has no content");
    t.added_.push_back({content, id_of(*id, [&] { return name + ".id"; })});
  }
  std::stable_sort(t.added_.begin(), t.added_.end(), [](const auto& a, const auto& b) {
    return a.content.size() > b.content.size();
  });
  for (const auto& a : t.added_) t.added_starts_[static_cast<uint8_t>(a.content[0])] = true;
}

void BpeTokenizerLoader::read_vocab(const json::Value& model, BpeTokenizer& t) const {
  const json::Value& vocab = object_at(model, "vocab", "model.vocab");
  int32_t top = -1;
  for (const auto& a : t.added_) top = std::max(top, a.id);
  std::vector<std::pair<std::string, int32_t>> tokens;
  tokens.reserve(vocab.object().size());
  // A key given twice keeps its last id, as Python's json and Hugging Face's tokenizers (a serde
  // map) read it; the id it had first then names no token.
  std::unordered_map<std::string_view, size_t> last;
  for (size_t i = 0; i < vocab.object().size(); ++i) last[vocab.object()[i].first] = i;
  for (size_t i = 0; i < vocab.object().size(); ++i) {
    const auto& [key, value] = vocab.object()[i];
    if (last[key] != i) continue;
    const auto name = [&key = key] { return "model.vocab[" + quoted(key) + "]"; };
    const int32_t id = id_of(value, name);
    std::optional<std::string> bytes = byte_alphabet::bytes_of(key);
    if (!bytes) {
      // A special token some tokenizers also list in the vocabulary, in plain text.
      const bool added = std::any_of(t.added_.begin(), t.added_.end(),
                                     [&](const auto& a) { return a.content == key; });
      if (!added)
        fail(name() +
             ": the key is not written in GPT-2's byte-level alphabet; only byte-level BPE "
             "tokenizers are supported");
      bytes = key;
    }
    tokens.emplace_back(std::move(*bytes), id);
    top = std::max(top, id);
  }
  t.pieces_.assign(size_t(top) + 1, std::string());
  t.known_.assign(size_t(top) + 1, 0);
  for (auto& [bytes, id] : tokens) {
    if (t.known_[size_t(id)])
      fail("model.vocab gives id " + std::to_string(id) +
           " to two tokens; each id names one token");
    t.known_[size_t(id)] = 1;
    const uint64_t h = PieceTable::hash(bytes);
    if (t.vocab_.find(bytes, h).size == 0) t.vocab_.insert(bytes, h, &id, 1);
    t.pieces_[size_t(id)] = std::move(bytes);
  }
  // An added token's content is its text, whatever the vocabulary lists for its id.
  for (const auto& a : t.added_) {
    t.known_[size_t(a.id)] = 1;
    t.pieces_[size_t(a.id)] = a.content;
  }
  for (int b = 0; b < 256; ++b) t.byte_ids_[b] = t.vocab_id(std::string(1, char(b))).value_or(-1);
}

void BpeTokenizerLoader::read_merges(const json::Value& model, BpeTokenizer& t) const {
  const json::Value* merges = model.find("merges");
  if (!merges || !merges->is_array())
    fail(merges ? "model.merges is not an array" : "has no model.merges");
  t.merges_.reserve(merges->array().size());
  for (size_t rank = 0; rank < merges->array().size(); ++rank) {
    const json::Value& m = merges->array()[rank];
    const auto name = [rank] { return "model.merges[" + std::to_string(rank) + "]"; };
    std::string left, right;
    if (m.is_string()) {  // "a b"
      const std::string& s = m.string();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        fail(name() + " " + quoted(s) + " is not two tokens separated by one space");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.array().size() == 2 && m.array()[0].is_string() &&
               m.array()[1].is_string()) {  // ["a", "b"]
      left = m.array()[0].string();
      right = m.array()[1].string();
    } else {
      fail(name() + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    int32_t ids[2];
    std::string bytes[2];
    for (int k = 0; k < 2; ++k) {
      const std::string& key = k == 0 ? left : right;
      std::optional<std::string> b = byte_alphabet::bytes_of(key);
      const std::optional<int32_t> id = b ? t.vocab_id(*b) : std::nullopt;
      if (!id) fail(name() + " names " + quoted(key) + ", which is not in model.vocab");
      ids[k] = *id;
      bytes[k] = std::move(*b);
    }
    const std::optional<int32_t> merged = t.vocab_id(bytes[0] + bytes[1]);
    if (!merged)
      fail(name() + " merges " + quoted(left) + " and " + quoted(right) + " into " +
           quoted(left + right) + ", which is not in model.vocab");
    t.merges_.add(ids[0], ids[1], {int32_t(rank), *merged});
  }
}

void BpeTokenizerLoader::read_template(const json::Value& processor, const std::string& name,
                                       BpeTokenizer& t) const {
  if (!processor.is_object()) return;
  const std::string type = string_or(processor, "type", name + ".type", "");
  if (type == "Sequence") {
    const json::Value* list = processor.find("processors");
    if (!list || !list->is_array()) return;
    for (size_t i = 0; i < list->array().size(); ++i)
      read_template(list->array()[i], name + ".processors[" + std::to_string(i) + "]", t);
    return;
  }
  if (type != "TemplateProcessing") return;
  const json::Value* single = processor.find("single");
  const json::Value* specials = processor.find("special_tokens");
  if (!single || !single->is_array()) fail(name + ".single is not an array");
  for (const json::Value& item : single->array()) {
    const json::Value* special = item.find("SpecialToken");
    if (!special) break;  // the text ("Sequence"): what follows it is not a prefix
    const std::string token = string_or(*special, "id", name + ".single SpecialToken.id", "");
    const json::Value* entry = specials ? specials->find(token) : nullptr;
    const json::Value* ids = entry ? entry->find("ids") : nullptr;
    if (!ids || !ids->is_array()) fail(name + ".special_tokens has no ids for " + quoted(token));
    for (const json::Value& id : ids->array()) {
      const int32_t v =
          id_of(id, [&] { return name + ".special_tokens[" + quoted(token) + "].ids"; });
      if (v >= int32_t(t.pieces_.size()) || !t.known_[size_t(v)])
        fail(name + ".special_tokens[" + quoted(token) + "] names id " + std::to_string(v) +
             ", which no token has");
      t.template_prefix_.push_back(v);
    }
  }
}

BpeTokenizer BpeTokenizerLoader::load(const std::string& path) {
  int64_t bytes = 0;
  File file = open_for_reading(path, what_, "a Hugging Face tokenizer.json", bytes);
  std::string text(size_t(bytes), '\0');
  read_exact(file.get(), text.data(), text.size(), what_);
  const json::Value doc = json::parse(text, what_);
  text.clear();
  text.shrink_to_fit();
  if (!doc.is_object()) fail("is not a JSON object; pass a Hugging Face tokenizer.json");

  BpeTokenizer t;
  t.path_ = path;
  const json::Value* normalizer = doc.find("normalizer");
  if (normalizer && !normalizer->is_null())
    fail(
        "has a normalizer; byte-level BPE tokenizers (GPT-2, Llama 3) have none, and this "
        "encoder implements none");
  const json::Value& model = object_at(doc, "model", "model");
  read_model_options(model);
  read_pre_tokenizer(doc, t);
  t.ignore_merges_ = bool_or(model, "ignore_merges", "model.ignore_merges", false);
  read_added_tokens(doc, t);
  read_vocab(model, t);
  read_merges(model, t);
  if (const json::Value* post = doc.find("post_processor"))
    read_template(*post, "post_processor", t);
  t.cache_ = std::make_shared<BpeTokenizer::Cache>();
  return t;
}

BpeTokenizer BpeTokenizer::load(const std::string& tokenizer_json) {
  return BpeTokenizerLoader(tokenizer_json).load(tokenizer_json);
}

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

// The same order for long pieces (a sentence of CJK letters, a run of spaces): a heap of pairs by
// (rank, position) over a linked list of tokens; a pair whose tokens changed since it was pushed
// is skipped when it comes up.
void merge_by_heap(const MergeTable& merges, std::vector<int32_t>& ids) {
  const int32_t n = int32_t(ids.size());
  struct Node {
    int32_t id, prev, next;
  };
  struct Pair {
    int32_t rank, left, right, left_id, right_id, merged;
    bool operator>(const Pair& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::vector<Node> nodes(ids.size());
  for (int32_t i = 0; i < n; ++i)
    nodes[size_t(i)] = {ids[size_t(i)], i - 1, i + 1 < n ? i + 1 : -1};
  std::priority_queue<Pair, std::vector<Pair>, std::greater<Pair>> heap;
  const auto push = [&](int32_t left, int32_t right) {
    const int32_t a = nodes[size_t(left)].id, b = nodes[size_t(right)].id;
    const MergeTable::Merge m = merges.find(a, b);
    if (m.rank >= 0) heap.push({m.rank, left, right, a, b, m.merged});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i, i + 1);
  while (!heap.empty()) {
    const Pair p = heap.top();
    heap.pop();
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
  ids.clear();
  for (int32_t i = 0; i >= 0; i = nodes[size_t(i)].next) ids.push_back(nodes[size_t(i)].id);
}

}  // namespace

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out,
                                Cache* cache) const {
  const uint64_t h = PieceTable::hash(piece);
  if (ignore_merges_) {  // Llama 3's rule: a pre-token in the vocabulary is that token
    const PieceTable::Ids word = vocab_.find(piece, h);
    if (word.size > 0) {
      out.push_back(word.data[0]);
      return;
    }
  }
  if (cache && piece.size() <= Cache::kMaxPieceBytes) {
    const PieceTable::Ids hit = cache->table.find(piece, h);
    if (hit.size > 0) {
      out.insert(out.end(), hit.data, hit.data + hit.size);
      return;
    }
  }
  const size_t start = out.size();
  for (size_t i = 0; i < piece.size(); ++i) {
    const uint8_t b = static_cast<uint8_t>(piece[i]);
    if (byte_ids_[b] < 0) {
      out.resize(start);
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      throw InputError("tokenizer " + path_ + ": model.vocab has no token for the byte " + hex +
                       " (" + byte_alphabet::key_of(std::string(1, char(b))) +
                       "), which the text holds; a byte-level vocabulary has all 256");
    }
    out.push_back(byte_ids_[b]);
  }
  // Merged in place at the end of `out`.
  if (piece.size() <= kScanMax) {
    out.resize(start + merge_by_scan(merges_, out.data() + start, piece.size()));
  } else {
    std::vector<int32_t> ids(out.begin() + std::ptrdiff_t(start), out.end());
    merge_by_heap(merges_, ids);
    out.resize(start);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  if (cache && piece.size() > 1 && piece.size() <= Cache::kMaxPieceBytes) {
    if (cache->table.size() >= Cache::kMaxEntries) cache->table.clear();
    cache->table.insert(piece, h, out.data() + start, out.size() - start);
  }
}

void BpeTokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out, Cache* cache,
                                bool first) const {
  std::string prefixed;
  if (first && add_prefix_space_ && !text.empty() && text[0] != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  for (size_t at = 0; at < text.size();) {
    const size_t end = pre_token_end(pre_tokenizer_, text, at);
    encode_piece(text.substr(at, end - at), out, cache);
    at = end;
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  std::unique_lock<std::mutex> lock(cache_->mutex, std::try_to_lock);
  encode_plain(text, out, lock.owns_lock() ? cache_.get() : nullptr);
  return out;
}

void BpeTokenizer::encode_segment(std::string_view text, bool first,
                                  std::vector<int32_t>& out) const {
  std::unique_lock<std::mutex> lock(cache_->mutex, std::try_to_lock);
  encode_plain(text, out, lock.owns_lock() ? cache_.get() : nullptr, first);
}

std::vector<int32_t> BpeTokenizer::encode_with_specials(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  std::unique_lock<std::mutex> lock(cache_->mutex, std::try_to_lock);
  Cache* cache = lock.owns_lock() ? cache_.get() : nullptr;
  size_t plain = 0;  // where the text not yet encoded starts
  for (size_t at = 0; at < text.size();) {
    const AddedToken* found = nullptr;
    if (added_starts_[static_cast<uint8_t>(text[at])]) {
      for (const AddedToken& a : added_) {  // longest first
        if (text.compare(at, a.content.size(), a.content) == 0) {
          found = &a;
          break;
        }
      }
    }
    if (!found) {
      ++at;
      continue;
    }
    encode_plain(text.substr(plain, at - plain), out, cache);
    out.push_back(found->id);
    at += found->content.size();
    plain = at;
  }
  encode_plain(text.substr(plain), out, cache);
  return out;
}

std::string BpeTokenizer::token_bytes(int32_t id) const {
  require(id >= 0 && id < vocab_size() && known_[size_t(id)],
          "tokenizer " + path_ + ": no token has id " + std::to_string(id) +
              " (its vocabulary has " + std::to_string(vocab_size()) + " ids)");
  return pieces_[size_t(id)];
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (const int32_t id : ids) text += token_bytes(id);
  return text;
}

std::optional<int32_t> BpeTokenizer::token_id(std::string_view token) const {
  for (const AddedToken& a : added_) {
    if (a.content == token) return a.id;
  }
  return vocab_id(token);
}

}  // namespace mpf
