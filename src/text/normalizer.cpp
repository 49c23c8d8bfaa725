#include "text/normalizer.hpp"

#include <cstring>

#include "text/utf8.hpp"

namespace mpf {

std::string replace_all(std::string_view text, const std::string& literal, const Regex* regex,
                        const std::string& content) {
  std::string out;
  replace_all(text, literal, regex, content, out);
  return out;
}

void replace_all(std::string_view text, const std::string& literal, const Regex* regex,
                 const std::string& content, std::string& out) {
  out.clear();
  if (regex) {
    out.reserve(text.size());
    size_t done = 0;
    regex->for_each_match(text, [&](size_t begin, size_t end) {
      out.append(text.substr(done, begin - done));
      out += content;
      done = end;
    });
    out.append(text.substr(done));
    return;
  }
  // A literal: the matches counted first, so that the text is written once into a string of its
  // final size, not appended to per match. One byte (the usual case) is found by memchr alone.
  const auto next = [&](size_t from) {
    return literal.size() == 1 ? text.find(literal[0], from) : text.find(literal, from);
  };
  size_t matches = 0;
  for (size_t at = next(0); at != std::string_view::npos; at = next(at + literal.size())) ++matches;
  out.resize(text.size() - matches * literal.size() + matches * content.size());
  char* w = out.data();
  size_t done = 0;
  for (size_t at = next(0); at != std::string_view::npos; at = next(done)) {
    std::memcpy(w, text.data() + done, at - done);
    w += at - done;
    std::memcpy(w, content.data(), content.size());
    w += content.size();
    done = at + literal.size();
  }
  std::memcpy(w, text.data() + done, text.size() - done);
}

namespace {

// The pattern of a Replace (normalizer or decoder): {"String": s} or {"Regex": r}.
std::shared_ptr<const Regex> read_pattern(const json::Value& step, const std::string& name,
                                          const JsonReader& r, std::string& literal) {
  const json::Value& pattern = r.object_at(step, "pattern", name + ".pattern");
  if (const json::Value* s = pattern.find("String"); s && s->is_string()) {
    literal = s->string();
    // An empty literal matches everywhere, as the escaped empty pattern does in Oniguruma.
    return literal.empty() ? std::make_shared<const Regex>("") : nullptr;
  }
  const std::string regex = r.string_or(pattern, "Regex", name + ".pattern.Regex", "");
  if (!pattern.find("Regex"))
    r.fail(name + ".pattern is neither {\"String\": ...} nor {\"Regex\": ...}");
  try {
    return std::make_shared<const Regex>(regex);
  } catch (const std::invalid_argument& e) {
    r.fail(name + ".pattern.Regex " + json::quote(regex) + " does not compile: " + e.what());
  }
}

std::string strip(std::string_view text, bool left, bool right) {
  size_t begin = 0, end = text.size();
  if (left) {
    while (begin < end) {
      const utf8::Char c = utf8::decode(text, begin);
      if (!unicode::is_whitespace(c.cp)) break;
      begin += size_t(c.length);
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      if (!unicode::is_whitespace(utf8::decode(text, start).cp)) break;
      end = start;
    }
  }
  return std::string(text.substr(begin, end - begin));
}

std::string strip_accents(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t at = 0; at < text.size();) {
    const utf8::Char c = utf8::decode(text, at);
    if (!unicode::is_mark(c.cp)) out.append(text.substr(at, size_t(c.length)));
    at += size_t(c.length);
  }
  return out;
}

}  // namespace

Normalizer Normalizer::read(const json::Value* normalizer, const JsonReader& r) {
  Normalizer n;
  if (normalizer && !normalizer->is_null()) n.read_step(*normalizer, "normalizer", r);
  return n;
}

void Normalizer::read_step(const json::Value& v, const std::string& name, const JsonReader& r) {
  const std::string type = r.type_of(v, name);
  if (type == "Sequence") {
    const json::Value& list = r.array_at(v, "normalizers", name + ".normalizers");
    for (size_t i = 0; i < list.array().size(); ++i)
      read_step(list.array()[i], name + ".normalizers[" + std::to_string(i) + "]", r);
    return;
  }
  Step s;
  s.kind = Kind::kForm;
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    s.form = type == "NFC"    ? unicode::Form::kNFC
             : type == "NFD"  ? unicode::Form::kNFD
             : type == "NFKC" ? unicode::Form::kNFKC
                              : unicode::Form::kNFKD;
  } else if (type == "Lowercase") {
    s.kind = Kind::kLowercase;
  } else if (type == "StripAccents") {
    s.kind = Kind::kStripAccents;
  } else if (type == "Strip") {
    s.kind = Kind::kStrip;
    s.left = r.bool_or(v, "strip_left", name + ".strip_left", false);
    s.right = r.bool_or(v, "strip_right", name + ".strip_right", false);
  } else if (type == "Prepend") {
    s.kind = Kind::kPrepend;
    s.content = r.string_or(v, "prepend", name + ".prepend", "");
  } else if (type == "Replace") {
    s.kind = Kind::kReplace;
    s.regex = read_pattern(v, name, r, s.pattern);
    s.content = r.string_or(v, "content", name + ".content", "");
  } else {
    r.unsupported(name, type);
  }
  steps_.push_back(std::move(s));
}

std::string Normalizer::apply(std::string_view text, bool part_start) const {
  std::string s, spare;
  apply(text, part_start, s, spare);
  return s;
}

void Normalizer::apply(std::string_view text, bool part_start, std::string& s,
                       std::string& spare) const {
  // The text is read where it lies until a step writes it: no copy of it for the first step.
  std::string_view cur = text;
  const auto written = [&] { cur = s; };
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kForm:
        s = unicode::normalize(cur, step.form);
        written();
        break;
      case Kind::kLowercase:
        s = unicode::lowercase(cur);
        written();
        break;
      case Kind::kStripAccents:
        s = strip_accents(cur);
        written();
        break;
      case Kind::kStrip:
        s = strip(cur, step.left && part_start, step.right);
        written();
        break;
      case Kind::kReplace:
        replace_all(cur, step.pattern, step.regex.get(), step.content, spare);
        s.swap(spare);
        written();
        break;
      case Kind::kPrepend:
        if (!part_start || cur.empty()) break;
        if (cur.data() == s.data()) {
          s.insert(0, step.content);
        } else {
          s.assign(step.content);
          s.append(cur);
        }
        written();
        break;
    }
  }
  if (cur.data() != s.data()) s.assign(cur.data(), cur.size());
}

bool Normalizer::cuttable() const {
  bool replaced = false;
  for (const Step& step : steps_) {
    if (step.kind == Kind::kStrip) return false;
    if (step.kind != Kind::kReplace) continue;
    // The space at the cut must stay a space, and no match may span it: a literal without a space,
    // of one character or with the text's spaces as they were (no Replace before it).
    if (step.regex || step.pattern.find(' ') != std::string::npos) return false;
    const bool one_char = size_t(utf8::decode(step.pattern, 0).length) == step.pattern.size();
    if (!one_char && replaced) return false;
    replaced = true;
  }
  return true;
}

}  // namespace mpf
