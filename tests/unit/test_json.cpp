// The JSON reader: every kind of value, escapes into UTF-8, key order kept, the writer's quoting
// read back, and malformed documents refused with the origin, line and column.
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "io/json.hpp"

namespace mpf {

namespace {
std::string error_of(const std::string& text) {
  try {
    json::parse(text, "f.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Json, ReadsEveryKind) {
  const json::Value v = json::parse(
      R"({"n": null, "t": true, "f": false, "i": -12, "x": 2.5e-3, "s": "a\"b",
          "a": [1, [2], {}], "o": {"z": 1, "a": 2}})",
      "f.json");
  ASSERT_TRUE(v.is_object());
  EXPECT_TRUE(v.find("n")->is_null());
  EXPECT_TRUE(v.find("t")->boolean());
  EXPECT_FALSE(v.find("f")->boolean());
  EXPECT_EQ(v.find("i")->integer(), -12);
  EXPECT_DOUBLE_EQ(v.find("x")->number(), 2.5e-3);
  EXPECT_EQ(v.find("s")->string(), "a\"b");
  EXPECT_EQ(v.find("a")->array().size(), 3u);
  EXPECT_EQ(v.find("a")->array()[1].array()[0].integer(), 2);
  // Document order, not sorted.
  const auto& o = v.find("o")->object();
  ASSERT_EQ(o.size(), 2u);
  EXPECT_EQ(o[0].first, "z");
  EXPECT_EQ(o[1].first, "a");
  EXPECT_EQ(v.find("missing"), nullptr);
  EXPECT_EQ(v.find("i")->find("x"), nullptr);  // not an object
}

TEST(Json, EscapesBecomeUtf8) {
  // é (2 bytes), € (3 bytes), 😀 (a surrogate pair, 4 bytes), and the short escapes.
  const json::Value v =
      json::parse(R"(["\u00e9", "\u20ac", "\ud83d\ude00", "\b\f\n\r\t\/\\"])", "f.json");
  EXPECT_EQ(v.array()[0].string(), "\xc3\xa9");
  EXPECT_EQ(v.array()[1].string(), "\xe2\x82\xac");
  EXPECT_EQ(v.array()[2].string(), "\xf0\x9f\x98\x80");
  EXPECT_EQ(v.array()[3].string(), "\b\f\n\r\t/\\");
}

TEST(Json, QuoteReadsBack) {
  std::string all;
  for (int c = 1; c < 256; ++c) all += char(c);
  const std::string doc = "[" + json::quote(all) + "]";
  EXPECT_EQ(json::parse(doc, "f.json").array()[0].string(), all);
  EXPECT_EQ(json::quote("a\nb"), "\"a\\nb\"");
}

TEST(Json, WrongKindThrowsTypeError) {
  const json::Value v = json::parse(R"({"s": "x", "x": 1.5})", "f.json");
  EXPECT_THROW(v.find("s")->number(), json::TypeError);
  EXPECT_THROW(v.find("x")->integer(), json::TypeError);  // not integral
  EXPECT_THROW(v.array(), json::TypeError);
}

TEST(Json, MalformedDocumentsNameTheirPlace) {
  EXPECT_EQ(error_of("{\"a\": 1,\n  \"b\" 2}"),
            "f.json: invalid JSON at line 2, column 7: expected ':'");
  EXPECT_NE(error_of("[1, 2"), "");
  EXPECT_NE(error_of("{} x"), "");
  EXPECT_NE(error_of("\"abc"), "");
  EXPECT_NE(error_of("[01]"), "");
  EXPECT_NE(error_of("[1.]"), "");
  EXPECT_NE(error_of("[tru]"), "");
  EXPECT_NE(error_of("[\"\\ud83d\"]"), "");  // a lone high surrogate
  EXPECT_NE(error_of("[\"a\tb\"]"), "");     // a raw control character
  EXPECT_NE(error_of(""), "");
  EXPECT_NE(error_of(std::string(600, '[') + std::string(600, ']')), "");  // too deep
  EXPECT_EQ(error_of(std::string(500, '[') + std::string(500, ']')), "");
}

}  // namespace mpf
