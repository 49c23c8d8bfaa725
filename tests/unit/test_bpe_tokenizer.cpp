// Byte-level BPE from tokenizer.json files written here, small enough to work out by hand: merges
// in both of tokenizer.json's forms, the merge order, Llama 3's whole-word rule, added tokens,
// decoding, the template's prefix, concurrent encodes, and every malformed file refused with one
// line naming it. tests/text/compare_tokenizer.py checks larger, trained tokenizers against an
// independent Python reference.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "data/document_encoder.hpp"
#include "io/json.hpp"
#include "test_helpers.hpp"
#include "text/bpe_tokenizer.hpp"
#include "text/byte_alphabet.hpp"

namespace mpf {

namespace {

using Ids = std::vector<int32_t>;
using ::testing::HasSubstr;

std::string key(const std::string& bytes) {
  return json::quote(byte_alphabet::key_of(bytes));
}

// The tokens past the 256 bytes (id = byte value), ids 256 on, and the merges that make them.
const std::vector<std::string> kExtra = {"ll", "he", "hell", "hello", " w", "or", " wor", "Hello"};
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"l", "l"}, {"h", "e"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}, {"o", "r"}, {" w", "or"}};
constexpr int32_t kLl = 256, kHello = 259, kWor = 262, kWholeHello = 263, kEot = 300;

struct Doc {
  std::string model_type = "\"BPE\"";
  std::string vocab;   // default: the bytes and kExtra
  std::string merges;  // default: kMerges as "a b" strings
  bool pair_merges = false;
  std::string model_extra;  // more model members, each with a leading comma
  std::string pre_tokenizer =
      R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})";
  std::string normalizer = "null";
  std::string added = R"([{"id":300,"content":"<|endoftext|>","special":true}])";
  std::string post_processor = "null";

  std::string text() const {
    std::string v = vocab, m = merges;
    if (v.empty()) {
      v = "{";
      for (int b = 0; b < 256; ++b)
        v += (b ? "," : "") + key(std::string(1, char(b))) + ":" + std::to_string(b);
      for (size_t i = 0; i < kExtra.size(); ++i)
        v += "," + key(kExtra[i]) + ":" + std::to_string(256 + i);
      v += "}";
    }
    if (m.empty()) {
      m = "[";
      for (size_t i = 0; i < kMerges.size(); ++i) {
        const auto& [a, b] = kMerges[i];
        m += (i ? "," : "");
        m += pair_merges ? "[" + key(a) + "," + key(b) + "]"
                         : json::quote(byte_alphabet::key_of(a) + " " + byte_alphabet::key_of(b));
      }
      m += "]";
    }
    return R"({"version":"1.0","added_tokens":)" + added + R"(,"normalizer":)" + normalizer +
           R"(,"pre_tokenizer":)" + pre_tokenizer + R"(,"post_processor":)" + post_processor +
           R"(,"model":{"type":)" + model_type + R"(,"vocab":)" + v + R"(,"merges":)" + m +
           model_extra + "}}";
  }
};

std::string llama3_pre_tokenizer() {
  return R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":)" +
         json::quote(split_pattern(PreTokenizer::kLlama3)) +
         R"(},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,)"
         R"("trim_offsets":true,"use_regex":false}]})";
}

class BpeTokenizerTest : public test::ScratchDirTest {
 protected:
  BpeTokenizer load(const Doc& doc, const std::string& name = "tokenizer.json") {
    test::write_file(path(name), doc.text());
    return BpeTokenizer::load(path(name));
  }
  // The InputError loading `doc` gives; it must name the file and be one line.
  std::string refused(const Doc& doc) {
    test::write_file(path("bad.json"), doc.text());
    const std::string message = test::input_error([&] { BpeTokenizer::load(path("bad.json")); });
    EXPECT_NE(message.find(path("bad.json")), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    return message;
  }
};

}  // namespace

TEST_F(BpeTokenizerTest, MergesLowestRankFirst) {
  const BpeTokenizer t = load(Doc{});
  EXPECT_EQ(t.pre_tokenizer(), PreTokenizer::kGpt2);
  EXPECT_EQ(t.vocab_size(), kEot + 1);
  // h e l l o: ll (rank 0), then he, then he+ll, then hell+o.
  EXPECT_EQ(t.encode("hello"), Ids{kHello});
  // Two equal pairs: the leftmost merges first.
  EXPECT_EQ(t.encode("lll"), (Ids{kLl, 'l'}));
  EXPECT_EQ(t.encode("hello world"), (Ids{kHello, kWor, 'l', 'd'}));
  // Without the whole-word rule "Hello" is built by merges only: H e ll o.
  EXPECT_EQ(t.encode("Hello"), (Ids{'H', 'e', kLl, 'o'}));
  // Each pre-token on its own: " " then " hello", whose space no merge takes.
  EXPECT_EQ(t.encode("  hello"), (Ids{' ', ' ', kHello}));
  EXPECT_EQ(t.decode(t.encode("  hello")), "  hello");
}

// A vocabulary key given twice keeps its last id, as Hugging Face's tokenizers (a serde map) and
// Python's json read it; the id it had first then names no token.
TEST_F(BpeTokenizerTest, ADuplicateVocabularyKeyKeepsItsLastId) {
  Doc doc;
  doc.vocab = "{";
  for (int b = 0; b < 256; ++b)
    doc.vocab += (b ? "," : "") + key(std::string(1, char(b))) + ":" + std::to_string(b);
  for (size_t i = 0; i < kExtra.size(); ++i)
    doc.vocab += "," + key(kExtra[i]) + ":" + std::to_string(256 + i);
  doc.vocab += "," + key("hello") + ":299}";  // hello again, past its first id (259)
  const BpeTokenizer t = load(doc);
  EXPECT_EQ(t.encode("hello"), Ids{299});
  EXPECT_THAT(test::input_error([&] { t.decode(Ids{kHello}); }), HasSubstr("259"));
}

// model.vocab and model.merges are read from the text without a json::Value each: they still
// read as any JSON does (escapes, a member given twice keeps its last value) and give the same
// errors.
TEST_F(BpeTokenizerTest, TheVocabularyAndMergesReadAsAnyJson) {
  const auto has = [](const std::string& message, const std::string& part) {
    EXPECT_NE(message.find(part), std::string::npos) << message;
  };
  // Escaped keys, and merges written both ways in one list.
  std::string text = Doc{}.text();
  text.replace(text.find("\"h\":104"), 7, R"("\u0068":104)");
  text.replace(text.find("\"l l\""), 5, R"(["\u006c", "l"])");
  test::write_file(path("escaped.json"), text);
  EXPECT_EQ(BpeTokenizer::load(path("escaped.json")).encode("hello"), Ids{kHello});
  // The whole model given twice: the last is read.
  text = Doc{}.text();
  test::write_file(path("twice.json"),
                   "{\"model\":{\"vocab\":{},\"merges\":[1]}," + text.substr(1));
  EXPECT_EQ(BpeTokenizer::load(path("twice.json")).encode("hello"), Ids{kHello});
  test::write_file(path("bad.json"), text.substr(0, text.size() - 1) + ",\"model\":null}");
  has(test::input_error([&] { BpeTokenizer::load(path("bad.json")); }), "has no model");
  // A member of the model given twice: the last, whatever its kind.
  Doc d;
  d.model_extra = R"(,"vocab":[])";
  has(refused(d), "model.vocab is an array, not an object");
  d.model_extra = R"(,"merges":{})";
  has(refused(d), "model.merges is not an array");
  d.model_extra = R"(,"merges":["h e x"])";
  has(refused(d), "model.merges[0] \"h e x\" is not two tokens");
  d.model_extra = R"(,"vocab":null,"vocab":{"h":0,"e":1,"he":2},"merges":null,"merges":["h e"])";
  EXPECT_EQ(load(d).encode("he"), Ids{2});
  // Values of other kinds where ids and merges belong.
  d = Doc{};
  d.vocab = R"({"h":0,"e":"1"})";
  has(refused(d), "model.vocab[\"e\"] is not an integer token id");
  d.vocab = R"({"h":0,"e":1.5})";
  has(refused(d), "model.vocab[\"e\"] is not an integer token id");
  d.vocab = R"({"h":0,"e":1,"he":2})";
  for (const char* merges : {R"(["h e",["h","e","x"]])", R"(["h e",["h",1]])", R"(["h e",1])",
                             R"(["h e",["h"]])", R"(["h e",[]])", R"(["h e",{"h":"e"}])"}) {
    d.merges = merges;
    has(refused(d), "model.merges[1] is neither \"a b\" nor [\"a\", \"b\"]");
  }
  // A syntax error inside them is json::parse()'s, at the same line and column.
  for (const char* vocab : {"{\"h\":0,\n\"e\":}", "{\"h\":0 \"e\":1}", "{\"h\":-}", "{\"h\":0,}",
                            "{\"h\\x\":0}", "{\"h\":0", "{\"h\":[1,}"}) {
    d = Doc{};
    d.vocab = vocab;
    const std::string want =
        test::input_error([&] { json::parse(d.text(), "tokenizer " + path("bad.json")); });
    EXPECT_EQ(refused(d), want);
  }
  for (const char* merges :
       {R"(["h e",["h" "e"]])", R"(["h e",["h",]])", R"(["h e" ["h"]])", R"(["h e",["h","e",]])",
        R"(["h e",["h","e"})", "[\"h e\",\n\"h\te\"]"}) {
    d = Doc{};
    d.merges = merges;
    const std::string want =
        test::input_error([&] { json::parse(d.text(), "tokenizer " + path("bad.json")); });
    EXPECT_EQ(refused(d), want);
  }
}

TEST_F(BpeTokenizerTest, MergesAsPairsEncodeAsStrings) {
  Doc pairs;
  pairs.pair_merges = true;
  const BpeTokenizer a = load(Doc{}, "strings.json"), b = load(pairs, "pairs.json");
  for (const std::string text : {"hello world", "lll", "Hello, hello!", "ll ll he or"})
    EXPECT_EQ(a.encode(text), b.encode(text)) << text;
}

TEST_F(BpeTokenizerTest, WholeWordRuleOfLlama3) {
  Doc doc;
  doc.pre_tokenizer = llama3_pre_tokenizer();
  doc.model_extra = R"(,"ignore_merges":true)";
  const BpeTokenizer t = load(doc);
  EXPECT_EQ(t.pre_tokenizer(), PreTokenizer::kLlama3);
  // "Hello" is in the vocabulary, though no merge builds it: one token.
  EXPECT_EQ(t.encode("Hello"), Ids{kWholeHello});
  EXPECT_EQ(t.encode("Hello world"), (Ids{kWholeHello, kWor, 'l', 'd'}));
  // Not in it: merges as before.
  EXPECT_EQ(t.encode("Helloo"), (Ids{'H', 'e', kLl, 'o', 'o'}));
}

TEST_F(BpeTokenizerTest, AddedTokensOnlyWhenAskedFor) {
  Doc doc;
  doc.added = R"([{"id":300,"content":"<|endoftext|>","special":true},)"
              R"({"id":301,"content":"<|end|>","special":true}])";
  const BpeTokenizer t = load(doc);
  EXPECT_EQ(t.vocab_size(), 302);
  EXPECT_EQ(t.token_id("<|endoftext|>"), kEot);
  EXPECT_EQ(t.token_id("<|end|>"), 301);
  EXPECT_EQ(t.token_id("hello"), kHello);
  EXPECT_EQ(t.token_id("nope"), std::nullopt);
  const std::string text = "hello<|endoftext|><|end|>";
  EXPECT_EQ(t.encode_with_specials(text), (Ids{kHello, kEot, 301}));
  const Ids plain = t.encode(text);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), kEot), 0);
  EXPECT_EQ(t.decode(plain), text);
  EXPECT_EQ(t.decode(t.encode_with_specials(text)), text);
  // The longest added token at the leftmost place.
  EXPECT_EQ(t.encode_with_specials("<|end|>|>"), (Ids{301, '|', '>'}));
}

TEST_F(BpeTokenizerTest, DecodesBytesAndRefusesUnknownIds) {
  const BpeTokenizer t = load(Doc{});
  EXPECT_EQ(t.token_bytes(kWor), " wor");
  EXPECT_EQ(t.token_bytes('\n'), "\n");
  EXPECT_EQ(t.token_bytes(kEot), "<|endoftext|>");
  // A character split between tokens: the bytes, as they are.
  EXPECT_EQ(t.decode({0xE2, 0x82}), "\xE2\x82");
  const std::string text = "\xE2\x82\xAC 5 \xF0\x9F\x98\x80 \xFF\xFE bytes";
  EXPECT_EQ(t.decode(t.encode(text)), text);
  for (const int32_t bad : {-1, 270, kEot + 1}) {
    const std::string m = test::input_error([&] { t.decode({bad}); });
    EXPECT_NE(m.find("no token has id " + std::to_string(bad)), std::string::npos) << m;
  }
}

TEST_F(BpeTokenizerTest, TemplatePrefix) {
  Doc doc;
  doc.post_processor =
      R"({"type":"Sequence","processors":[{"type":"ByteLevel"},{"type":"TemplateProcessing",)"
      R"("single":[{"SpecialToken":{"id":"<|endoftext|>","type_id":0}},)"
      R"({"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"<|endoftext|>","type_id":0}}],)"
      R"("special_tokens":{"<|endoftext|>":{"id":"<|endoftext|>","ids":[300]}}}]})";
  EXPECT_EQ(load(doc).template_prefix(), Ids{kEot});  // the one before the text only
  EXPECT_EQ(load(Doc{}, "plain.json").template_prefix(), Ids{});
}

TEST_F(BpeTokenizerTest, ConcurrentEncodesAgree) {
  const BpeTokenizer t = load(Doc{});
  std::string text;
  for (int i = 0; i < 200; ++i) text += "hello world, Hello lll " + std::to_string(i) + "\n";
  const Ids want = t.encode(text);
  std::vector<Ids> got(4);
  std::vector<std::thread> threads;
  for (size_t k = 0; k < got.size(); ++k) {
    threads.emplace_back([&, k] {
      for (int r = 0; r < 20; ++r) got[k] = t.encode(text);
    });
  }
  for (auto& th : threads) th.join();
  for (const Ids& g : got) EXPECT_EQ(g, want);
}

TEST_F(BpeTokenizerTest, AByteTheVocabularyLacksIsDroppedReplacedOrRefused) {
  Doc doc;
  doc.vocab = "{" + key("h") + ":0," + key("e") + ":1," + key("he") + ":2}";
  doc.merges = "[\"h e\"]";
  const BpeTokenizer t = load(doc);
  BpeTokenizer::take_unknown_tally();
  EXPECT_EQ(t.encode("hehe"), (Ids{2, 2}));
  EXPECT_EQ(BpeTokenizer::take_unknown_tally().dropped, 0);
  // As Hugging Face's BPE: a symbol not in the vocabulary, with no unk_token, is left out before
  // the merges (h x e merges to "he"), counted each time (the piece is not cached).
  for (int i = 0; i < 2; ++i) EXPECT_EQ(t.encode("hxe"), (Ids{2}));
  UnknownTally tally = BpeTokenizer::take_unknown_tally();
  EXPECT_EQ(tally.dropped, 2);
  EXPECT_EQ(tally.replaced, 0);
  const std::string m =
      test::input_error([&] { t.with_unknown(UnknownSymbols::kError).encode("hex"); });
  EXPECT_THAT(m, HasSubstr("no token for the byte 0x78, which the text holds"));
  EXPECT_THAT(m, HasSubstr("--unknown-bytes drop"));
  // Replaced: by U+FFFD's bytes where the vocabulary has them, else left out all the same.
  EXPECT_EQ(t.with_unknown(UnknownSymbols::kReplace).encode("hex"), (Ids{2}));
  EXPECT_EQ(BpeTokenizer::take_unknown_tally().dropped, 1);
  doc.vocab = "{" + key("h") + ":0," + key("e") + ":1," + key("he") + ":2," + key("\xEF") + ":3," +
              key("\xBF") + ":4," + key("\xBD") + ":5}";
  EXPECT_EQ(load(doc, "fffd.json").with_unknown(UnknownSymbols::kReplace).encode("hex"),
            (Ids{2, 3, 4, 5}));
  tally = BpeTokenizer::take_unknown_tally();
  EXPECT_EQ(tally.replaced, 1);
  EXPECT_EQ(tally.dropped, 0);
  // A model with an unk_token gives it (Hugging Face's way), counted as a replacement.
  doc.model_extra = R"(,"unk_token":"he")";
  EXPECT_EQ(load(doc, "unk.json").encode("hx"), (Ids{0, 2}));
  EXPECT_EQ(BpeTokenizer::take_unknown_tally().replaced, 1);
}

TEST_F(BpeTokenizerTest, RefusesWhatItCannotEncode) {
  const auto has = [](const std::string& message, const std::string& part) {
    EXPECT_NE(message.find(part), std::string::npos) << message;
  };
  EXPECT_NE(test::input_error([&] { BpeTokenizer::load(path("absent.json")); }).find("cannot open"),
            std::string::npos);
  test::write_file(path("broken.json"), "{\"model\": [1, 2");
  EXPECT_NE(
      test::input_error([&] { BpeTokenizer::load(path("broken.json")); }).find("invalid JSON"),
      std::string::npos);
  Doc d;
  d.model_type = "\"Unigram\"";
  has(refused(d), "model.type \"Unigram\" is not supported");
  d = Doc{};
  d.vocab = "[]";
  has(refused(d), "model.vocab is an array, not an object");
  d = Doc{};
  d.merges = "{}";
  has(refused(d), "model.merges is not an array");
  d = Doc{};
  d.merges = R"(["h q"])";
  has(refused(d), "merges \"h\" and \"q\" into a token that is not in model.vocab");
  d.vocab = "{" + key("h") + ":0," + key("e") + ":1}";
  d.merges = R"(["h x"])";
  has(refused(d), "model.merges[0] names \"x\", which is not in model.vocab");
  d.merges = R"(["h e"])";
  has(refused(d), "into a token that is not in model.vocab");
  d.merges = R"(["h e x"])";
  has(refused(d), "not two tokens");
  // A component not implemented is refused by name.
  d = Doc{};
  d.normalizer = R"({"type":"Sequence","normalizers":[{"type":"NFC"},{"type":"BertNormalizer"}]})";
  has(refused(d), "normalizer.normalizers[1] \"BertNormalizer\" is not supported");
  d = Doc{};
  d.normalizer = R"({"type":"Precompiled","precompiled_charsmap":""})";
  has(refused(d), "normalizer \"Precompiled\" is not supported");
  d = Doc{};
  d.pre_tokenizer = R"({"type":"UnicodeScripts"})";
  has(refused(d), "pre_tokenizer \"UnicodeScripts\" is not supported");
  d.pre_tokenizer = R"({"type":"Sequence","pretokenizers":[{"type":"BertPreTokenizer"}]})";
  has(refused(d), "pre_tokenizer.pretokenizers[0] \"BertPreTokenizer\" is not supported");
  d.pre_tokenizer = llama3_pre_tokenizer();
  const std::string pattern = json::quote(split_pattern(PreTokenizer::kLlama3));
  d.pre_tokenizer.replace(d.pre_tokenizer.find(pattern), pattern.size(), R"("(unclosed")");
  has(refused(d), "does not compile");
  d = Doc{};
  d.model_type = "\"WordPiece\"";
  has(refused(d), "model.type \"WordPiece\" is not supported");
  d = Doc{};
  d.post_processor = R"({"type":"BertProcessing","sep":["[SEP]",1],"cls":["[CLS]",0]})";
  has(refused(d), "post_processor \"BertProcessing\" is not supported");
  d = Doc{};
  d.model_extra = R"(,"dropout":0.1)";
  has(refused(d), "model.dropout is set");
  d = Doc{};
  d.added = R"([{"id":-3,"content":"<x>"}])";
  has(refused(d), "added_tokens[0].id");
  // An id in the billions is refused before the id table is sized by it.
  d.added = R"([{"id":2000000000,"content":"<x>"}])";
  has(refused(d), "added_tokens[0].id is 2000000000, above");
  d = Doc{};
  d.vocab = "{" + key("h") + ":2147483646}";
  d.merges = "[]";
  has(refused(d), "is 2147483646, above");
}

// mpiformer-tokenize reads a large document in chunks and encodes it in segments cut where the
// pre-tokenizer allows: the tokens are those of the whole text (its ill-formed bytes read as
// U+FFFD), for either pattern, with a prefix space or without, whatever the chunk sizes.
TEST_F(BpeTokenizerTest, ADocumentInChunksEncodesAsTheWholeText) {
  const std::vector<std::string> words = {"hello", " world",       " wor", "ld",     "Hello",
                                          "lll",   "  ",           "\n",   "'ll",    "42",
                                          "!",     "\xE4\xB8\xAD", "\xFF", " \n\n ", "he"};
  std::mt19937 rng(3);
  for (int variant = 0; variant < 3; ++variant) {
    Doc doc;
    if (variant == 1) doc.pre_tokenizer = llama3_pre_tokenizer();
    if (variant == 2) {
      doc.pre_tokenizer =
          R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true})";
    }
    const std::string file = path("t" + std::to_string(variant) + ".json");
    test::write_file(file, doc.text());
    const BpeTokenizer t = BpeTokenizer::load(file);
    const DocumentEncoder e = load_document_encoder(file, "<|endoftext|>");
    for (int trial = 0; trial < 200; ++trial) {
      std::string text;
      const int n = int(rng() % 300);
      for (int i = 0; i < n; ++i) text += words[rng() % words.size()];
      Ids streamed;
      DocumentStream stream(e, streamed);
      for (size_t at = 0; at < text.size();) {
        const size_t take = std::min(text.size() - at, size_t(1 + rng() % 9));
        stream.add(std::string_view(text).substr(at, take));
        at += take;
      }
      stream.finish();
      // The stream reads the ill-formed byte as U+FFFD (a lossy decode), wherever the chunks
      // cut the characters around it; nothing else changes.
      std::string decoded;
      for (const char c : text)
        decoded += c == '\xFF' ? std::string("\xEF\xBF\xBD") : std::string(1, c);
      ASSERT_EQ(streamed, t.encode(decoded)) << "variant " << variant << ": " << text;
      ASSERT_EQ(stream.repairs().invalid_utf8,
                int64_t(std::count(text.begin(), text.end(), '\xFF')));
    }
  }
}

// Text with no place to cut is refused once more than DocumentStream::kMaxHeldBytes of it is
// held, not encoded whole (at some 20 times its size in memory).
TEST_F(BpeTokenizerTest, ADocumentThatCannotBeCutIsRefusedPastItsBound) {
  test::write_file(path("t.json"), Doc{}.text());
  const DocumentEncoder e = load_document_encoder(path("t.json"), "<|endoftext|>");
  Ids out;
  DocumentStream stream(e, out);
  const std::string digits(1 << 20, '7');
  std::string message;
  size_t added = 0;
  try {
    for (; added <= DocumentStream::kMaxHeldBytes; added += digits.size()) stream.add(digits);
  } catch (const InputError& error) {
    message = error.what();
  }
  EXPECT_THAT(message, HasSubstr("MiB of text with no place to cut it"));
  EXPECT_EQ(added, DocumentStream::kMaxHeldBytes) << "refused as soon as the bound was passed";
  EXPECT_TRUE(out.empty());
}

}  // namespace mpf
