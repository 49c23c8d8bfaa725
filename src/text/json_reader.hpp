// Reading a tokenizer.json's fields: every problem an InputError naming the file and the field.
#pragma once

#include <string>
#include <string_view>

#include "core/error.hpp"
#include "io/json.hpp"

namespace mpf {

class JsonReader {
 public:
  explicit JsonReader(std::string what) : what_(std::move(what)) {}

  [[noreturn]] void fail(const std::string& problem) const {
    throw InputError(what_ + ": " + problem);
  }
  // A component this encoder does not implement, refused by name.
  [[noreturn]] void unsupported(const std::string& name, const std::string& type) const {
    fail(name + " " + json::quote(type) +
         " is not supported (supported: see README.md's list of tokenizer components)");
  }

  const json::Value& object_at(const json::Value& parent, std::string_view key,
                               const std::string& name) const {
    const json::Value* v = parent.find(key);
    if (!v || v->is_null()) fail("has no " + name + "; is this a Hugging Face tokenizer.json?");
    if (!v->is_object()) fail(name + " is " + json::kind_name(v->kind()) + ", not an object");
    return *v;
  }
  std::string string_or(const json::Value& obj, std::string_view key, const std::string& name,
                        const std::string& otherwise) const {
    const json::Value* v = obj.find(key);
    if (!v || v->is_null()) return otherwise;
    if (!v->is_string()) fail(name + " is " + json::kind_name(v->kind()) + ", not a string");
    return v->string();
  }
  bool bool_or(const json::Value& obj, std::string_view key, const std::string& name,
               bool otherwise) const {
    const json::Value* v = obj.find(key);
    if (!v || v->is_null()) return otherwise;
    if (!v->is_bool()) fail(name + " is " + json::kind_name(v->kind()) + ", not true or false");
    return v->boolean();
  }
  // An object's "type".
  std::string type_of(const json::Value& obj, const std::string& name) const {
    if (!obj.is_object()) fail(name + " is " + json::kind_name(obj.kind()) + ", not an object");
    return string_or(obj, "type", name + ".type", "");
  }
  // A list member of a Sequence, e.g. normalizer.normalizers.
  const json::Value& array_at(const json::Value& obj, std::string_view key,
                              const std::string& name) const {
    const json::Value* v = obj.find(key);
    if (!v || !v->is_array()) fail(name + " is not an array");
    return *v;
  }

 private:
  std::string what_;
};

}  // namespace mpf
