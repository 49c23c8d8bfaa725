#include "data/tokenize_options.hpp"

#include "core/error.hpp"
#include "core/flags.hpp"
#include "text/unicode_text.hpp"

namespace mpf {
namespace {

std::vector<std::string> split_commas(const std::string& flag, const std::string& text) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (true) {
    const size_t comma = text.find(',', begin);
    parts.push_back(text.substr(begin, comma - begin));
    require(!parts.back().empty(),
            flag + " " + text + ": has an empty entry; separate paths with single commas");
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return parts;
}

int64_t at_least(const std::string& flag, const std::string& text, int64_t least, int64_t most) {
  const int64_t v = flags::to_int(flag, text);
  require(v >= least && v <= most, flag + " must be between " + std::to_string(least) + " and " +
                                       std::to_string(most) + ", got " + text);
  return v;
}

}  // namespace

std::string unknown_bytes_name(UnknownSymbols how) {
  switch (how) {
    case UnknownSymbols::kDrop:
      return "drop";
    case UnknownSymbols::kReplace:
      return "replace";
    case UnknownSymbols::kError:
      return "error";
  }
  return "";
}

std::string invalid_utf8_name(InvalidUtf8 how) {
  switch (how) {
    case InvalidUtf8::kReplace:
      return "replace";
    case InvalidUtf8::kSkipDocument:
      return "skip-document";
    case InvalidUtf8::kError:
      return "error";
  }
  return "";
}

std::string tokenize_usage() {
  return R"(usage: mpiformer-tokenize --input PATHS --tokenizer tokenizer.json --output-dir DIR [flags]

Turns text into llm.c token shards for mpiformer-train --data. Runs on any number of MPI ranks;
the shards are the same bytes for every rank count. Flags take a value as `--flag V` or
`--flag=V`.

  --input PATHS         comma-separated files, directories and globs, in this order: a .jsonl
                        file holds a document per line (a JSON object, see --text-field; blank
                        lines skipped), any other file is one document; a directory gives its
                        .txt and .jsonl files (recursively) and a glob its matches, sorted
  --tokenizer FILE      a Hugging Face tokenizer.json with a BPE model (GPT-2, Llama 2 and 3,
                        Qwen2.5, Mistral, Gemma, ...; README.md lists the components)
  --output-dir DIR      where the shards and manifest.json go (created if missing); existing
                        shards of --name or a manifest there are never overwritten: an error.
                        One run at a time writes there (DIR/mpiformer.lock, as --save's)
  --name NAME           shard names NAME_val_000000.bin, NAME_train_000001.bin, ... (default
                        data)
  --doc-token TOKEN     the token put before every document (default: the tokens the file's
                        post_processor puts around a text, its BOS and/or EOS; with none,
                        <|begin_of_text|> or <|endoftext|> before, as llm.c's data scripts do)
  --parse-special       special tokens written in a document are their ids (default: text, as
                        llm.c's encode_ordinary; added tokens not special are always matched)
  --text-field NAME     the .jsonl field that holds the document (default text)
  --shard-tokens N      tokens per training shard (default 100000000, at most 2147483647)
  --val-tokens N        a validation split: the documents holding the first N tokens go to
                        NAME_val_000000.bin, the rest to training shards (default 0: none)
  --unit-bytes N        text per work unit (default 8388608); units are dealt to the ranks in
                        turn; a rank holds at most a few MB of a unit's tokens (more wait in
                        a spool file in --output-dir, removed as it goes) and a MB of its text
  --unknown-bytes HOW   a character (a byte, for byte-level BPE) the vocabulary has no token
                        for, with no <0xNN> token either: drop (default, as Hugging Face: the
                        model's unk_token if it names one, else left out), replace (unk_token,
                        else the tokens of U+FFFD) or error (refuse the corpus, naming it)
  --invalid-utf8 HOW    bytes that are not UTF-8 (a Latin-1 file): replace (default, each
                        ill-formed sequence read as U+FFFD, as Python's errors="replace"),
                        skip-document (leave the document out) or error (refuse, naming it)
  --help                this text

Shards are uint16 (llm.c's GPT-2 format) for vocabularies up to 65,536 tokens, else uint32
(llm.c's Llama 3 format). manifest.json lists the inputs, the tokenizer and its SHA-256, the
document token, and every shard with its token count and SHA-256. Bad input prints one "error:"
line and exits with status 2. The summary line and the manifest count what --unknown-bytes and
--invalid-utf8 dropped, replaced or skipped, the manifest document by document.

Letters, numbers and spaces (the pre-tokenizers' classes) are told apart with the Unicode
)" + std::string(unicode::version()) +
         R"( data of utf8proc and the characters Unicode 15.1 and 16.0 added (CJK Extension I,
the 16.0 scripts), as Hugging Face's tokenizers read them.
)";
}

TokenizeOptions parse_tokenize_options(int argc, const char* const* argv) {
  TokenizeOptions o;
  flags::Table table;
  table.values = {
      {"--input", [&](auto& f, auto& v) { o.inputs = split_commas(f, v); }},
      {"--tokenizer", [&](auto&, auto& v) { o.tokenizer = v; }},
      {"--output-dir", [&](auto&, auto& v) { o.output_dir = v; }},
      {"--name", [&](auto&, auto& v) { o.name = v; }},
      {"--doc-token", [&](auto&, auto& v) { o.doc_token = v; }},
      {"--text-field", [&](auto&, auto& v) { o.text_field = v; }},
      {"--shard-tokens", [&](auto& f, auto& v) { o.shard_tokens = at_least(f, v, 1, 2147483647); }},
      {"--val-tokens", [&](auto& f, auto& v) { o.val_tokens = at_least(f, v, 0, 2147483647); }},
      {"--unit-bytes", [&](auto& f, auto& v) { o.unit_bytes = at_least(f, v, 1, INT64_MAX); }},
      {"--unknown-bytes",
       [&](auto& f, auto& v) {
         o.unknown_bytes = v == "drop"      ? UnknownSymbols::kDrop
                           : v == "replace" ? UnknownSymbols::kReplace
                           : v == "error"   ? UnknownSymbols::kError
                                            : throw InputError(f + " '" + v +
                                                               "' is not a choice; pass drop, "
                                                                 "replace or error");
       }},
      {"--invalid-utf8",
       [&](auto& f, auto& v) {
         o.invalid_utf8 = v == "replace"         ? InvalidUtf8::kReplace
                          : v == "skip-document" ? InvalidUtf8::kSkipDocument
                          : v == "error"         ? InvalidUtf8::kError
                                                 : throw InputError(f + " '" + v +
                                                                    "' is not a choice; pass "
                                                                            "replace, skip-document or "
                                                                            "error");
       }},
  };
  table.switches = {{"--help", [&] { o.help = true; }},
                    {"--parse-special", [&] { o.parse_special = true; }}};
  flags::parse(argc, argv, table, "mpiformer-tokenize");
  if (o.help) return o;
  require(!o.inputs.empty(), "no --input given; pass text files, .jsonl files or directories");
  require(!o.tokenizer.empty(), "no --tokenizer given; pass a Hugging Face tokenizer.json");
  require(!o.output_dir.empty(), "no --output-dir given; pass the directory for the shards");
  require(!o.name.empty() && o.name.find('/') == std::string::npos,
          "--name '" + o.name + "' must be a non-empty file name prefix without '/'");
  require(!o.text_field.empty(), "--text-field is empty; pass the .jsonl field's name");
  return o;
}

}  // namespace mpf
