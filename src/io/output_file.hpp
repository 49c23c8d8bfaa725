// Files the program writes for the user (checkpoints, traces): never over something that exists,
// and found unwritable at start-up rather than at the end of a run.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

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

// `path` as the file system will take it: absolute, its deepest existing ancestor resolved
// (symbolic links, "." and ".."), the rest appended with "." and ".." folded and no trailing "/".
// Two names of one file ("out/./x", "out/x/", a link to out) resolve alike.
std::string resolved_path(const std::string& path);
// Whether `path` is `dir` or lies inside it, both resolved.
bool path_within(const std::string& path, const std::string& dir);

// One output of a run: its flag and the path given.
struct NamedOutput {
  std::string flag, path;
};
// InputError at start-up, naming both flags, if two of `outputs` (empty paths skipped) are one
// file, or one lies inside another's directory or inside `save_dir` (a --save directory, whose
// step_*, latest and lock are the checkpoints' own names); found later, a collision would cost
// the run's output.
void check_outputs_apart(const std::vector<NamedOutput>& outputs, const std::string& save_dir);
// InputError at start-up, naming both flags, if one of `outputs` is the file one of `inputs` (a
// flag and a file it names, e.g. each of --data's) reads: the same device and inode (a hard link,
// a symbolic link, another spelling) or the same resolved path. An output that appends (--metrics)
// would otherwise drop or rewrite the run's own input. Empty paths are skipped.
void check_outputs_not_inputs(const std::vector<NamedOutput>& outputs,
                              const std::vector<NamedOutput>& inputs);

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
  // Syncs and closes the temporary, which stays until commit() or destruction; returns "" or what
  // went wrong. For a file that must be complete on disk before other files move (a manifest).
  std::string sync();
  // Syncs (if not yet), closes and renames into place; returns "" or what went wrong (the
  // temporary removed).
  std::string commit();

 private:
  void fail(const std::string& what);

  std::string path_, tmp_;
  std::FILE* file_ = nullptr;
  bool pending_ = false;  // the temporary exists, not yet renamed or removed
  std::string error_;
};

}  // namespace mpf
