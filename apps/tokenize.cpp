// mpiformer-tokenize: a driver. Parses flags (the settings table's rows), loads the tokenizer on
// every rank and runs the tokenization (data/tokenize_run.hpp). Input errors print once (from the
// lowest failing rank, normally rank 0) and every rank exits with status 2.
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data/document_encoder.hpp"
#include "data/tokenize_options.hpp"
#include "data/tokenize_run.hpp"
#include "io/sha256.hpp"
#include "layout/settings.hpp"
#include "runtime.hpp"
#include "text/unicode_text.hpp"
#include "train/exit_status.hpp"

namespace {

// The flags as parsed: the options, and the two choices by the names the flags spell.
struct TokenizeFlags {
  mpf::TokenizeOptions o;
  std::string unknown_bytes = mpf::unknown_bytes_name(o.unknown_bytes);
  std::string invalid_utf8 = mpf::invalid_utf8_name(o.invalid_utf8);
};

std::vector<std::string> split_commas(const std::string& flag, const std::string& text) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (true) {
    const size_t comma = text.find(',', begin);
    parts.push_back(text.substr(begin, comma - begin));
    mpf::require(!parts.back().empty(),
                 flag + " " + text + ": has an empty entry; separate paths with single commas");
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return parts;
}

// mpiformer-tokenize's flags, rows of the settings table (layout/settings.hpp) bound to `f`:
// parsed with a setting's checks and shown in --help as mpiformer-train's are.
std::vector<mpf::FlagGroup> tokenize_rows(TokenizeFlags& f) {
  mpf::TokenizeOptions& o = f.o;
  constexpr double kShardMost = 2147483647;  // a shard's token count is an int32 in its header
  return {
      {"",
       {
           {"--input", "PATHS",
            "comma-separated files, directories and globs, in this order: a .jsonl file holds "
            "a document per line (a JSON object, see --text-field; blank lines skipped), any "
            "other file is one document; a directory gives its .txt and .jsonl files "
            "(recursively) and a glob its matches, sorted",
            mpf::flags::Setter([&o](const std::string& flag, const std::string& v) {
              o.inputs = split_commas(flag, v);
            })},
           {"--tokenizer", "FILE",
            "a Hugging Face tokenizer.json with a BPE model (GPT-2, Llama 2 and 3, Qwen2.5, "
            "Mistral, Gemma, ...; README.md lists the components)",
            &o.tokenizer},
           {"--output-dir", "DIR",
            "where the shards and manifest.json go (created if missing); existing shards of "
            "--name or a manifest there are never overwritten: an error. One run at a time "
            "writes there (DIR/mpiformer.lock, as --save's)",
            &o.output_dir},
           {"--name", "NAME",
            "shard names NAME_val_000000.bin, NAME_train_000001.bin, ... (default data)", &o.name},
           {"--doc-token", "TOKEN",
            "the token put before every document (default: the tokens the file's "
            "post_processor puts around a text, its BOS and/or EOS; with none, "
            "<|begin_of_text|> or <|endoftext|> before, as llm.c's data scripts do)",
            &o.doc_token},
           {"--parse-special", "",
            "special tokens written in a document are their ids (default: text, as llm.c's "
            "encode_ordinary; added tokens not special are always matched)",
            &o.parse_special},
           {"--text-field", "NAME", "the .jsonl field that holds the document (default text)",
            &o.text_field},
           {"--shard-tokens", "N",
            "tokens per training shard (default 100000000, at most 2147483647)", &o.shard_tokens, 1,
            nullptr, kShardMost},
           {"--val-tokens", "N",
            "a validation split: the documents holding the first N tokens go to "
            "NAME_val_000000.bin, the rest to training shards (default 0: none)",
            &o.val_tokens, 0, nullptr, kShardMost},
           {"--unit-bytes", "N",
            "text per work unit (default 8388608); units are dealt to the ranks in turn; a "
            "rank holds at most a few MB of a unit's tokens (more wait in a spool file in "
            "--output-dir, removed as it goes) and a MB of its text",
            &o.unit_bytes, 1},
           {"--unknown-bytes", "HOW",
            "a character (a byte, for byte-level BPE) the vocabulary has no token for, with "
            "no <0xNN> token either: drop (default, as Hugging Face: the model's unk_token if "
            "it names one, else left out), replace (unk_token, else the tokens of U+FFFD) or "
            "error (refuse the corpus, naming it)",
            &f.unknown_bytes, mpf::kNoMinimum, "drop,replace,error"},
           {"--invalid-utf8", "HOW",
            "bytes that are not UTF-8 (a Latin-1 file): replace (default, each ill-formed "
            "sequence read as U+FFFD, as Python's errors=\"replace\"), skip-document (leave "
            "the document out) or error (refuse, naming it)",
            &f.invalid_utf8, mpf::kNoMinimum, "replace,skip-document,error"},
       }}};
}

// Throws InputError naming the flag and the fix.
mpf::TokenizeOptions parse_tokenize_options(int argc, const char* const* argv) {
  using mpf::require;
  TokenizeFlags f;
  mpf::TokenizeOptions& o = f.o;
  mpf::flags::Table table;
  mpf::add_flag_rows(table, tokenize_rows(f), o.help);
  mpf::flags::parse(argc, argv, table, "mpiformer-tokenize");
  if (o.help) return o;
  o.unknown_bytes = f.unknown_bytes == "drop"      ? mpf::UnknownSymbols::kDrop
                    : f.unknown_bytes == "replace" ? mpf::UnknownSymbols::kReplace
                                                   : mpf::UnknownSymbols::kError;
  o.invalid_utf8 = f.invalid_utf8 == "replace"         ? mpf::InvalidUtf8::kReplace
                   : f.invalid_utf8 == "skip-document" ? mpf::InvalidUtf8::kSkipDocument
                                                       : mpf::InvalidUtf8::kError;
  require(!o.inputs.empty(), "no --input given; pass text files, .jsonl files or directories");
  require(!o.tokenizer.empty(), "no --tokenizer given; pass a Hugging Face tokenizer.json");
  require(!o.output_dir.empty(), "no --output-dir given; pass the directory for the shards");
  require(!o.name.empty() && o.name.find('/') == std::string::npos,
          "--name '" + o.name + "' must be a non-empty file name prefix without '/'");
  require(!o.text_field.empty(), "--text-field is empty; pass the .jsonl field's name");
  return o;
}

std::string tokenize_usage() {
  TokenizeFlags defaults;
  return R"(usage: mpiformer-tokenize --input PATHS --tokenizer tokenizer.json --output-dir DIR [flags]

Turns text into llm.c token shards for mpiformer-train --data. Runs on any number of MPI ranks;
the shards are the same bytes for every rank count. Flags take a value as `--flag V` or
`--flag=V`.

)" + mpf::flag_rows_help(tokenize_rows(defaults)) +
         mpf::help_entry("--help", "this text") + R"(
Shards are uint16 (llm.c's GPT-2 format) for vocabularies up to 65,536 tokens, else uint32
(llm.c's Llama 3 format). manifest.json lists the inputs, the tokenizer and its SHA-256, the
document token, and every shard with its token count and SHA-256. Bad input prints one "error:"
line and exits with status 2. The summary line and the manifest count what --unknown-bytes and
--invalid-utf8 dropped, replaced or skipped, the manifest document by document.

Letters, numbers and spaces (the pre-tokenizers' classes) are told apart with the Unicode
)" + std::string(mpf::unicode::version()) +
         R"( data of utf8proc and the characters Unicode 15.1 and 16.0 added (CJK Extension I,
the 16.0 scripts), as Hugging Face's tokenizers read them.
)";
}

}  // namespace

int main(int argc, char** argv) {
  mpf::Runtime runtime(&argc, &argv);
  const int rank = runtime.world_rank();
  const MPI_Comm world = MPI_COMM_WORLD;

  mpf::TokenizeOptions opts;
  if (!mpf::all_ranks_succeed(world, [&] { opts = parse_tokenize_options(argc, argv); })) {
    return runtime.finish(mpf::kExitBadInput);
  }
  if (opts.help) {
    if (rank == 0) std::fputs(tokenize_usage().c_str(), stdout);
    return runtime.finish(0);
  }
  mpf::DocumentEncoder encoder;
  std::string tokenizer_sha256;
  const bool ok =
      mpf::all_ranks_succeed(
          world,
          [&] {
            encoder = mpf::load_document_encoder(opts.tokenizer, opts.doc_token, opts.parse_special,
                                                 opts.unknown_bytes, opts.invalid_utf8);
            if (rank == 0) {
              tokenizer_sha256 = mpf::sha256_of_file(opts.tokenizer, "tokenizer " + opts.tokenizer);
            }
          }) &&
      mpf::all_ranks_succeed(world,
                             [&] { mpf::run_tokenize(opts, encoder, tokenizer_sha256, world); });
  return runtime.finish(ok ? 0 : mpf::kExitBadInput);
}
