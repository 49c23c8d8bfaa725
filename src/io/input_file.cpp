#include "io/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace mpf {

std::string errno_text() {
  return std::strerror(errno);
}

namespace {
const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "another kind of file";
}

void require_regular(const struct stat& st, const std::string& what, const std::string& instead) {
  require(S_ISREG(st.st_mode),
          what + ": is " + kind_of(st.st_mode) + ", not a regular file; pass " + instead);
}
}  // namespace

void require_regular_file(const std::string& path, const std::string& what,
                          const std::string& instead) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    const std::string why = errno_text();  // before anything else can change errno
    throw InputError(what + ": cannot open (" + why + "); check the path and its permissions");
  }
  require_regular(st, what, instead);
}

int open_input(const std::string& path, const std::string& what, const std::string& instead,
               int64_t& bytes) {
  // The type first (stat opens nothing); then a non-blocking open, should the path have been
  // replaced by a FIFO meanwhile, checked again on the descriptor; then blocking reads.
  require_regular_file(path, what, instead);
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const std::string why = errno_text();
    throw InputError(what + ": cannot open (" + why + "); check the path and its permissions");
  }
  struct stat st;
  const bool known = fstat(fd, &st) == 0;
  if (!known || !S_ISREG(st.st_mode)) {
    const std::string why = errno_text();
    close(fd);
    require(known, what + ": cannot open (" + why + "); check the path and its permissions");
    require_regular(st, what, instead);
  }
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  bytes = st.st_size;
  return fd;
}

File open_for_reading(const std::string& path, const std::string& what, const std::string& instead,
                      int64_t& bytes) {
  const int fd = open_input(path, what, instead, bytes);
  File f(fdopen(fd, "rb"));
  if (!f) {
    const std::string why = errno_text();
    close(fd);
    throw InputError(what + ": cannot open (" + why + ")");
  }
  return f;
}

std::string read_input_text(const std::string& path, const std::string& what,
                            const std::string& instead, int64_t limit) {
  int64_t bytes = 0;
  const File f = open_for_reading(path, what, instead, bytes);
  require(bytes <= limit, what + ": " + std::to_string(bytes) +
                              " bytes, implausibly large (at most " + std::to_string(limit) +
                              " expected); the file is corrupt or not " + instead);
  std::string text(size_t(bytes), '\0');
  read_exact(f.get(), text.data(), text.size(), what);
  return text;
}

void read_exact(std::FILE* f, void* dst, size_t bytes, const std::string& what) {
  require(std::fread(dst, 1, bytes, f) == bytes,
          what + ": read failed (" + (std::ferror(f) ? errno_text() : "end of file") +
              "); the file changed while being read or is unreadable");
}

}  // namespace mpf
