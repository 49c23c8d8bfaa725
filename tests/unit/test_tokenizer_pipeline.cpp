// Hugging Face's tokenizer pipeline piece by piece, on tokenizer.json files small enough to work
// out by hand: each normalizer, each pre-tokenizer and Split behaviour, the BPE model's options
// (byte fallback, unk and fuse_unk, the subword prefix and word suffix), the added tokens' flags,
// the decoders, the template, and a decoder not implemented refused by name.
// tests/text/compare_pipelines.py checks trained files of the families' shapes against an
// independent Python reference.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.hpp"
#include "test_helpers.hpp"
#include "text/bpe_tokenizer.hpp"
#include "text/normalizer.hpp"
#include "text/unicode_text.hpp"

namespace mpf {

namespace {

using Ids = std::vector<int32_t>;
const std::string kSp = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// A character-level vocabulary: each key's id is its place in `keys`.
std::string vocab_of(const std::vector<std::string>& keys) {
  std::string v = "{";
  for (size_t i = 0; i < keys.size(); ++i)
    v += (i ? "," : "") + json::quote(keys[i]) + ":" + std::to_string(i);
  return v + "}";
}

class TokenizerPipelineTest : public test::ScratchDirTest {
 protected:
  BpeTokenizer load(const std::string& normalizer, const std::string& pre_tokenizer,
                    const std::vector<std::string>& keys, const std::string& merges,
                    const std::string& model_extra = "", const std::string& added = "[]",
                    const std::string& decoder = "null", const std::string& post = "null") {
    const std::string text = R"({"version":"1.0","added_tokens":)" + added + R"(,"normalizer":)" +
                             normalizer + R"(,"pre_tokenizer":)" + pre_tokenizer +
                             R"(,"post_processor":)" + post + R"(,"decoder":)" + decoder +
                             R"(,"model":{"type":"BPE","vocab":)" + vocab_of(keys) +
                             R"(,"merges":)" + merges + model_extra + "}}";
    test::write_file(path("t.json"), text);
    return BpeTokenizer::load(path("t.json"));
  }
  // Pre-tokens of `text` under `pre_tokenizer` (a character-level model).
  std::vector<std::string> pieces(const std::string& pre_tokenizer, const std::string& text,
                                  const std::string& normalizer = "null") {
    return load(normalizer, pre_tokenizer, {"a"}, "[]").pre_tokens(text);
  }
};

using Pieces = std::vector<std::string>;

std::string split(const std::string& pattern, const std::string& behavior, bool invert = false) {
  return R"({"type":"Split","pattern":{"String":)" + json::quote(pattern) + R"(},"behavior":")" +
         behavior + R"(","invert":)" + (invert ? "true" : "false") + "}";
}

}  // namespace

TEST(UnicodeText, NormalizationFormsAndLowercase) {
  const std::string e_acute = "e\xCC\x81", precomposed = "\xC3\xA9";  // e + U+0301, U+00E9
  EXPECT_EQ(unicode::normalize(e_acute, unicode::Form::kNFC), precomposed);
  EXPECT_EQ(unicode::normalize(precomposed, unicode::Form::kNFD), e_acute);
  EXPECT_EQ(unicode::normalize("\xEF\xAC\x81", unicode::Form::kNFKC), "fi");  // U+FB01
  EXPECT_EQ(unicode::normalize("\xEF\xAC\x81", unicode::Form::kNFC), "\xEF\xAC\x81");
  EXPECT_EQ(unicode::normalize("\xE2\x91\xA0", unicode::Form::kNFKD), "1");  // U+2460
  // U+0130 lowercases to two characters; a final sigma stays σ (no context).
  EXPECT_EQ(unicode::lowercase("\xC4\xB0Z\xCE\xA3"), "i\xCC\x87z\xCF\x83");
}

TEST_F(TokenizerPipelineTest, Normalizers) {
  const auto normalized = [&](const std::string& normalizer, const std::string& text) {
    const json::Value doc = json::parse(R"({"normalizer":)" + normalizer + "}", "test");
    return Normalizer::read(doc.find("normalizer"), JsonReader("test")).apply(text);
  };
  EXPECT_EQ(normalized(R"({"type":"Sequence","normalizers":[]})", " A b "), " A b ");
  EXPECT_EQ(normalized(R"({"type":"Lowercase"})", "HeLLo"), "hello");
  EXPECT_EQ(normalized(R"({"type":"Strip","strip_left":true,"strip_right":false})", " \t a \n"),
            "a \n");
  EXPECT_EQ(normalized(R"({"type":"Strip","strip_left":true,"strip_right":true})",
                       "\xE3\x80\x80 a\xC2\xA0"),
            "a");
  EXPECT_EQ(normalized(R"({"type":"Sequence","normalizers":[{"type":"NFD"},)"
                       R"({"type":"StripAccents"}]})",
                       "caf\xC3\xA9"),
            "cafe");
  EXPECT_EQ(normalized(R"({"type":"Prepend","prepend":"_"})", "ab"), "_ab");
  EXPECT_EQ(normalized(R"({"type":"Prepend","prepend":"_"})", ""), "");
  EXPECT_EQ(normalized(R"({"type":"Replace","pattern":{"String":" "},"content":"_"})", "a b  c"),
            "a_b__c");
  EXPECT_EQ(normalized(R"({"type":"Replace","pattern":{"Regex":" +"},"content":" "})", "a  b   c"),
            "a b c");
}

TEST_F(TokenizerPipelineTest, SplitBehaviours) {
  // Hugging Face's documented example: "the-final--countdown" split on "-".
  const std::string text = "the-final--countdown";
  EXPECT_EQ(pieces(split("-", "Removed"), text), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(pieces(split("-", "Isolated"), text),
            (Pieces{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(pieces(split("-", "MergedWithPrevious"), text),
            (Pieces{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(pieces(split("-", "MergedWithNext"), text),
            (Pieces{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(pieces(split("-", "Contiguous"), text),
            (Pieces{"the", "-", "final", "--", "countdown"}));
  // Inverted: the pattern's matches are kept, what lies between is the delimiter.
  EXPECT_EQ(
      pieces(R"({"type":"Split","pattern":{"Regex":"\\w+"},"behavior":"Removed","invert":true})",
             "ab, cd!"),
      (Pieces{"ab", "cd"}));
}

TEST_F(TokenizerPipelineTest, PreTokenizers) {
  EXPECT_EQ(pieces(R"({"type":"Digits","individual_digits":true})", "a123b"),
            (Pieces{"a", "1", "2", "3", "b"}));
  EXPECT_EQ(pieces(R"({"type":"Digits","individual_digits":false})", "a123b"),
            (Pieces{"a", "123", "b"}));
  EXPECT_EQ(pieces(R"({"type":"Punctuation","behavior":"Isolated"})", "a,b!?"),
            (Pieces{"a", ",", "b", "!", "?"}));
  EXPECT_EQ(pieces(R"({"type":"Whitespace"})", "Hey  man!! x_1"),
            (Pieces{"Hey", "man", "!!", "x_1"}));
  EXPECT_EQ(pieces(R"({"type":"WhitespaceSplit"})", " Hey  man!!\t"), (Pieces{"Hey", "man!!"}));
  const std::string meta = R"({"type":"Metaspace","replacement":")" + kSp + R"(","split":true,)";
  EXPECT_EQ(pieces(meta + R"("prepend_scheme":"always"})", "Hey friend"),
            (Pieces{kSp + "Hey", kSp + "friend"}));
  EXPECT_EQ(pieces(meta + R"("prepend_scheme":"never"})", "Hey friend"),
            (Pieces{"Hey", kSp + "friend"}));
  // ByteLevel with add_prefix_space puts a space before each piece it is given.
  const std::string bytes = R"({"type":"Sequence","pretokenizers":[{"type":"WhitespaceSplit"},)"
                            R"({"type":"ByteLevel","add_prefix_space":true,"use_regex":false}]})";
  EXPECT_EQ(pieces(bytes, "ab cd"), (Pieces{" ab", " cd"}));
}

TEST_F(TokenizerPipelineTest, ByteFallbackUnknownAndFusedUnknown) {
  const std::vector<std::string> keys = {"<unk>", "<0xC3>", "<0xA9>", "a", "b", "ab"};
  const BpeTokenizer fallback =
      load("null", "null", keys, R"(["a b"])", R"(,"byte_fallback":true,"unk_token":"<unk>")");
  EXPECT_EQ(fallback.encode("ab\xC3\xA9"), (Ids{5, 1, 2}));
  // A character whose bytes lack <0xNN> tokens is the unknown token; fused when asked.
  EXPECT_EQ(fallback.encode("a\xC3\xB6\xC3\xB6"), (Ids{3, 0, 0}));
  const BpeTokenizer fused = load("null", "null", keys, R"(["a b"])",
                                  R"(,"byte_fallback":true,"unk_token":"<unk>","fuse_unk":true)");
  EXPECT_EQ(fused.encode("a\xC3\xB6\xC3\xB6"
                         "b"),
            (Ids{3, 0, 4}));
  // Neither: the character is dropped, as Hugging Face drops it.
  EXPECT_EQ(load("null", "null", keys, "[]").encode("a?b"), (Ids{3, 4}));
}

TEST_F(TokenizerPipelineTest, SubwordPrefixAndWordSuffix) {
  const std::vector<std::string> keys = {"a",    "##b", "##c</w>",   "c</w>",
                                         "a##b", "ab",  "ab##c</w>", "abc</w>"};
  // Merging "a" and "##b" makes "ab": the right side loses the prefix.
  const BpeTokenizer t =
      load("null", R"({"type":"WhitespaceSplit"})", keys, R"([["a","##b"],["ab","##c</w>"]])",
           R"(,"continuing_subword_prefix":"##","end_of_word_suffix":"</w>")");
  EXPECT_EQ(t.encode("abc c"), (Ids{7, 3}));
}

TEST_F(TokenizerPipelineTest, AddedTokenFlags) {
  const std::string added =
      R"([{"id":10,"content":"<w>","special":false,"single_word":true,"normalized":false},)"
      R"({"id":11,"content":"<l>","special":false,"lstrip":true,"rstrip":true,"normalized":false},)"
      R"({"id":12,"content":"<s>","special":true,"normalized":false},)"
      R"({"id":13,"content":"AB","special":false,"normalized":true}])";
  const BpeTokenizer t = load(R"({"type":"Lowercase"})", R"({"type":"WhitespaceSplit"})",
                              {"x", "<", "w", ">", "s", "l", "a", "b"}, "[]", "", added);
  EXPECT_EQ(t.encode("x <w> x<w>"), (Ids{0, 10, 0, 1, 2, 3}));  // single_word: alone only
  EXPECT_EQ(t.encode("x  <l>  x"), (Ids{0, 11, 0}));            // the spaces go with <l>
  EXPECT_EQ(t.encode("<s>x"), (Ids{1, 4, 3, 0}));               // special: text unless asked
  EXPECT_EQ(t.encode_with_specials("<s>x"), (Ids{12, 0}));
  EXPECT_EQ(t.encode("xAbx"), (Ids{0, 13, 0}));  // matched as the normalizer writes it: "ab"
}

TEST_F(TokenizerPipelineTest, DecodersAndTemplate) {
  const std::vector<std::string> keys = {"<s>",    "</s>",   "<0x41>",  "<0xE2>",
                                         "<0x82>", "<0xAC>", kSp + "a", "b"};
  const std::string sp_decoder =
      R"({"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":")" + kSp +
      R"("},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},)"
      R"({"type":"Strip","content":" ","start":1,"stop":0}]})";
  const std::string post =
      R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},)"
      R"({"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"</s>","type_id":0}}],)"
      R"("special_tokens":{"<s>":{"id":"<s>","ids":[0]},"</s>":{"id":"</s>","ids":[1]}}})";
  const BpeTokenizer t =
      load("null", "null", keys, "[]", R"(,"byte_fallback":true)", "[]", sp_decoder, post);
  EXPECT_EQ(t.decode({6, 7, 2, 3, 4, 5}), "abA\xE2\x82\xAC");  // the first space stripped
  EXPECT_EQ(t.decode({3, 7}),
            "\xEF\xBF\xBD"
            "b");                       // a lone byte: U+FFFD
  EXPECT_EQ(t.token_bytes(6), " a");    // inside a stream: its space
  EXPECT_EQ(t.token_bytes(3), "\xE2");  // a byte as itself
  EXPECT_EQ(t.template_prefix(), (Ids{0}));
  EXPECT_EQ(t.template_suffix(), (Ids{1}));
  const std::string meta = R"({"type":"Metaspace","replacement":")" + kSp +
                           R"(","prepend_scheme":"first","split":false})";
  const BpeTokenizer m = load("null", meta, keys, "[]", "", "[]", meta);
  EXPECT_EQ(m.decode({6, 6}), "a a");
  const std::string message = test::input_error(
      [&] { load("null", "null", keys, "[]", "", "[]", R"({"type":"WordPiece","prefix":"##"})"); });
  EXPECT_NE(message.find("decoder \"WordPiece\" is not supported"), std::string::npos) << message;
  // A Metaspace decoder without its character is refused (replacing "" would never end).
  const std::string empty = test::input_error([&] {
    load("null", "null", keys, "[]", "", "[]", R"({"type":"Metaspace","replacement":""})");
  });
  EXPECT_NE(empty.find("replacement must be one character"), std::string::npos) << empty;
}

}  // namespace mpf
