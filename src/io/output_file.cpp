#include "io/output_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"

#include <vector>

namespace mpf {

std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

bool path_exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;  // a dangling link counts: it names something
}

bool is_directory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

int rename_no_replace(const std::string& from, const std::string& to) {
#ifdef RENAME_NOREPLACE
  if (renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS) return -1;
#endif
  if (path_exists(to)) {
    errno = EEXIST;
    return -1;
  }
  return std::rename(from.c_str(), to.c_str());
}

void check_new_output(const std::string& path, const std::string& label) {
  require(!path.empty(), label + ": the path is empty; pass an output file name");
  require(!path_exists(path), label + ": already exists; remove it or choose another output path");
  const std::string dir = directory_of(path);
  struct stat st;
  require(stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode),
          label + ": directory " + dir + " does not exist; create it first");
  // errno read right after access(): evaluated in one call with it, it could be a stale one.
  const bool writable = access(dir.c_str(), W_OK | X_OK) == 0;
  const std::string why = writable ? "" : std::strerror(errno);
  require(writable, label + ": directory " + dir + " is not writable (" + why +
                        "); choose another output path");
}

std::string resolved_path(const std::string& path) {
  std::string absolute = path;
  if (absolute.empty() || absolute[0] != '/') {
    char cwd[4096];
    absolute = std::string(getcwd(cwd, sizeof cwd) ? cwd : ".") + "/" + absolute;
  }
  // Components, "." and ".." folded lexically.
  std::vector<std::string> parts;
  for (size_t at = 0; at <= absolute.size();) {
    const size_t slash = absolute.find('/', at);
    const std::string part =
        absolute.substr(at, slash == std::string::npos ? std::string::npos : slash - at);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    if (slash == std::string::npos) break;
    at = slash + 1;
  }
  // The deepest existing prefix through realpath (links), the rest as it is.
  for (size_t keep = parts.size();; --keep) {
    std::string prefix = "/";
    for (size_t i = 0; i < keep; ++i) prefix += (i ? "/" : "") + parts[i];
    char real[PATH_MAX];
    if (realpath(prefix.c_str(), real)) {
      std::string out = real;
      for (size_t i = keep; i < parts.size(); ++i) out += (out == "/" ? "" : "/") + parts[i];
      return out;
    }
    if (keep == 0) break;
  }
  std::string out;
  for (const std::string& p : parts) out += "/" + p;
  return out.empty() ? "/" : out;
}

bool path_within(const std::string& path, const std::string& dir) {
  const std::string p = resolved_path(path), d = resolved_path(dir);
  return p == d || (p.size() > d.size() && p.compare(0, d.size(), d) == 0 &&
                    (d == "/" || p[d.size()] == '/'));
}

void check_outputs_apart(const std::vector<NamedOutput>& outputs, const std::string& save_dir) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const NamedOutput& a = outputs[i];
    if (a.path.empty()) continue;
    require(save_dir.empty() || !path_within(a.path, save_dir),
            a.flag + " " + a.path + " lies inside --save " + save_dir +
                ", whose checkpoints (step_*, latest) and lock could take its name; write it "
                "outside the checkpoint directory");
    for (size_t j = i + 1; j < outputs.size(); ++j) {
      const NamedOutput& b = outputs[j];
      if (b.path.empty()) continue;
      const bool same = resolved_path(a.path) == resolved_path(b.path);
      require(!same && !path_within(a.path, b.path) && !path_within(b.path, a.path),
              a.flag + " " + a.path + " and " + b.flag + " " + b.path +
                  (same ? " are the same path" : ": one lies inside the other") +
                  "; give each its own");
    }
  }
}

void check_outputs_not_inputs(const std::vector<NamedOutput>& outputs,
                              const std::vector<NamedOutput>& inputs) {
  for (const NamedOutput& out : outputs) {
    struct stat o;
    if (out.path.empty()) continue;
    const bool exists = stat(out.path.c_str(), &o) == 0;
    for (const NamedOutput& in : inputs) {
      struct stat i;
      if (in.path.empty()) continue;
      const bool same = exists && stat(in.path.c_str(), &i) == 0
                            ? o.st_dev == i.st_dev && o.st_ino == i.st_ino
                            : resolved_path(out.path) == resolved_path(in.path);
      require(!same, out.flag + " " + out.path + " is the file " + in.flag + " " + in.path +
                         " reads, and a run never writes over its input; choose another file");
    }
  }
}

PendingFile::PendingFile(std::string path)
    : path_(std::move(path)), tmp_(path_ + ".partial-" + std::to_string(getpid())) {
  file_ = std::fopen(tmp_.c_str(), "wbx");
  if (!file_) fail("cannot create " + tmp_);
  pending_ = file_ != nullptr;
}

PendingFile::~PendingFile() {
  if (file_) std::fclose(file_);
  if (pending_) std::remove(tmp_.c_str());
}

void PendingFile::fail(const std::string& what) {
  if (error_.empty()) error_ = path_ + ": " + what + " (" + std::strerror(errno) + ")";
}

void PendingFile::write(const void* data, size_t bytes) {
  if (file_ && error_.empty() && std::fwrite(data, 1, bytes, file_) != bytes) fail("write failed");
}

std::string PendingFile::sync() {
  if (!file_) return error_;
  if (error_.empty() && (std::fflush(file_) != 0 || fsync(fileno(file_)) != 0)) {
    fail("write failed");
  }
  if (std::fclose(file_) != 0) fail("write failed");
  file_ = nullptr;
  return error_;
}

std::string PendingFile::commit() {
  sync();
  if (pending_ && error_.empty() && rename_no_replace(tmp_, path_) != 0)
    fail("cannot rename " + tmp_ + " into place");
  if (pending_ && !error_.empty()) std::remove(tmp_.c_str());
  pending_ = false;
  return error_;
}

}  // namespace mpf
