#include "data/tokenize_options.hpp"

namespace mpf {

std::string unknown_bytes_name(UnknownSymbols how) {
  switch (how) {
    case UnknownSymbols::kDrop:
      return "drop";
    case UnknownSymbols::kReplace:
      return "replace";
    case UnknownSymbols::kError:
      return "error";
  }
  return "";
}

std::string invalid_utf8_name(InvalidUtf8 how) {
  switch (how) {
    case InvalidUtf8::kReplace:
      return "replace";
    case InvalidUtf8::kSkipDocument:
      return "skip-document";
    case InvalidUtf8::kError:
      return "error";
  }
  return "";
}

}  // namespace mpf
