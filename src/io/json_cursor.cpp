#include "io/json_cursor.hpp"

#include <charconv>

#include "core/error.hpp"

namespace mpf::json {

namespace {
constexpr int kMaxDepth = 512;

void append_utf8(std::string& out, unsigned cp) {
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
}  // namespace

void Cursor::fail(const std::string& what) const {
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

void Cursor::expect(char c) {
  skip_space();
  if (peek() != c) fail(std::string("expected '") + c + "'");
  ++at_;
}

void Cursor::literal(std::string_view word) {
  if (text_.substr(at_, word.size()) != word) fail("unknown literal");
  at_ += word.size();
}

void Cursor::finish() {
  skip_space();
  if (at_ != text_.size()) fail("unexpected text after the document");
}

void Cursor::enter(int depth) {
  if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth));
  skip_space();
  ++at_;  // '{' or '['
}

bool Cursor::member(std::string& key, bool first) {
  skip_space();
  if (first) {
    if (peek() == '}') {
      ++at_;
      return false;
    }
  } else if (peek() == ',') {
    ++at_;
  } else if (peek() == '}') {
    ++at_;
    return false;
  } else {
    fail("expected ',' or '}'");
  }
  skip_space();
  if (peek() != '"') fail("expected a string key");
  key.clear();
  string_into(key);
  expect(':');
  return true;
}

bool Cursor::item(bool first) {
  skip_space();
  if (first) {
    if (peek() != ']') return true;
    ++at_;
    return false;
  }
  if (peek() == ',') {
    ++at_;
    return true;
  }
  if (peek() == ']') {
    ++at_;
    return false;
  }
  fail("expected ',' or ']'");
}

Value Cursor::value(int depth) {
  if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth));
  switch (peek_value()) {
    case '{':
      return object(depth);
    case '[':
      return array(depth);
    case '"': {
      std::string s;
      string_into(s);
      return Value::string_value(std::move(s));
    }
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

Value Cursor::object(int depth) {
  enter(depth);
  std::vector<Value::Member> members;
  std::string key;
  for (bool first = true; member(key, first); first = false)
    members.emplace_back(key, value(depth + 1));
  return Value::object_value(std::move(members));
}

Value Cursor::array(int depth) {
  enter(depth);
  std::vector<Value> items;
  for (bool first = true; item(first); first = false) items.push_back(value(depth + 1));
  return Value::array_value(std::move(items));
}

double Cursor::number() {
  skip_space();
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

unsigned Cursor::hex4() {
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

void Cursor::string_into(std::string& out) {
  skip_space();
  ++at_;  // '"'
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
    if (c == '"') return;
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

}  // namespace mpf::json
