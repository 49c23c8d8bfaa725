// UTF-8 as the tokenizer reads it, the Unicode class tables, GPT-2's byte alphabet and the two
// pre-tokenizers on hand-picked edge cases, each expectation read off the split pattern
// (pre_tokenizer.hpp). tests/text/compare_tokenizer.py checks the same scanners against Python's
// regex module on thousands of strings.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "text/byte_alphabet.hpp"
#include "text/pre_tokenizer.hpp"
#include "text/regex.hpp"
#include "text/split_matchers.hpp"
#include "text/unicode_classes.hpp"
#include "text/unicode_text.hpp"
#include "text/utf8.hpp"

namespace mpf {

namespace {

using unicode::CharClass;

std::vector<std::string> pieces(PreTokenizer kind, const std::string& text) {
  std::vector<std::string> out;
  for (const std::string_view p : pre_tokenize(kind, text)) out.emplace_back(p);
  return out;
}

using Pieces = std::vector<std::string>;

}  // namespace

TEST(Utf8, DecodesWellFormedCharacters) {
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";  // a é € 😀
  EXPECT_EQ(utf8::decode(text, 0).cp, U'a');
  EXPECT_EQ(utf8::decode(text, 1).cp, U'\u00E9');
  EXPECT_EQ(utf8::decode(text, 1).length, 2);
  EXPECT_EQ(utf8::decode(text, 3).cp, U'\u20AC');
  EXPECT_EQ(utf8::decode(text, 3).length, 3);
  EXPECT_EQ(utf8::decode(text, 6).cp, U'\U0001F600');
  EXPECT_EQ(utf8::decode(text, 6).length, 4);
  std::string back;
  for (const char32_t cp : {U'a', U'\u00E9', U'\u20AC', U'\U0001F600'}) utf8::append(back, cp);
  EXPECT_EQ(back, text);
}

TEST(Utf8, IllFormedBytesAreOneByteEach) {
  for (const std::string bad : {"\x80", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80",
                                "\xE2\x82", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xFF"}) {
    const utf8::Char c = utf8::decode(bad, 0);
    EXPECT_EQ(c.cp, utf8::kInvalid) << bad;
    EXPECT_EQ(c.length, 1) << bad;
  }
}

TEST(UnicodeClasses, AreUnicode15) {
  // Hugging Face's tokenizers (Oniguruma) read Unicode 15: U+11F50 KAWI DIGIT ZERO is a number
  // there, unassigned in Unicode 14.
  EXPECT_EQ(std::string(unicode::version()).substr(0, 3), "15.");
  EXPECT_EQ(unicode::char_class(U'\U00011F50'), CharClass::kNumber);
  EXPECT_EQ(unicode::char_class(U'\U00011F04'), CharClass::kLetter);  // KAWI LETTER A
}

TEST(Utf8, IllFormedSubpartsAreWhatALossyDecoderReplaces) {
  // Python's bytes.decode("utf-8", "replace") gives one U+FFFD per subpart: E2 82 is one (a
  // truncated euro sign), C0 AF two, ED A0 80 (a surrogate) three, F4 90 80 80 four.
  const auto subparts = [](const std::string& bytes) {
    std::vector<size_t> lengths;
    for (size_t at = 0; at < bytes.size();) {
      const utf8::Subpart s = utf8::ill_formed_subpart(bytes, at);
      lengths.push_back(s.length);
      at += s.length;
    }
    return lengths;
  };
  using Lengths = std::vector<size_t>;
  EXPECT_EQ(subparts("\xE2\x82"), Lengths{2});
  EXPECT_EQ(subparts("\xC0\xAF"), (Lengths{1, 1}));
  EXPECT_EQ(subparts("\xED\xA0\x80"), (Lengths{1, 1, 1}));
  EXPECT_EQ(subparts("\xF4\x90\x80\x80"), (Lengths{1, 1, 1, 1}));
  EXPECT_EQ(subparts("\xF1\x80\x80"), Lengths{3});
  EXPECT_EQ(subparts("\xFF\xFE"), (Lengths{1, 1}));
  EXPECT_TRUE(utf8::ill_formed_subpart("\xF0\x9F\x98", 0).truncated);  // a text ends inside it
  // "\x61" is 'a' (written "\x9Fa", the escape would run on into 0x9FA).
  EXPECT_FALSE(utf8::ill_formed_subpart("\xF0\x9F\x61", 0).truncated);
  EXPECT_EQ(utf8::well_formed_prefix("ab\xC3\xA9\xE2\x82"), 4u);
}

TEST(UnicodeClasses, CharactersOfUnicode15_1And16_0) {
  // Debian's utf8proc has Unicode 15.0; Hugging Face's Oniguruma classifies the characters 15.1
  // and 16.0 added (unicode_text.cpp), and DeepSeek V3's splits turn on them.
  EXPECT_EQ(unicode::char_class(U'\U0002EBF0'), CharClass::kLetter);  // CJK Extension I, 15.1
  EXPECT_EQ(unicode::char_class(U'\U0002EE5D'), CharClass::kLetter);
  EXPECT_EQ(unicode::char_class(U'\U0002EE5E'), CharClass::kOther);   // unassigned
  EXPECT_EQ(unicode::char_class(U'\U00010D40'), CharClass::kNumber);  // GARAY DIGIT ZERO, 16.0
  EXPECT_EQ(unicode::char_class(U'\U00010D50'), CharClass::kLetter);  // GARAY CAPITAL LETTER A
  EXPECT_EQ(unicode::char_class(U'\U000116D0'), CharClass::kNumber);  // MYANMAR PAO DIGIT ZERO
  EXPECT_EQ(unicode::char_class(U'\U000105C0'), CharClass::kLetter);  // TODHRI LETTER A
  EXPECT_EQ(unicode::general_category(U'\U00010D69'), unicode::Category::kMn);
  EXPECT_EQ(unicode::general_category(U'\u2FFC'), unicode::Category::kSo);  // 15.1
  // Unicode 17.0's, which Hugging Face's tokenizers do not know yet, stay unassigned.
  EXPECT_EQ(unicode::char_class(U'\U000323B0'), CharClass::kOther);             // CJK Extension J
  EXPECT_EQ(unicode::general_category(U'\U00010940'), unicode::Category::kCn);  // Sidetic
  // A letter run takes them in: GPT-2's pattern keeps " \U0002EBF0x" one piece.
  EXPECT_EQ(pieces(PreTokenizer::kGpt2, "a \xF0\xAE\xAF\xB0x!"),
            (Pieces{"a", " \xF0\xAE\xAF\xB0x", "!"}));
  // DeepSeek V3's split takes " \U0002EBF0" as one piece of a space and letters; with the
  // character unassigned it would be the space alone.
  EXPECT_EQ(next_match(SplitMatcher::kDeepSeek, " \xF0\xAE\xAF\xB0", 0).end, 5u);
  // So does a Split pattern's \p{L} (Oniguruma's path).
  std::vector<std::pair<size_t, size_t>> found;
  Regex(R"(\p{L}+)").append_matches("a \xF0\xAE\xAF\xB0x", found);
  EXPECT_EQ(found, (std::vector<std::pair<size_t, size_t>>{{0, 1}, {2, 7}}));
  // 16.0's capital letters have their lowercase (a Lowercase normalizer).
  EXPECT_EQ(unicode::lowercase("\xF0\x90\xB5\x90"
                               "A\xEA\x9F\x8C"),
            "\xF0\x90\xB5\xB0"
            "a\xEA\x9F\x8D");  // GARAY A, A, LATIN S WITH DIAGONAL STROKE
  EXPECT_NE(std::string(unicode::data_version()).find("16.0"), std::string::npos);
}

TEST(UnicodeClasses, ClassesOfKnownCharacters) {
  for (const char32_t cp : {U'a', U'Z', U'\u00E9', U'\u0416', U'\u03A9', U'\u4E2D', U'\u0915',
                            U'\u01C5', U'\u02B0', U'\U00020000'}) {
    EXPECT_EQ(unicode::char_class(cp), CharClass::kLetter) << std::hex << uint32_t(cp);
  }
  for (const char32_t cp : {U'0', U'9', U'\u0663', U'\u00BD', U'\u00B2', U'\u216B', U'\U0001D7CE'})
    EXPECT_EQ(unicode::char_class(cp), CharClass::kNumber) << std::hex << uint32_t(cp);
  for (const char32_t cp : {U'\t', U'\n', U'\v', U'\f', U'\r', U' ', U'\u0085', U'\u00A0',
                            U'\u1680', U'\u2003', U'\u2028', U'\u2029', U'\u202F', U'\u3000'})
    EXPECT_EQ(unicode::char_class(cp), CharClass::kWhitespace) << std::hex << uint32_t(cp);
  // Python's str.isspace() takes the information separators; White_Space does not.
  for (const char32_t cp : {U'\x1C', U'\x1F', U'\u200B', U'!', U'\u0301', U'\u093E', U'\U0001F600',
                            U'\u00AD', char32_t(0x10FFFF), utf8::kInvalid})
    EXPECT_EQ(unicode::char_class(cp), CharClass::kOther) << std::hex << uint32_t(cp);
}

TEST(ByteAlphabet, EveryByteRoundTrips) {
  EXPECT_EQ(byte_alphabet::char_of(' '), U'\u0120');   // 'Ġ'
  EXPECT_EQ(byte_alphabet::char_of('\n'), U'\u010A');  // 'Ċ'
  EXPECT_EQ(byte_alphabet::char_of('a'), U'a');
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b);
  const std::string key = byte_alphabet::key_of(all);
  EXPECT_EQ(byte_alphabet::bytes_of(key), all);
  EXPECT_FALSE(byte_alphabet::bytes_of(" "));             // a space is written 'Ġ'
  EXPECT_FALSE(byte_alphabet::bytes_of("\xE4\xB8\xAD"));  // a CJK character is not in it
}

TEST(PreTokenizer, Gpt2EdgeCases) {
  const auto gpt2 = [](const std::string& t) { return pieces(PreTokenizer::kGpt2, t); };
  EXPECT_EQ(gpt2(""), Pieces{});
  EXPECT_EQ(gpt2("Hello world"), (Pieces{"Hello", " world"}));
  // \s+(?!\S): a run of spaces leaves its last one to the word after it.
  EXPECT_EQ(gpt2("  hello"), (Pieces{" ", " hello"}));
  EXPECT_EQ(gpt2("   hello"), (Pieces{"  ", " hello"}));
  EXPECT_EQ(gpt2("a\n\n b"), (Pieces{"a", "\n\n", " b"}));
  EXPECT_EQ(gpt2("a\nb"), (Pieces{"a", "\n", "b"}));
  EXPECT_EQ(gpt2("end  "), (Pieces{"end", "  "}));
  // Contractions are case-sensitive, and an apostrophe elsewhere is punctuation.
  EXPECT_EQ(gpt2("don't"), (Pieces{"don", "'t"}));
  EXPECT_EQ(gpt2("'S"), (Pieces{"'", "S"}));
  EXPECT_EQ(gpt2("we'll've"), (Pieces{"we", "'ll", "'ve"}));
  EXPECT_EQ(gpt2("?'s"), (Pieces{"?'", "s"}));
  // Digits in one run, letters and digits apart.
  EXPECT_EQ(gpt2("123456"), (Pieces{"123456"}));
  EXPECT_EQ(gpt2("x1y"), (Pieces{"x", "1", "y"}));
  EXPECT_EQ(gpt2(" 42!!"), (Pieces{" 42", "!!"}));
  EXPECT_EQ(gpt2("\xD0\x9F\xD1\x80\xD0\xB8 \xE4\xB8\xAD\xE6\x96\x87"),  // "При 中文"
            (Pieces{"\xD0\x9F\xD1\x80\xD0\xB8", " \xE4\xB8\xAD\xE6\x96\x87"}));
  // An ideographic space (U+3000) is whitespace, but only U+0020 joins the next word.
  EXPECT_EQ(gpt2("a\xE3\x80\x80"
                 "b"),
            (Pieces{"a", "\xE3\x80\x80", "b"}));
}

TEST(PreTokenizer, Llama3EdgeCases) {
  const auto llama = [](const std::string& t) { return pieces(PreTokenizer::kLlama3, t); };
  EXPECT_EQ(llama("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(llama("  hello"), (Pieces{" ", " hello"}));
  // \s*[\r\n]+ takes a run through its last newline.
  EXPECT_EQ(llama("a\n\n b"), (Pieces{"a", "\n\n", " b"}));
  EXPECT_EQ(llama("a \n \n  b"), (Pieces{"a", " \n \n", " ", " b"}));
  EXPECT_EQ(llama("x\r\n\r\ny"), (Pieces{"x", "\r\n\r\n", "y"}));
  // Contractions ignore case (U+017F folds to s).
  EXPECT_EQ(llama("'S"), (Pieces{"'S"}));
  EXPECT_EQ(llama("DON'T"), (Pieces{"DON", "'T"}));
  EXPECT_EQ(llama("'Re'VE'lL"), (Pieces{"'Re", "'VE", "'lL"}));
  EXPECT_EQ(llama("'\xC5\xBF"), (Pieces{"'\xC5\xBF"}));
  // Numbers in threes.
  EXPECT_EQ(llama("123456"), (Pieces{"123", "456"}));
  EXPECT_EQ(llama("1234567"), (Pieces{"123", "456", "7"}));
  EXPECT_EQ(llama("x1y"), (Pieces{"x", "1", "y"}));
  EXPECT_EQ(llama(" 12"), (Pieces{" ", "12"}));
  // One character that is no letter, number or newline leads a word.
  EXPECT_EQ(llama("!hello"), (Pieces{"!hello"}));
  EXPECT_EQ(llama("!!hello"), (Pieces{"!!", "hello"}));
  EXPECT_EQ(llama("\thello"), (Pieces{"\thello"}));
  EXPECT_EQ(llama("\nhello"), (Pieces{"\n", "hello"}));
  // Punctuation takes the newlines after it.
  EXPECT_EQ(llama("end.\n\nNext"), (Pieces{"end", ".\n\n", "Next"}));
  EXPECT_EQ(llama(" ...\r\n"), (Pieces{" ...\r\n"}));
}

TEST(PreTokenizer, PiecesTileAnyBytes) {
  // Ill-formed UTF-8 is punctuation-like ("other"): split, never dropped.
  for (const PreTokenizer kind : {PreTokenizer::kGpt2, PreTokenizer::kLlama3}) {
    const std::string text = "ab\xFF\xFE cd \x80 \xE2\x82 1\xC0";
    std::string joined;
    for (const std::string_view p : pre_tokenize(kind, text)) {
      EXPECT_FALSE(p.empty());
      joined += p;
    }
    EXPECT_EQ(joined, text);
  }
  EXPECT_EQ(pieces(PreTokenizer::kGpt2, "ab\xFF\xFE cd"), (Pieces{"ab", "\xFF\xFE", " cd"}));
}

// A long document is encoded in segments cut by last_safe_cut, each found on a prefix of the text
// (the chunks read so far). Every such cut must give the whole text's pre-tokens.
TEST(PreTokenizer, SafeCutsFoundOnAPrefixKeepThePieces) {
  const std::vector<std::string> fragments = {"a",
                                              "Z",
                                              "hello",
                                              "\xC3\xA9",
                                              "\xE4\xB8\xAD",
                                              "\xC5\xBF",
                                              " ",
                                              "  ",
                                              "\n",
                                              "\r\n",
                                              "\t",
                                              " \n ",
                                              "'s",
                                              "'ll",
                                              "'S",
                                              "'",
                                              "1",
                                              "234",
                                              "!",
                                              ".",
                                              "?'",
                                              "\xFF",
                                              "\x80",
                                              "\xE2\x82",
                                              "\xE3\x80\x80",
                                              "\xCC\x81",
                                              "\xF0\x9F\x98\x80"};
  std::mt19937 rng(7);
  int cuts = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    std::string text;
    const int n = 1 + int(rng() % 40);
    for (int i = 0; i < n; ++i) text += fragments[rng() % fragments.size()];
    for (const PreTokenizer kind : {PreTokenizer::kGpt2, PreTokenizer::kLlama3}) {
      const Pieces whole = pieces(kind, text);
      for (size_t k = 0; k <= text.size(); ++k) {
        const size_t from = k ? rng() % k : 0;
        const size_t q = last_safe_cut(std::string_view(text).substr(0, k), from);
        if (q == 0) continue;
        ++cuts;
        ASSERT_GE(q, from);
        ASSERT_LE(q + 4, k);
        Pieces split = pieces(kind, text.substr(0, q));
        const Pieces rest = pieces(kind, text.substr(q));
        split.insert(split.end(), rest.begin(), rest.end());
        ASSERT_EQ(split, whole) << "cut at " << q << " of " << testing::PrintToString(text);
      }
    }
  }
  EXPECT_GT(cuts, 10000);
  // Ordinary text has a cut after nearly every word; a run of one class has none.
  EXPECT_EQ(last_safe_cut("hello world, and more", 0), 16u);  // after "and"
  EXPECT_EQ(last_safe_cut(std::string(100, '7'), 0), 0u);
  EXPECT_EQ(last_safe_cut(std::string(100, 'x'), 0), 0u);
  EXPECT_EQ(last_safe_cut("\xE4\xB8\xAD\xE6\x96\x87\xE3\x80\x82\xE4\xB8\xAD", 0), 6u);  // 中文。中
}

}  // namespace mpf
