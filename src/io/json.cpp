#include "io/json.hpp"

#include <charconv>
#include <cmath>

#include "core/error.hpp"

namespace mpf::json {

Value Value::boolean_value(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.bool_ = b;
  return v;
}
Value Value::number_value(double x) {
  Value v;
  v.kind_ = Kind::kNumber;
  v.number_ = x;
  return v;
}
Value Value::string_value(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.string_ = std::move(s);
  return v;
}
Value Value::array_value(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kArray;
  v.items_ = std::move(items);
  return v;
}
Value Value::object_value(std::vector<Member> members) {
  Value v;
  v.kind_ = Kind::kObject;
  v.members_ = std::move(members);
  return v;
}

const char* kind_name(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::kNull:
      return "null";
    case Value::Kind::kBool:
      return "a boolean";
    case Value::Kind::kNumber:
      return "a number";
    case Value::Kind::kString:
      return "a string";
    case Value::Kind::kArray:
      return "an array";
    case Value::Kind::kObject:
      return "an object";
  }
  return "?";
}

namespace {
[[noreturn]] void wrong_kind(Value::Kind is, const char* wanted) {
  throw TypeError(std::string(kind_name(is)) + " where " + wanted + " was expected");
}
}  // namespace

bool Value::boolean() const {
  if (kind_ != Kind::kBool) wrong_kind(kind_, "a boolean");
  return bool_;
}
double Value::number() const {
  if (kind_ != Kind::kNumber) wrong_kind(kind_, "a number");
  return number_;
}
int64_t Value::integer() const {
  const double x = number();
  constexpr double kExact = 9007199254740992.0;  // 2^53
  if (!(std::fabs(x) <= kExact) || x != std::trunc(x)) {
    throw TypeError("the number " + std::to_string(x) + " where an integer was expected");
  }
  return int64_t(x);
}
const std::string& Value::string() const {
  if (kind_ != Kind::kString) wrong_kind(kind_, "a string");
  return string_;
}
const std::vector<Value>& Value::array() const {
  if (kind_ != Kind::kArray) wrong_kind(kind_, "an array");
  return items_;
}
const std::vector<Value::Member>& Value::object() const {
  if (kind_ != Kind::kObject) wrong_kind(kind_, "an object");
  return members_;
}
const Value* Value::find(std::string_view key) const {
  if (kind_ != Kind::kObject) return nullptr;
  for (auto it = members_.rbegin(); it != members_.rend(); ++it) {
    if (it->first == key) return &it->second;
  }
  return nullptr;
}

namespace {
constexpr int kMaxDepth = 512;

// A recursive-descent reader over the whole text; `at` is the next unread byte.
class Reader {
 public:
  Reader(std::string_view text, const std::string& origin) : text_(text), origin_(origin) {}

  Value document() {
    Value v = value(0);
    skip_space();
    if (at_ != text_.size()) fail("unexpected text after the document");
    return v;
  }

 private:
  std::string_view text_;
  const std::string& origin_;
  size_t at_ = 0;

  [[noreturn]] void fail(const std::string& what) const {
    int line = 1, column = 1;
    for (size_t i = 0; i < at_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw InputError(origin_ + ": invalid JSON at line " + std::to_string(line) + ", column " +
                     std::to_string(column) + ": " + what);
  }

  bool more() const { return at_ < text_.size(); }
  char peek() const { return more() ? text_[at_] : '\0'; }

  void skip_space() {
    while (more()) {
      const char c = text_[at_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      ++at_;
    }
  }

  void expect(char c) {
    skip_space();
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++at_;
  }

  void literal(std::string_view word) {
    if (text_.substr(at_, word.size()) != word) fail("unknown literal");
    at_ += word.size();
  }

  Value value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth));
    skip_space();
    switch (peek()) {
      case '{':
        return object(depth);
      case '[':
        return array(depth);
      case '"':
        return Value::string_value(string());
      case 't':
        literal("true");
        return Value::boolean_value(true);
      case 'f':
        literal("false");
        return Value::boolean_value(false);
      case 'n':
        literal("null");
        return Value();
      default:
        return Value::number_value(number());
    }
  }

  Value object(int depth) {
    ++at_;  // '{'
    std::vector<Value::Member> members;
    skip_space();
    if (peek() == '}') {
      ++at_;
      return Value::object_value(std::move(members));
    }
    for (;;) {
      skip_space();
      if (peek() != '"') fail("expected a string key");
      std::string key = string();
      expect(':');
      members.emplace_back(std::move(key), value(depth + 1));
      skip_space();
      if (peek() == ',') {
        ++at_;
        continue;
      }
      if (peek() == '}') {
        ++at_;
        return Value::object_value(std::move(members));
      }
      fail("expected ',' or '}'");
    }
  }

  Value array(int depth) {
    ++at_;  // '['
    std::vector<Value> items;
    skip_space();
    if (peek() == ']') {
      ++at_;
      return Value::array_value(std::move(items));
    }
    for (;;) {
      items.push_back(value(depth + 1));
      skip_space();
      if (peek() == ',') {
        ++at_;
        continue;
      }
      if (peek() == ']') {
        ++at_;
        return Value::array_value(std::move(items));
      }
      fail("expected ',' or ']'");
    }
  }

  double number() {
    // JSON's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
    const size_t start = at_;
    auto digits = [&] {
      const size_t first = at_;
      while (more() && text_[at_] >= '0' && text_[at_] <= '9') ++at_;
      return at_ - first;
    };
    if (peek() == '-') ++at_;
    if (peek() == '0') {
      ++at_;
    } else if (digits() == 0) {
      fail("expected a value");
    }
    if (peek() == '.') {
      ++at_;
      if (digits() == 0) fail("expected digits after '.'");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++at_;
      if (peek() == '+' || peek() == '-') ++at_;
      if (digits() == 0) fail("expected digits in the exponent");
    }
    double x = 0;
    const auto [end, ec] = std::from_chars(text_.data() + start, text_.data() + at_, x);
    if (ec != std::errc() || end != text_.data() + at_) {
      at_ = start;
      fail("number out of range");
    }
    return x;
  }

  unsigned hex4() {
    if (at_ + 4 > text_.size()) fail("truncated \\u escape");
    unsigned u = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[at_++];
      u <<= 4;
      if (c >= '0' && c <= '9') {
        u |= unsigned(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        u |= unsigned(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        u |= unsigned(c - 'A' + 10);
      } else {
        fail("bad hex digit in a \\u escape");
      }
    }
    return u;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    ++at_;  // '"'
    std::string out;
    for (;;) {
      // Copy the run up to the next quote, backslash or control character in one go.
      const size_t run = at_;
      while (more()) {
        const unsigned char c = static_cast<unsigned char>(text_[at_]);
        if (c == '"' || c == '\\' || c < 0x20) break;
        ++at_;
      }
      out.append(text_.data() + run, at_ - run);
      if (!more()) fail("unterminated string");
      const char c = text_[at_++];
      if (c == '"') return out;
      if (c != '\\') {
        --at_;
        fail("control character in a string");
      }
      if (!more()) fail("unterminated string");
      switch (text_[at_++]) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a high surrogate: its low half must follow
            if (text_.substr(at_, 2) != "\\u") fail("a high surrogate without its low half");
            at_ += 2;
            const unsigned low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("a high surrogate without its low half");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("a low surrogate without its high half");
          }
          append_utf8(out, cp);
          break;
        }
        default:
          --at_;
          fail("unknown escape");
      }
    }
  }
};
}  // namespace

Value parse(std::string_view text, const std::string& origin) {
  return Reader(text, origin).document();
}

std::string quote(std::string_view s) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

}  // namespace mpf::json
