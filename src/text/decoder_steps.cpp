#include "text/decoder_steps.hpp"

#include "text/byte_alphabet.hpp"
#include "text/normalizer.hpp"
#include "text/utf8.hpp"

namespace mpf {

struct DecoderSteps::Step {
  enum class Kind { kByteLevel, kMetaspace, kByteFallback, kFuse, kStrip, kReplace } kind;
  std::string literal, content;  // Metaspace's replacement, Strip's content; Replace's
  std::shared_ptr<const Regex> regex;
  bool prepend = true;  // Metaspace: prepend_scheme is not "never"
  int start = 0, stop = 0;
};

namespace {

// "<0xNN>" -> NN, else -1.
int fallback_byte(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = t[size_t(i)];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

bool well_formed(const std::string& s) {
  for (size_t at = 0; at < s.size();) {
    const utf8::Char c = utf8::decode(s, at);
    if (c.cp == utf8::kInvalid) return false;
    at += size_t(c.length);
  }
  return true;
}

std::string strip_chars(const std::string& token, const std::string& content, int start, int stop) {
  std::vector<std::pair<size_t, size_t>> chars;  // (offset, length)
  for (size_t at = 0; at < token.size();) {
    const size_t n = size_t(utf8::decode(token, at).length);
    chars.emplace_back(at, n);
    at += n;
  }
  const auto is_content = [&](size_t i) {
    return token.compare(chars[i].first, chars[i].second, content) == 0 &&
           chars[i].second == content.size();
  };
  size_t begin = 0, end = chars.size();
  for (size_t i = 0; i < size_t(start) && i < chars.size() && is_content(i); ++i) begin = i + 1;
  for (size_t k = 0; k < size_t(stop) && k < chars.size(); ++k) {
    const size_t i = chars.size() - k - 1;
    if (!is_content(i)) break;
    end = i;
  }
  if (end <= begin) return std::string();
  const size_t from = chars[begin].first;
  const size_t to = end < chars.size() ? chars[end].first : token.size();
  return token.substr(from, to - from);
}

}  // namespace

DecoderSteps DecoderSteps::read(const json::Value* decoder, const JsonReader& r) {
  DecoderSteps d;
  if (decoder && !decoder->is_null()) d.read_step(*decoder, "decoder", r);
  return d;
}

void DecoderSteps::read_step(const json::Value& v, const std::string& name, const JsonReader& r) {
  const std::string type = r.type_of(v, name);
  if (type == "Sequence") {
    const json::Value& list = r.array_at(v, "decoders", name + ".decoders");
    for (size_t i = 0; i < list.array().size(); ++i)
      read_step(list.array()[i], name + ".decoders[" + std::to_string(i) + "]", r);
    return;
  }
  auto s = std::make_shared<Step>();
  using K = Step::Kind;
  if (type == "ByteLevel") {
    s->kind = K::kByteLevel;
  } else if (type == "ByteFallback") {
    s->kind = K::kByteFallback;
  } else if (type == "Fuse") {
    s->kind = K::kFuse;
  } else if (type == "Metaspace") {
    s->kind = K::kMetaspace;
    s->literal = r.string_or(v, "replacement", name + ".replacement", "\xE2\x96\x81");
    // Hugging Face's replacement is one char; an empty one would match everywhere, forever.
    if (s->literal.empty() || size_t(utf8::decode(s->literal, 0).length) != s->literal.size())
      r.fail(name + ".replacement must be one character");
    const bool legacy = r.bool_or(v, "add_prefix_space", name + ".add_prefix_space", true);
    s->prepend = r.string_or(v, "prepend_scheme", name + ".prepend_scheme",
                             legacy ? "always" : "never") != "never";
  } else if (type == "Strip") {
    s->kind = K::kStrip;
    s->content = r.string_or(v, "content", name + ".content", " ");
    for (const auto& [key, field] : {std::pair{"start", &s->start}, {"stop", &s->stop}}) {
      const json::Value* n = v.find(key);
      if (n && !n->is_null()) {
        if (!n->is_number() || n->number() < 0) r.fail(name + "." + key + " is not a count");
        *field = int(n->number());
      }
    }
  } else if (type == "Replace") {
    s->kind = K::kReplace;
    const json::Value& pattern = r.object_at(v, "pattern", name + ".pattern");
    if (const json::Value* lit = pattern.find("String"); lit && lit->is_string()) {
      s->literal = lit->string();
      if (s->literal.empty()) s->regex = std::make_shared<const Regex>("");
    } else {
      const std::string re = r.string_or(pattern, "Regex", name + ".pattern.Regex", "");
      try {
        s->regex = std::make_shared<const Regex>(re);
      } catch (const std::invalid_argument& e) {
        r.fail(name + ".pattern.Regex " + json::quote(re) + " does not compile: " + e.what());
      }
    }
    s->content = r.string_or(v, "content", name + ".content", "");
  } else {
    r.unsupported(name, type);
  }
  steps_.push_back(std::move(s));
}

std::vector<std::string> DecoderSteps::run(std::vector<std::string> tokens, bool raw_bytes,
                                           bool first_is_inside) const {
  using K = Step::Kind;
  for (const auto& step : steps_) {
    std::vector<std::string> out;
    switch (step->kind) {
      case K::kByteLevel: {
        std::string bytes;
        for (const std::string& t : tokens) bytes += byte_alphabet::bytes_of(t).value_or(t);
        out.push_back(std::move(bytes));
        break;
      }
      case K::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        out.push_back(std::move(all));
        break;
      }
      case K::kByteFallback: {
        std::string pending;
        const auto flush = [&] {
          if (pending.empty()) return;
          if (raw_bytes || well_formed(pending)) {
            out.push_back(pending);
          } else {
            for (size_t i = 0; i < pending.size(); ++i) out.push_back("\xEF\xBF\xBD");
          }
          pending.clear();
        };
        for (std::string& t : tokens) {
          const int b = fallback_byte(t);
          if (b >= 0) {
            pending += char(b);
            continue;
          }
          flush();
          out.push_back(std::move(t));
        }
        flush();
        break;
      }
      case K::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          const bool drop = i == 0 && step->prepend && !first_is_inside;
          out.push_back(replace_all(tokens[i], step->literal, nullptr, drop ? "" : " "));
        }
        break;
      case K::kStrip:
        for (const std::string& t : tokens)
          out.push_back(first_is_inside ? t
                                        : strip_chars(t, step->content, step->start, step->stop));
        break;
      case K::kReplace:
        for (const std::string& t : tokens)
          out.push_back(replace_all(t, step->literal, step->regex.get(), step->content));
        break;
    }
    tokens.swap(out);
  }
  return tokens;
}

bool DecoderSteps::byte_level_only() const {
  return steps_.size() == 1 && steps_[0]->kind == Step::Kind::kByteLevel;
}

std::string DecoderSteps::decode(std::vector<std::string> tokens) const {
  std::string text;
  if (steps_.empty()) {
    for (size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
    return text;
  }
  for (const std::string& t : run(std::move(tokens), false, false)) text += t;
  return text;
}

std::string DecoderSteps::token_bytes(const std::string& token) const {
  std::string text;
  for (const std::string& t : run({token}, true, true)) text += t;
  return text;
}

}  // namespace mpf
