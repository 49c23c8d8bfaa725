// Whether a string starts or ends with another: file names' suffixes (.bin, .partial, .jsonl)
// and prefixes, said once for every room that asks.
#pragma once

#include <string>

namespace mpf {

inline bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace mpf
