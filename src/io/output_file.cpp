#include "io/output_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.hpp"

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
  require(access(dir.c_str(), W_OK | X_OK) == 0, label + ": directory " + dir +
                                                     " is not writable (" + std::strerror(errno) +
                                                     "); choose another output path");
}

PendingFile::PendingFile(std::string path)
    : path_(std::move(path)), tmp_(path_ + ".partial-" + std::to_string(getpid())) {
  file_ = std::fopen(tmp_.c_str(), "wbx");
  if (!file_) fail("cannot create " + tmp_);
}

PendingFile::~PendingFile() {
  if (file_) {
    std::fclose(file_);
    std::remove(tmp_.c_str());
  }
}

void PendingFile::fail(const std::string& what) {
  if (error_.empty()) error_ = path_ + ": " + what + " (" + std::strerror(errno) + ")";
}

void PendingFile::write(const void* data, size_t bytes) {
  if (file_ && error_.empty() && std::fwrite(data, 1, bytes, file_) != bytes) fail("write failed");
}

std::string PendingFile::commit() {
  if (!file_) return error_;
  if (error_.empty() && (std::fflush(file_) != 0 || fsync(fileno(file_)) != 0)) {
    fail("write failed");
  }
  if (std::fclose(file_) != 0) fail("write failed");
  file_ = nullptr;
  if (error_.empty() && rename_no_replace(tmp_, path_) != 0)
    fail("cannot rename " + tmp_ + " into place");
  if (!error_.empty()) std::remove(tmp_.c_str());
  return error_;
}

}  // namespace mpf
