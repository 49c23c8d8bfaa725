#include "io/json.hpp"

#include <cmath>

#include "io/json_cursor.hpp"

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

Value parse(std::string_view text, const std::string& origin) {
  Cursor c(text, origin);
  Value v = c.value(0);
  c.finish();
  return v;
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
