// JSON (RFC 8259) as the files the trainer reads and writes use it: Hugging Face's config.json,
// tokenizer.json and model.safetensors.index.json, the safetensors header, JSONL corpora and the
// tokenizer's manifest. A document is parsed whole into Values; objects keep their keys in
// document order (a tokenizer's vocabulary is listed, not looked up, and writers reproduce it).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mpf::json {

// A value asked for as a kind it is not (a number read as a string). Callers that know the file
// and the key turn it into an InputError naming both.
class TypeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Value {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  using Member = std::pair<std::string, Value>;

  Value() = default;
  static Value boolean_value(bool b);
  static Value number_value(double x);
  static Value string_value(std::string s);
  static Value array_value(std::vector<Value> items);
  static Value object_value(std::vector<Member> members);

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::kNull; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_number() const { return kind_ == Kind::kNumber; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }

  bool boolean() const;
  double number() const;
  // The number when it is integral and within ±2^53 (exact in a double); TypeError otherwise.
  int64_t integer() const;
  const std::string& string() const;
  const std::vector<Value>& array() const;
  const std::vector<Member>& object() const;
  // The member named key; nullptr if absent or if this is not an object. The last one wins when
  // a key repeats, as in JavaScript and Python.
  const Value* find(std::string_view key) const;

 private:
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<Value> items_;
  std::vector<Member> members_;
};

// "null", "boolean", ...: for error messages.
const char* kind_name(Value::Kind kind);

// Parses one JSON document. Throws InputError "<origin>: invalid JSON at line L, column C: <what>"
// on any syntax error, invalid UTF-8 escape or trailing text, and for nesting deeper than 512.
Value parse(std::string_view text, const std::string& origin);

// `s` as a JSON string literal: quotes, backslash and control characters escaped, other bytes
// (UTF-8) as they are.
std::string quote(std::string_view s);

}  // namespace mpf::json
