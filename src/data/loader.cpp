#include "data/loader.hpp"

#include <glob.h>

#include <algorithm>

#include "core/error.hpp"
#include "data/builtin_corpus.hpp"

namespace mpf {
namespace {

constexpr const char* kBytesPrefix = "bytes:";

bool has_glob_chars(const std::string& s) {
  return s.find_first_of("*?[") != std::string::npos;
}

// Expands one glob; glob(3) returns the matches already sorted.
std::vector<std::string> expand_glob(const std::string& pattern) {
  glob_t g{};
  const int rc = glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> paths;
  if (rc == 0) paths.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  globfree(&g);
  require(rc != GLOB_NOSPACE && rc != GLOB_ABORTED,
          "data pattern " + pattern + ": glob failed (" +
              (rc == GLOB_NOSPACE ? "out of memory" : "unreadable directory") +
              "); check the directory");
  require(!paths.empty(),
          "data pattern " + pattern + ": glob matched no files; check the path and the wildcard");
  return paths;
}

// Entries of a comma-separated list keep the user's order; a glob entry contributes its matches
// in sorted order.
std::vector<std::string> resolve(const std::string& pattern) {
  require(!pattern.empty(), "data pattern is empty; pass a file, a comma-separated list or a glob");
  std::vector<std::string> paths;
  size_t begin = 0;
  while (true) {
    const size_t comma = pattern.find(',', begin);
    std::string entry = pattern.substr(begin, comma - begin);
    require(!entry.empty(),
            "data pattern " + pattern + ": has an empty entry; separate paths with single commas");
    // bytes:ENTRY: the files' raw bytes as tokens, whatever they hold.
    const std::string bytes = entry.rfind(kBytesPrefix, 0) == 0 ? kBytesPrefix : "";
    entry = entry.substr(bytes.size());
    if (has_glob_chars(entry)) {
      for (auto& p : expand_glob(entry)) paths.push_back(bytes + p);
    } else {
      paths.push_back(bytes + entry);  // a missing file is reported by TokenStream, with why
    }
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return paths;
}

}  // namespace

DataLoader::DataLoader(const std::string& pattern, int B, int T, int vocab) : B_(B), T_(T) {
  require(B > 0 && T > 0, "batch " + std::to_string(B) + " x sequence length " + std::to_string(T) +
                              " is not positive; pass positive --batch and " + "--seq-len");
  const std::string builtin = "builtin:";
  if (pattern.compare(0, builtin.size(), builtin) == 0) {
    const std::string split = pattern.substr(builtin.size());
    require(split == "train" || split == "val", "data pattern " + pattern +
                                                    ": unknown built-in corpus; use builtin:train "
                                                    "or builtin:val");
    files_.emplace_back(pattern, builtin_corpus(split), vocab);
  } else {
    for (const auto& path : resolve(pattern)) {
      const bool raw = path.rfind(kBytesPrefix, 0) == 0;
      files_.emplace_back(raw ? path.substr(std::string(kBytesPrefix).size()) : path, vocab, raw);
    }
  }
  // Checked per file: a file shorter than one batch would be skipped forever (llm.c's rule).
  const int64_t needed = int64_t(B) * T + 1;
  for (const auto& f : files_) {
    require(f.size() >= needed, "data file " + f.path() +
                                    ": needs at least B*T+1 = " + std::to_string(needed) +
                                    " tokens, has " + std::to_string(f.size()) +
                                    "; use a smaller --batch/--seq-len or more data");
  }
}

void DataLoader::next_batch(int row_begin, int rows, int32_t* inputs, int32_t* targets) {
  if (row_begin < 0 || rows < 0 || row_begin + rows > B_) {
    MPF_FATAL("DataLoader::next_batch: rows [" + std::to_string(row_begin) + ", " +
              std::to_string(row_begin + rows) + ") outside the batch of " + std::to_string(B_));
  }
  const int64_t span = int64_t(B_) * T_;
  // Move on when this batch (plus its last target) would run past the end of the file.
  if (pos_ + span + 1 > files_[file_].size()) {
    file_ = (file_ + 1) % files_.size();
    pos_ = 0;
  }
  const TokenStream& f = files_[file_];
  const int64_t start = pos_ + int64_t(row_begin) * T_;
  const int64_t count = int64_t(rows) * T_;
  f.read(start, count, inputs);
  f.read(start + 1, count, targets);
  pos_ += span;
}

void DataLoader::reset() {
  file_ = 0;
  pos_ = 0;
}

void DataLoader::seek(const DataPosition& p) {
  require(p.file >= 0 && p.file < int64_t(files_.size()) && p.token >= 0 &&
              p.token <= files_[size_t(p.file)].size(),
          "the checkpoint's data position (file " + std::to_string(p.file) + ", token " +
              std::to_string(p.token) + ") lies outside the data given (" +
              std::to_string(files_.size()) + " file(s), the first " + files_[0].path() +
              "); pass the --data the checkpoint's run trained on");
  file_ = size_t(p.file);
  pos_ = p.token;
}

int64_t DataLoader::total_tokens() const {
  int64_t total = 0;
  for (const auto& f : files_) total += f.size();
  return total;
}

}  // namespace mpf
