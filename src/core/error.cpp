#include "core/error.hpp"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <vector>

namespace mpf {

bool any_rank_failed(MPI_Comm comm, const std::string& local_error) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // The lowest failing rank speaks, so a failure seen by all ranks prints once, from rank 0.
  int mine = local_error.empty() ? size : rank, first = size;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == size) return false;
  if (rank == first) {
    std::fputs(error_line(local_error).c_str(), stderr);  // not %s: a NUL byte would cut it
    std::fflush(stderr);
  }
  return true;
}

std::string error_line(const std::string& message) {
  std::string out = "error: ";
  for (const char ch : message) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += ch;  // UTF-8 bytes (>= 0x80) pass: a path may be spelled in any script
    }
  }
  return out + "\n";
}

void print_error(const char* format, ...) {
  va_list args, again;
  va_start(args, format);
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::vector<char> text(n > 0 ? size_t(n) + 1 : 1, '\0');
  if (n > 0) std::vsnprintf(text.data(), text.size(), format, again);
  va_end(again);
  std::fputs(error_line(text.data()).c_str(), stderr);
  std::fflush(stderr);
}

void fatal(const char* file, int line, const std::string& message) {
  // MPI_COMM_SELF: library code never names the world (docs/design.md, invariant 4). MPICH's
  // launcher ends the whole job when one process aborts, so ranks blocked in a collective do not
  // hang.
  int initialized = 0;
  MPI_Initialized(&initialized);
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  std::fprintf(stderr, "fatal [%s pid %d] %s:%d: %s\n", host, int(getpid()), file, line,
               message.c_str());
  std::fflush(stderr);
  if (initialized) MPI_Abort(MPI_COMM_SELF, 1);
  std::abort();
}

}  // namespace mpf
