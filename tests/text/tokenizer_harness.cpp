// What compare_tokenizer.py checks against its Python reference: for a tokenizer.json and a JSON
// array of strings, one JSON line per string with the C++ pre-tokens of a plain text (on the fast
// path and on the general one), encode() (both paths, and a segment at a time where cut() allows),
// encode_with_specials() and decode() of each.
//   tokenizer_harness TOKENIZER_JSON STRINGS_JSON
// and, for ci/bench_tokenizer.py, encode()'s throughput on one thread: the first pass over a text
// file (the pre-token cache empty) and the best of the next passes, in MB/s, the token count and
// the seconds load() took.
//   tokenizer_harness --bench TOKENIZER_JSON TEXT_FILE
// A test program, not a tool: errors go to stderr with status 2.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/json.hpp"
#include "text/bpe_tokenizer.hpp"

namespace {

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

std::string read_all(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void bench(const mpf::BpeTokenizer& tok, const std::string& text, double load_s) {
  using Clock = std::chrono::steady_clock;
  double first = 0, best = 1e30;
  size_t tokens = 0;
  for (int pass = 0; pass < 6; ++pass) {
    const auto start = Clock::now();
    tokens = tok.encode(text).size();
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (pass == 0)
      first = s;
    else
      best = std::min(best, s);
  }
  std::printf("{\"bytes\":%zu,\"tokens\":%zu,\"first_mb_s\":%.2f,\"mb_s\":%.2f,\"load_s\":%.3f}\n",
              text.size(), tokens, text.size() / first / 1e6, text.size() / best / 1e6, load_s);
}

}  // namespace

int main(int argc, char** argv) {
  const bool benching = argc == 4 && std::string(argv[1]) == "--bench";
  if (argc != 3 && !benching) {
    std::fprintf(stderr,
                 "usage: tokenizer_harness TOKENIZER_JSON STRINGS_JSON\n"
                 "       tokenizer_harness --bench TOKENIZER_JSON TEXT_FILE\n");
    return 2;
  }
  try {
    if (benching) {
      const auto start = std::chrono::steady_clock::now();
      const mpf::BpeTokenizer tok = mpf::BpeTokenizer::load(argv[2]);
      const double load_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      bench(tok, read_all(argv[3]), load_s);
      return 0;
    }
    const mpf::BpeTokenizer tok = mpf::BpeTokenizer::load(argv[1]);
    const mpf::BpeTokenizer general = tok.without_scanner();
    const mpf::json::Value strings = mpf::json::parse(read_all(argv[2]), argv[2]);
    const char* scanner = !tok.pre_tokenizer()                                 ? "none"
                          : *tok.pre_tokenizer() == mpf::PreTokenizer::kGpt2   ? "gpt2"
                          : *tok.pre_tokenizer() == mpf::PreTokenizer::kLlama3 ? "llama3"
                                                                               : "qwen2";
    std::printf("{\"vocab_size\":%d,\"pre_tokenizer\":\"%s\",\"prefix\":%s,\"suffix\":%s}\n",
                tok.vocab_size(), scanner, ids_json(tok.template_prefix()).c_str(),
                ids_json(tok.template_suffix()).c_str());
    const auto pieces_json = [](const std::vector<std::string>& pieces) {
      std::string pre = "[";
      for (size_t i = 0; i < pieces.size(); ++i)
        pre += (i ? "," : "") + mpf::json::quote(pieces[i]);
      return pre + "]";
    };
    for (const mpf::json::Value& s : strings.array()) {
      const std::string& text = s.string();
      const std::vector<int32_t> ids = tok.encode(text);
      const std::vector<int32_t> special = tok.encode_with_specials(text);
      // The same text cut where cut() allows, encoded a segment at a time.
      std::vector<int32_t> segmented;
      size_t done = 0;
      for (size_t step = 7; done < text.size();) {
        const std::string_view rest = std::string_view(text).substr(done);
        const size_t q = rest.size() > step ? tok.cut(rest.substr(0, step), 1) : 0;
        const size_t take = q > 0 ? q : rest.size() > step ? 0 : rest.size();
        if (take == 0) {
          step += 7;
          continue;
        }
        tok.encode_segment(rest.substr(0, take), done == 0, segmented);
        done += take;
        step = 7;
      }
      std::printf(
          "{\"pre\":%s,\"general_pre\":%s,\"ids\":%s,\"general_ids\":%s,\"segmented\":%s,"
          "\"special\":%s,\"decoded\":%s,\"decoded_special\":%s}\n",
          pieces_json(tok.pre_tokens(text)).c_str(), pieces_json(general.pre_tokens(text)).c_str(),
          ids_json(ids).c_str(), ids_json(general.encode(text)).c_str(),
          ids_json(segmented).c_str(), ids_json(special).c_str(),
          mpf::json::quote(tok.decode(ids)).c_str(), mpf::json::quote(tok.decode(special)).c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", mpf::error_line(e.what()).c_str());
    return 2;
  }
  return 0;
}
