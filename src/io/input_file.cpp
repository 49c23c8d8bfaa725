#include "io/input_file.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace mpf {

std::string errno_text() {
  return std::strerror(errno);
}

File open_for_reading(const std::string& path, const std::string& what, const std::string& instead,
                      int64_t& bytes) {
  File f(std::fopen(path.c_str(), "rb"));
  require(f != nullptr,
          what + ": cannot open (" + errno_text() + "); check the path and its permissions");
  struct stat st;
  require(fstat(fileno(f.get()), &st) == 0 && S_ISREG(st.st_mode),
          what + ": not a regular file; pass " + instead);
  bytes = st.st_size;
  return f;
}

void read_exact(std::FILE* f, void* dst, size_t bytes, const std::string& what) {
  require(std::fread(dst, 1, bytes, f) == bytes,
          what + ": read failed (" + (std::ferror(f) ? errno_text() : "end of file") +
              "); the file changed while being read or is unreadable");
}

}  // namespace mpf
