// Reads a tokenizer.json into a BpeTokenizer (bpe_tokenizer.hpp); every problem an InputError
// naming the file and the field.
#include <algorithm>

#include "core/error.hpp"
#include "io/input_file.hpp"
#include "io/json.hpp"
#include "text/bpe_tokenizer.hpp"
#include "text/byte_alphabet.hpp"
#include "text/json_reader.hpp"
#include "text/tokenizer_document.hpp"
#include "text/utf8.hpp"

namespace mpf {

// Token ids at or above this are refused (Llama 3 has 128,256; the largest BPE vocabularies a few
// hundred thousand).
constexpr int64_t kMaxTokenId = int64_t(1) << 22;

class BpeTokenizerLoader {
 public:
  explicit BpeTokenizerLoader(const std::string& path) : r_("tokenizer " + path) {}

  BpeTokenizer load(const std::string& path);

 private:
  static std::string quoted(std::string_view s) { return json::quote(s); }
  // `name()` makes the key's name for a message, only when there is one to give.
  template <class Name>
  int32_t id_of(const json::Value& v, Name&& name) const {
    int64_t id = -1;
    try {
      id = v.integer();
    } catch (const json::TypeError&) {
      r_.fail(name() + " is not an integer token id");
    }
    if (id < 0) r_.fail(name() + " is " + std::to_string(id) + ", not a token id");
    // The id table is as long as the largest id: a corrupt id in the billions would allocate
    // gigabytes before any check could name it.
    if (id >= kMaxTokenId)
      r_.fail(name() + " is " + std::to_string(id) + ", above " + std::to_string(kMaxTokenId - 1) +
              "; no BPE vocabulary is that large (the file is corrupt)");
    return int32_t(id);
  }
  // A vocabulary key in the model's terms: bytes for a byte-level model (a key outside the
  // alphabet, such as an added token listed in the vocabulary, stays as it is written).
  std::string model_key(const BpeTokenizer& t, const std::string& key) const {
    if (!t.byte_level_) return key;
    return byte_alphabet::bytes_of(key).value_or(key);
  }

  void read_model_options(const json::Value& model, BpeTokenizer& t) const;
  std::vector<AddedToken> read_added_tokens(const json::Value& doc) const;
  void read_vocab(const TokenizerDocument& d, const json::Value& model,
                  const std::vector<AddedToken>& added, BpeTokenizer& t) const;
  void read_merges(const TokenizerDocument& d, const json::Value& model, BpeTokenizer& t) const;
  void read_post_processor(const json::Value& processor, const std::string& name,
                           BpeTokenizer& t) const;
  void read_template(const json::Value& processor, const std::string& name, BpeTokenizer& t) const;

  JsonReader r_;
};

void BpeTokenizerLoader::read_model_options(const json::Value& model, BpeTokenizer& t) const {
  const std::string type = r_.string_or(model, "type", "model.type", "BPE");
  if (type != "BPE")
    r_.fail("model.type " + quoted(type) +
            " is not supported; only BPE models are (a Unigram, WordPiece or WordLevel model is "
            "not implemented)");
  const json::Value* dropout = model.find("dropout");
  if (dropout && !dropout->is_null() && !(dropout->is_number() && dropout->number() == 0))
    r_.fail("model.dropout is set (BPE-dropout is for training); set it to null");
  t.byte_fallback_ = r_.bool_or(model, "byte_fallback", "model.byte_fallback", false);
  t.fuse_unk_ = r_.bool_or(model, "fuse_unk", "model.fuse_unk", false);
  t.ignore_merges_ = r_.bool_or(model, "ignore_merges", "model.ignore_merges", false);
  t.unk_token_ = r_.string_or(model, "unk_token", "model.unk_token", "");
  for (const auto& [key, field] : {std::pair{"continuing_subword_prefix", &t.prefix_},
                                   std::pair{"end_of_word_suffix", &t.suffix_}}) {
    const std::string value = r_.string_or(model, key, std::string("model.") + key, "");
    if (t.byte_level_ && !value.empty() && !byte_alphabet::bytes_of(value))
      r_.fail(std::string("model.") + key + " " + quoted(value) +
              " is not written in GPT-2's byte alphabet, which this byte-level model's keys are");
    *field = model_key(t, value);
  }
}

std::vector<AddedToken> BpeTokenizerLoader::read_added_tokens(const json::Value& doc) const {
  std::vector<AddedToken> added;
  const json::Value* list = doc.find("added_tokens");
  if (!list || list->is_null()) return added;
  if (!list->is_array()) r_.fail("added_tokens is not an array");
  for (size_t i = 0; i < list->array().size(); ++i) {
    const json::Value& item = list->array()[i];
    const std::string name = "added_tokens[" + std::to_string(i) + "]";
    if (!item.is_object()) r_.fail(name + " is not an object");
    const json::Value* id = item.find("id");
    if (!id) r_.fail(name + " has no id");
    AddedToken a;
    a.content = r_.string_or(item, "content", name + ".content", "");
    if (a.content.empty()) r_.fail(name + " has no content");
    a.id = id_of(*id, [&] { return name + ".id"; });
    a.special = r_.bool_or(item, "special", name + ".special", false);
    a.normalized = r_.bool_or(item, "normalized", name + ".normalized", !a.special);
    a.lstrip = r_.bool_or(item, "lstrip", name + ".lstrip", false);
    a.rstrip = r_.bool_or(item, "rstrip", name + ".rstrip", false);
    a.single_word = r_.bool_or(item, "single_word", name + ".single_word", false);
    added.push_back(std::move(a));
  }
  return added;
}

void BpeTokenizerLoader::read_vocab(const TokenizerDocument& d, const json::Value& model,
                                    const std::vector<AddedToken>& added, BpeTokenizer& t) const {
  if (!d.has_vocab) {  // absent or not an object: object_at() says which
    r_.object_at(model, "vocab", "model.vocab");
    r_.fail("model.vocab is not an object");
  }
  int32_t top = -1;
  for (const auto& a : added) top = std::max(top, a.id);
  // A key given twice keeps its last id, as Python's json and Hugging Face's tokenizers (a serde
  // map) read it; the id it had first then names no token.
  const size_t count = d.vocab.size();
  const std::vector<char> repeated = d.repeated_vocab_keys();
  // The model keys one after another in `keys`, not a string each.
  struct Token {
    size_t at, size;
    int32_t id;
  };
  std::vector<Token> tokens;
  tokens.reserve(count);
  std::string keys;
  keys.reserve(d.text.size());
  t.vocab_.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const TokenizerDocument::VocabMember& m = d.vocab[i];
    if (repeated[i]) continue;
    const std::string_view key = d.at(m.key_at, m.key_size);
    const auto name = [key] { return "model.vocab[" + quoted(key) + "]"; };
    const int32_t id = m.other >= 0 ? id_of(d.others[size_t(m.other)], name)
                                    : id_of(json::Value::number_value(m.number), name);
    const size_t at = keys.size();
    if (!t.byte_level_ || !byte_alphabet::append_bytes(keys, key)) keys.append(key);
    tokens.push_back({at, keys.size() - at, id});
    top = std::max(top, id);
  }
  t.keys_.assign(size_t(top) + 1, std::string());
  t.known_.assign(size_t(top) + 1, 0);
  t.is_added_.assign(size_t(top) + 1, 0);
  for (const Token& token : tokens) {
    const std::string_view key = std::string_view(keys).substr(token.at, token.size);
    const int32_t id = token.id;
    if (t.known_[size_t(id)])
      r_.fail("model.vocab gives id " + std::to_string(id) +
              " to two tokens; each id names one token");
    t.known_[size_t(id)] = 1;
    const uint64_t h = PieceTable::hash(key);
    if (t.vocab_.find(key, h).size == 0) t.vocab_.insert(key, h, &id, 1);
    t.keys_[size_t(id)].assign(key);
  }
  // An added token's content is its text, whatever the vocabulary lists for its id.
  for (const auto& a : added) {
    t.known_[size_t(a.id)] = 1;
    t.is_added_[size_t(a.id)] = 1;
    t.keys_[size_t(a.id)] = a.content;
  }
  for (int b = 0; b < 256; ++b) {
    t.byte_ids_[b] = t.byte_level_ ? t.vocab_id(std::string(1, char(b))).value_or(-1) : -1;
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    t.fallback_ids_[b] = t.byte_fallback_ ? t.vocab_id(model_key(t, hex)).value_or(-1) : -1;
  }
  if (!t.unk_token_.empty()) t.unk_id_ = t.vocab_id(model_key(t, t.unk_token_)).value_or(-1);
  if (!t.byte_level_ && t.prefix_.empty() && t.suffix_.empty()) {
    t.char_ids_.assign(BpeTokenizer::kCharIds, -1);
    std::string key;
    for (char32_t cp = 0; cp < BpeTokenizer::kCharIds; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      key.clear();
      utf8::append(key, cp);
      t.char_ids_[cp] = t.vocab_id(key).value_or(-1);
    }
  }
}

void BpeTokenizerLoader::read_merges(const TokenizerDocument& d, const json::Value& model,
                                     BpeTokenizer& t) const {
  if (!d.has_merges)
    r_.fail(model.find("merges") ? "model.merges is not an array" : "has no model.merges");
  t.merges_.reserve(d.merges.size());
  std::string bytes[2], joined;
  for (size_t rank = 0; rank < d.merges.size(); ++rank) {
    const TokenizerDocument::MergeItem& m = d.merges[rank];
    const auto name = [rank] { return "model.merges[" + std::to_string(rank) + "]"; };
    using Form = TokenizerDocument::MergeItem::Form;
    if (m.form == Form::kOther)  // a value of another kind: a pair would have been read as one
      r_.fail(name() + " is neither \"a b\" nor [\"a\", \"b\"]");
    std::string_view left = d.at(m.left_at, m.left_size), right;
    if (m.form == Form::kString) {  // "a b"
      const std::string_view s = left;
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        r_.fail(name() + " " + quoted(s) + " is not two tokens separated by one space");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else {  // ["a", "b"]
      right = d.at(m.right_at, m.right_size);
    }
    int32_t ids[2];
    for (int k = 0; k < 2; ++k) {
      const std::string_view key = k == 0 ? left : right;
      // model_key() into a buffer reused from merge to merge.
      bytes[k].clear();
      if (!t.byte_level_ || !byte_alphabet::append_bytes(bytes[k], key)) bytes[k].assign(key);
      const std::optional<int32_t> id = t.vocab_id(bytes[k]);
      if (!id) r_.fail(name() + " names " + quoted(key) + ", which is not in model.vocab");
      ids[k] = *id;
    }
    // The right side loses its continuing_subword_prefix in the merged token.
    if (bytes[1].size() < t.prefix_.size())
      r_.fail(name() + "'s right token is shorter than model.continuing_subword_prefix");
    joined.assign(bytes[0]).append(bytes[1], t.prefix_.size());
    const std::optional<int32_t> merged = t.vocab_id(joined);
    if (!merged)
      r_.fail(name() + " merges " + quoted(left) + " and " + quoted(right) +
              " into a token that is not in model.vocab");
    t.merges_.add(ids[0], ids[1], {int32_t(rank), *merged});
  }
}

void BpeTokenizerLoader::read_template(const json::Value& processor, const std::string& name,
                                       BpeTokenizer& t) const {
  const json::Value* single = processor.find("single");
  const json::Value* specials = processor.find("special_tokens");
  if (!single || !single->is_array()) r_.fail(name + ".single is not an array");
  bool after = false;  // past the text ($A)
  for (const json::Value& item : single->array()) {
    const json::Value* special = item.find("SpecialToken");
    if (!special) {
      if (!item.find("Sequence"))
        r_.fail(name + ".single holds an item neither SpecialToken nor Sequence");
      after = true;
      continue;
    }
    const std::string token = r_.string_or(*special, "id", name + ".single SpecialToken.id", "");
    const json::Value* entry = specials ? specials->find(token) : nullptr;
    const json::Value* ids = entry ? entry->find("ids") : nullptr;
    if (!ids || !ids->is_array()) r_.fail(name + ".special_tokens has no ids for " + quoted(token));
    for (const json::Value& id : ids->array()) {
      const int32_t v =
          id_of(id, [&] { return name + ".special_tokens[" + quoted(token) + "].ids"; });
      if (v >= int32_t(t.keys_.size()) || !t.known_[size_t(v)])
        r_.fail(name + ".special_tokens[" + quoted(token) + "] names id " + std::to_string(v) +
                ", which no token has");
      (after ? t.template_suffix_ : t.template_prefix_).push_back(v);
    }
  }
}

void BpeTokenizerLoader::read_post_processor(const json::Value& processor, const std::string& name,
                                             BpeTokenizer& t) const {
  if (processor.is_null()) return;
  const std::string type = r_.type_of(processor, name);
  if (type == "Sequence") {
    const json::Value& list = r_.array_at(processor, "processors", name + ".processors");
    for (size_t i = 0; i < list.array().size(); ++i)
      read_post_processor(list.array()[i], name + ".processors[" + std::to_string(i) + "]", t);
  } else if (type == "TemplateProcessing") {
    read_template(processor, name, t);
  } else if (type != "ByteLevel") {  // ByteLevel's post-processing trims offsets only
    r_.unsupported(name, type);
  }
}

BpeTokenizer BpeTokenizerLoader::load(const std::string& path) {
  const std::string what = "tokenizer " + path;
  int64_t bytes = 0;
  File file = open_for_reading(path, what, "a Hugging Face tokenizer.json", bytes);
  std::string text(size_t(bytes), '\0');
  read_exact(file.get(), text.data(), text.size(), what);
  const TokenizerDocument d = TokenizerDocument::parse(text, what);
  text.clear();
  text.shrink_to_fit();
  const json::Value& doc = d.doc;
  if (!doc.is_object()) r_.fail("is not a JSON object; pass a Hugging Face tokenizer.json");

  BpeTokenizer t;
  t.path_ = path;
  const json::Value& model = r_.object_at(doc, "model", "model");
  t.normalizer_ = Normalizer::read(doc.find("normalizer"), r_);
  t.pre_ = PreTokenizerSteps::read(doc.find("pre_tokenizer"), r_);
  t.byte_level_ = t.pre_.byte_level();
  t.scanner_ = t.pre_.scanner();
  t.scanner_prefix_space_ = t.pre_.scanner_prefix_space();
  t.decoder_ = DecoderSteps::read(doc.find("decoder"), r_);
  read_model_options(model, t);
  const std::vector<AddedToken> added = read_added_tokens(doc);
  read_vocab(d, model, added, t);
  read_merges(d, model, t);
  for (const AddedToken& a : added) {
    // A normalized token is looked for as the normalizer writes it.
    const bool normalize = a.normalized && !t.normalizer_.empty();
    t.added_.add(a, normalize ? t.normalizer_.apply(a.content) : a.content);
  }
  if (const json::Value* post = doc.find("post_processor"))
    read_post_processor(*post, "post_processor", t);
  // Where a long text may be cut: the scanners' letter-to-non-letter places when nothing else
  // runs, else before a space that follows a letter when every step keeps that place.
  const bool plain = t.normalizer_.empty() && !t.added_.may_span_cut(false);
  bool letters_only = true;  // no matchable added token holds a letter before a non-letter
  for (const AddedToken& a : added) letters_only &= a.special;
  t.letter_cut_ = t.scanner_.has_value() && plain && letters_only;
  t.cuttable_ = t.letter_cut_ ||
                (t.pre_.cuttable() && t.normalizer_.cuttable() && !t.added_.may_span_cut(false));
  return t;
}

BpeTokenizer BpeTokenizer::load(const std::string& tokenizer_json) {
  BpeTokenizer t = BpeTokenizerLoader(tokenizer_json).load(tokenizer_json);
  t.cache_ = std::make_shared<BpeTokenizer::Cache>();
  return t;
}

}  // namespace mpf
