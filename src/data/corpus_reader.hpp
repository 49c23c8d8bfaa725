// A text corpus as documents in one global order: the inputs as given (a directory's .txt and
// .jsonl files and a glob's matches sorted by path), a .jsonl file's lines in order. A .jsonl
// file holds a document per line (a JSON object whose text field is the document; blank lines
// are skipped); any other file is one document, its bytes as they are.
//
// The corpus is cut into work units of about `unit_bytes` of text, each whole documents: runs of
// small files together, a large .jsonl file in byte ranges (a range owns the lines that start in
// it), a large text file alone. Any rank reads any unit without reading what comes before it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace mpf {

enum class CorpusFormat { kText, kJsonl };

struct CorpusFile {
  std::string path;
  CorpusFormat format = CorpusFormat::kText;
  int64_t bytes = 0;
};

// Files, directories (their .txt and .jsonl files, recursively, sorted) and globs (matches
// sorted), in the order given. Throws InputError naming an input that is missing, matches
// nothing or holds no .txt/.jsonl file.
std::vector<CorpusFile> resolve_corpus(const std::vector<std::string>& inputs);

// A byte range [begin, end) of one file.
struct CorpusPiece {
  int file = 0;
  int64_t begin = 0, end = 0;
};
using CorpusUnit = std::vector<CorpusPiece>;

// The units, in corpus order; a pure function of the file list.
std::vector<CorpusUnit> plan_units(const std::vector<CorpusFile>& files, int64_t unit_bytes);

// A document's text in one or more consecutive chunks: `last` marks its end (an empty document
// is one empty chunk). A text file's document comes a chunk of kReadChunk bytes at a time.
using DocumentChunks = std::function<void(std::string_view chunk, bool last)>;
constexpr int64_t kReadChunk = int64_t(1) << 20;

// Calls document(...) for each document of the unit, in order. Throws InputError naming
// file:line for a .jsonl line that is not a JSON object with a string `text_field`; an
// InputError from `document` comes back with the file (and line) put before its message.
// `start`, if given, is called before each document with its file (an index into `files`) and
// the byte its line starts at (0 for a text file), a place to name it by.
using DocumentStart = std::function<void(int file, int64_t byte)>;
void read_unit(const std::vector<CorpusFile>& files, const CorpusUnit& unit,
               const std::string& text_field, const DocumentChunks& document,
               const DocumentStart& start = nullptr);

}  // namespace mpf
