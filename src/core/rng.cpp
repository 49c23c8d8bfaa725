#include "core/rng.hpp"

namespace mpf::rng {

uint64_t stream_of(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace mpf::rng
