#include "data/corpus_reader.hpp"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "core/error.hpp"
#include "core/text_affixes.hpp"
#include "io/input_file.hpp"
#include "io/json.hpp"

namespace mpf {
namespace {

namespace fs = std::filesystem;

CorpusFile corpus_file(const std::string& path) {
  struct stat st;
  require(stat(path.c_str(), &st) == 0,
          "input " + path + ": cannot open (" + errno_text() + "); check the path");
  require(S_ISREG(st.st_mode),
          "input " + path + ": not a regular file; pass text files, .jsonl files or directories");
  return {path, ends_with(path, ".jsonl") ? CorpusFormat::kJsonl : CorpusFormat::kText,
          int64_t(st.st_size)};
}

// Appends the .txt and .jsonl files under `dir`, following links, to `paths`. Nothing is dropped
// silently: a link to nothing, a link back into the directories above it (a loop), or a corpus
// file that is not a regular one is an error naming it.
void walk(const std::string& dir, std::vector<std::pair<dev_t, ino_t>>& above,
          std::vector<std::string>& paths) {
  struct stat st;
  require(stat(dir.c_str(), &st) == 0,
          "input " + dir + ": cannot list (" + errno_text() + "); check the directory");
  for (const auto& [dev, ino] : above) {
    require(dev != st.st_dev || ino != st.st_ino,
            "input " + dir +
                ": leads back to a directory above it (a loop of links); remove "
                "the link or pass the directories it should hold");
  }
  above.push_back({st.st_dev, st.st_ino});
  std::error_code ec;
  std::vector<std::string> entries;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    entries.push_back(it->path().string());
  }
  require(!ec, "input " + dir + ": cannot list (" + ec.message() + "); check the directory");
  for (const std::string& p : entries) {
    struct stat target;
    if (stat(p.c_str(), &target) != 0) {
      struct stat link;
      const bool dangling = lstat(p.c_str(), &link) == 0 && S_ISLNK(link.st_mode);
      throw InputError("input " + p + ": " +
                       (dangling ? "a link to nothing; fix or remove the link"
                                 : "cannot open (" + errno_text() + "); check it"));
    }
    if (S_ISDIR(target.st_mode)) {
      walk(p, above, paths);
    } else if (ends_with(p, ".txt") || ends_with(p, ".jsonl")) {
      require(S_ISREG(target.st_mode), "input " + p +
                                           ": not a regular file (a FIFO, a socket or a device); "
                                           "remove it or pass the files one by one");
      paths.push_back(p);
    }
  }
  above.pop_back();
}

// A directory's corpus files: .txt and .jsonl, at any depth, sorted by path.
std::vector<CorpusFile> directory_files(const std::string& dir) {
  std::vector<std::string> paths;
  std::vector<std::pair<dev_t, ino_t>> above;
  walk(dir, above, paths);
  require(!paths.empty(), "input " + dir +
                              ": the directory holds no .txt or .jsonl file; pass the files or "
                              "a directory that holds them");
  std::sort(paths.begin(), paths.end());
  std::vector<CorpusFile> files;
  for (const auto& p : paths) files.push_back(corpus_file(p));
  return files;
}

std::vector<std::string> expand_input_glob(const std::string& pattern) {
  glob_t g{};
  const int rc = glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> paths;
  if (rc == 0) paths.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  globfree(&g);
  require(!paths.empty(),
          "input " + pattern + ": the glob matched no files; check the path and the wildcard");
  return paths;
}

// The line number (from 1) of the line starting at byte `at`: counted only for a message.
int64_t line_number(const std::string& path, int64_t at) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) return 0;
  int64_t line = 1;
  std::vector<char> chunk(1 << 20);
  for (int64_t done = 0; done < at;) {
    const size_t want = size_t(std::min<int64_t>(at - done, int64_t(chunk.size())));
    const size_t got = std::fread(chunk.data(), 1, want, f.get());
    if (got == 0) break;
    line += std::count(chunk.data(), chunk.data() + got, '\n');
    done += int64_t(got);
  }
  return line;
}

bool blank(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// One .jsonl line's document; the message of a bad line is completed with its file:line.
std::string_view jsonl_text(const json::Value& v, const std::string& field) {
  require(v.is_object(), std::string("the line is ") + json::kind_name(v.kind()) +
                             ", not an object; each line must be one JSON object with a \"" +
                             field + "\" string");
  const json::Value* text = v.find(field);
  require(text != nullptr, "no \"" + field +
                               "\" field; pass --text-field with the name of the field that "
                               "holds the document");
  require(text->is_string(), "the \"" + field + "\" field is " + json::kind_name(text->kind()) +
                                 ", not a string; fix the line or pass another --text-field");
  return text->string();
}

// getline(3)'s buffer, freed on every way out.
struct LineBuffer {
  char* data = nullptr;
  size_t capacity = 0;
  ~LineBuffer() { std::free(data); }
};

void read_jsonl(const CorpusFile& file, int64_t begin, int64_t end, const std::string& field,
                const DocumentChunks& document, const std::function<void(int64_t)>& start) {
  const std::string what = "input " + file.path;
  int64_t bytes = 0;
  File f = open_for_reading(file.path, what, "a text or .jsonl file", bytes);
  LineBuffer buf;
  // A range starting inside a line leaves that line to the range it started in.
  int64_t pos = begin;
  if (begin > 0) {
    require(fseeko(f.get(), begin - 1, SEEK_SET) == 0,
            what + ": cannot seek (" + errno_text() + ")");
    const ssize_t n = getline(&buf.data, &buf.capacity, f.get());
    pos = n < 0 ? end : begin - 1 + n;
  }
  while (pos < end) {
    const ssize_t n = getline(&buf.data, &buf.capacity, f.get());
    if (n < 0) {
      require(!std::ferror(f.get()), what + ": read failed (" + errno_text() + ")");
      break;
    }
    const std::string_view line(buf.data, size_t(n));
    if (!blank(line)) {
      json::Value v;  // holds the text
      std::string_view text;
      try {
        // "line: invalid JSON at line 1, column C: ..." keeps what follows "line: ".
        v = json::parse(line, "line");
        text = jsonl_text(v, field);
      } catch (const InputError& e) {
        std::string why = e.what();
        if (why.rfind("line: ", 0) == 0)
          why = why.substr(6) + "; each line must be one JSON object";
        throw InputError(file.path + ":" + std::to_string(line_number(file.path, pos)) + ": " +
                         why);
      }
      start(pos);
      try {
        // A long line's text goes on in chunks, as a text file's does.
        size_t at = 0;
        for (; text.size() - at > size_t(kReadChunk); at += size_t(kReadChunk)) {
          document(text.substr(at, size_t(kReadChunk)), false);
        }
        document(text.substr(at), true);
      } catch (const InputError& e) {
        throw InputError(file.path + ":" + std::to_string(line_number(file.path, pos)) + ": " +
                         e.what());
      }
    }
    pos += n;
  }
}

// A text file is one document, read a chunk at a time.
void read_text(const CorpusFile& file, const DocumentChunks& document) {
  const std::string what = "input " + file.path;
  int64_t bytes = 0;
  File f = open_for_reading(file.path, what, "a text file", bytes);
  std::string chunk;
  int64_t done = 0;
  do {
    const int64_t take = std::min(bytes - done, kReadChunk);
    chunk.resize(size_t(take));
    if (take > 0) read_exact(f.get(), chunk.data(), size_t(take), what);
    done += take;
    try {
      document(chunk, done == bytes);
    } catch (const InputError& e) {
      throw InputError(what + ": " + e.what());
    }
  } while (done < bytes);
}

}  // namespace

std::vector<CorpusFile> resolve_corpus(const std::vector<std::string>& inputs) {
  require(!inputs.empty(), "no inputs; pass --input with text files, .jsonl files or directories");
  std::vector<CorpusFile> files;
  for (const auto& input : inputs) {
    require(!input.empty(), "an input is empty; separate paths with single commas");
    struct stat st;
    if (input.find_first_of("*?[") != std::string::npos && stat(input.c_str(), &st) != 0) {
      for (const auto& p : expand_input_glob(input)) files.push_back(corpus_file(p));
    } else if (stat(input.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      for (auto& f : directory_files(input)) files.push_back(std::move(f));
    } else {
      files.push_back(corpus_file(input));
    }
  }
  return files;
}

std::vector<CorpusUnit> plan_units(const std::vector<CorpusFile>& files, int64_t unit_bytes) {
  std::vector<CorpusUnit> units;
  CorpusUnit open;
  int64_t open_bytes = 0;
  auto add = [&](CorpusPiece p) {
    open.push_back(p);
    open_bytes += p.end - p.begin;
    if (open_bytes >= unit_bytes) {
      units.push_back(std::move(open));
      open.clear();
      open_bytes = 0;
    }
  };
  for (int i = 0; i < int(files.size()); ++i) {
    const CorpusFile& f = files[size_t(i)];
    if (f.format == CorpusFormat::kText) {
      add({i, 0, f.bytes});  // one document: never cut
      continue;
    }
    // Cut only where a unit fills up: a file's pieces are in different units.
    for (int64_t at = 0; at < f.bytes;) {
      const int64_t take = std::min(f.bytes - at, unit_bytes - open_bytes);
      add({i, at, at + take});
      at += take;
    }
  }
  if (!open.empty()) units.push_back(std::move(open));
  return units;
}

void read_unit(const std::vector<CorpusFile>& files, const CorpusUnit& unit,
               const std::string& text_field, const DocumentChunks& document,
               const DocumentStart& start) {
  for (const CorpusPiece& p : unit) {
    const CorpusFile& f = files[size_t(p.file)];
    const auto at = [&](int64_t byte) {
      if (start) start(p.file, byte);
    };
    if (f.format == CorpusFormat::kText) {
      at(0);
      read_text(f, document);
    } else {
      read_jsonl(f, p.begin, p.end, text_field, document, at);
    }
  }
}

}  // namespace mpf
