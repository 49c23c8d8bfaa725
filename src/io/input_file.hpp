// Reading a user's file, where every failure is an InputError that names the file ("data file
// x.bin", "checkpoint model.bin": `what`) and says what to do. Every input of the programs opens
// through here, so none can hang a job: the file's type is checked before anything reads it (a
// FIFO, a socket, a device or a directory is refused with `instead`, what to pass), and the open
// itself does not block (a FIFO's open(2) would wait for a writer forever, holding every rank and
// the job's allocation).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace mpf {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// strerror(errno), for messages.
std::string errno_text();

// Opens a regular file for reading and returns its size in `bytes`. `instead`: what to pass when
// `path` is not a regular file (a directory, a device).
File open_for_reading(const std::string& path, const std::string& what, const std::string& instead,
                      int64_t& bytes);
// The same as a descriptor (O_CLOEXEC; the caller closes it).
int open_input(const std::string& path, const std::string& what, const std::string& instead,
               int64_t& bytes);
// The whole of a small file (a config.json, a state file, a lock), which must be at most `limit`
// bytes (InputError naming it as corrupt past that).
std::string read_input_text(const std::string& path, const std::string& what,
                            const std::string& instead, int64_t limit);
// InputError unless `path` is a regular file, for a file another library opens (MPI-IO's
// MPI_File_open would block on a FIFO too); it opens nothing.
void require_regular_file(const std::string& path, const std::string& what,
                          const std::string& instead);

// Reads exactly `bytes` or throws (a short read means the file changed or is unreadable).
void read_exact(std::FILE* f, void* dst, size_t bytes, const std::string& what);

}  // namespace mpf
