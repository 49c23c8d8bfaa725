// Reading a user's binary file, where every failure is an InputError that names the file ("data
// file x.bin", "checkpoint model.bin": `what`) and says what to do.
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

// Reads exactly `bytes` or throws (a short read means the file changed or is unreadable).
void read_exact(std::FILE* f, void* dst, size_t bytes, const std::string& what);

}  // namespace mpf
