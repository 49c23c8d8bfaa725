// SHA-256 (FIPS 180-4), for the checksums a manifest records: files a user can check with
// `sha256sum`. Fed in pieces, so a large file is hashed as it streams.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mpf {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // The digest as 64 lowercase hex digits. Ends the hash: update() after it is not allowed.
  std::string hex();

 private:
  void block(const unsigned char* p);

  uint32_t h_[8];
  unsigned char buffer_[64];
  size_t buffered_ = 0;
  uint64_t length_ = 0;  // bytes hashed
};

// The SHA-256 of a file's bytes, read in pieces; throws InputError naming `what` if it cannot be
// read.
std::string sha256_of_file(const std::string& path, const std::string& what);

}  // namespace mpf
