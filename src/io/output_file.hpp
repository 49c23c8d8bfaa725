// Files the program writes for the user (checkpoints, traces): never over something that exists,
// and found unwritable at start-up rather than at the end of a run.
#pragma once

#include <cstdio>
#include <string>

namespace mpf {

bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
// The directory holding `path`: "." for a bare name, "/" for one at the root.
std::string directory_of(const std::string& path);

// rename(2) that never replaces an existing `to` (RENAME_NOREPLACE, or a check where the file
// system lacks it). Returns 0, or -1 with errno set (EEXIST if `to` exists).
int rename_no_replace(const std::string& from, const std::string& to);

// Throws InputError, naming `label` (e.g. "checkpoint out.bin", "--trace t.json"), if `path`
// exists or its directory is missing or not writable.
void check_new_output(const std::string& path, const std::string& label);

// A file written under a temporary name beside `path` (path.partial-<pid>) and renamed into place
// only when complete, never over an existing file; a run that stops early leaves nothing at
// `path`. Failures are kept, not thrown (the caller may be inside collectives): commit() returns
// the first. Destroyed uncommitted, it removes the temporary.
class PendingFile {
 public:
  explicit PendingFile(std::string path);
  ~PendingFile();
  PendingFile(const PendingFile&) = delete;
  PendingFile& operator=(const PendingFile&) = delete;

  void write(const void* data, size_t bytes);
  // Syncs, closes and renames into place; returns "" or what went wrong (the temporary removed).
  std::string commit();

 private:
  void fail(const std::string& what);

  std::string path_, tmp_;
  std::FILE* file_ = nullptr;
  std::string error_;
};

}  // namespace mpf
