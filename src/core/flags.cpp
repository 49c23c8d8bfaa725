#include "core/flags.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.hpp"

namespace mpf::flags {

std::set<std::string> parse(int argc, const char* const* argv, const Table& table,
                            const std::string& program, const std::string& ignore_prefix) {
  std::set<std::string> given;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    if (const auto sw = table.switches.find(arg); sw != table.switches.end()) {
      // A repeated flag is an error, not "the last one wins": which of the two the user meant
      // (a job script's defaults, then an edit appended) cannot be known, and guessing is silent.
      require(given.insert(arg).second, arg + " is given twice; pass it once");
      sw->second();
      continue;
    }
    if (!ignore_prefix.empty() && arg.rfind(ignore_prefix, 0) == 0) continue;
    const size_t eq = arg.find('=');
    const bool inline_value = arg.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    const auto it = table.values.find(arg);
    require(it != table.values.end(),
            "unknown " + std::string(arg.rfind("-", 0) == 0 ? "flag " : "argument ") + "'" + arg +
                "'; run " + program + " --help for the flags");
    const auto alone = table.alone.find(arg);
    if (!inline_value && alone != table.alone.end() &&
        (i + 1 == argc || std::string(argv[i + 1]).rfind("-", 0) == 0)) {
      value = alone->second;
    } else if (!inline_value) {
      require(i + 1 < argc, arg + " needs a value; run " + program + " --help");
      value = argv[++i];
    }
    require(given.insert(arg).second,
            arg + " is given twice; pass it once (the second would silently win)");
    // An empty value would turn the flag off without a word (a job script's unset $OUT).
    require(!value.empty(), arg + " is given an empty value; pass one, or drop " + arg +
                                " (is a variable in the command line unset?)");
    it->second(arg, value);
  }
  return given;
}

int64_t to_int(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  require(!text.empty() && *end == '\0' && errno == 0,
          flag + " expects an integer, got '" + text + "'");
  return v;
}

int to_int32(const std::string& flag, const std::string& text) {
  const int64_t v = to_int(flag, text);
  require(v >= -2147483647 && v <= 2147483647, flag + " value " + text + " is out of range");
  return static_cast<int>(v);
}

double to_double(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  require(!text.empty() && *end == '\0' && errno == 0 && std::isfinite(v),
          flag + " expects a number, got '" + text + "'");
  return v;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace mpf::flags
