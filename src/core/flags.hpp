// Command lines of `--flag value` / `--flag=value` pairs and value-less switches, shared by the
// apps, with the number parsing they need. Every problem is an InputError naming the flag and
// the fix.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>

namespace mpf::flags {

using Setter = std::function<void(const std::string& flag, const std::string& value)>;

struct Table {
  std::map<std::string, Setter> values;                   // flags that take a value
  std::map<std::string, std::function<void()>> switches;  // flags that do not
  // Value flags that may also stand alone (no value follows, or the next argument is a flag),
  // and the value they mean then: --recompute alone is --recompute full.
  std::map<std::string, std::string> alone;
};

// Applies argv[1..] to the table. `program` names the app in messages ("run <program> --help");
// flags starting with `ignore_prefix` (e.g. "--kokkos-", consumed by a library) are skipped.
// Returns the flags that appeared (value flags and switches).
std::set<std::string> parse(int argc, const char* const* argv, const Table& table,
                            const std::string& program, const std::string& ignore_prefix = "");

int64_t to_int(const std::string& flag, const std::string& text);
int to_int32(const std::string& flag, const std::string& text);
double to_double(const std::string& flag, const std::string& text);
// A number as a person writes it: 1, 0.5, 1e-08.
std::string number(double v);

}  // namespace mpf::flags
