#include "core/profile.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <unordered_map>

namespace mpf::profile {

namespace {
bool on = false;
std::unordered_map<std::string, Entry>& table() {
  static std::unordered_map<std::string, Entry> t;
  return t;
}
}  // namespace

void set_enabled(bool enable) {
  on = enable;
}

bool enabled() {
  return on;
}

void add(const std::string& label, double seconds, double flops) {
  Entry& e = table()[label];
  e.label = label;
  ++e.calls;
  e.seconds += seconds;
  e.flops += flops;
}

std::vector<Entry> entries() {
  std::vector<Entry> out;
  for (const auto& [label, e] : table()) out.push_back(e);
  std::sort(out.begin(), out.end(),
            [](const Entry& a, const Entry& b) { return a.seconds > b.seconds; });
  return out;
}

void reset() {
  table().clear();
}

Scope::~Scope() {
  if (!label_) return;
  Kokkos::fence();
  add(label_, clock_.seconds(), flops_);
}

}  // namespace mpf::profile
