#include "core/profile.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <mutex>
#include <unordered_map>

namespace mpf::profile {

namespace {
bool on = false;
// Checkpoint staging copies are counted from a helper thread.
std::mutex guard;
std::unordered_map<std::string, Entry>& table() {
  static std::unordered_map<std::string, Entry> t;
  return t;
}
std::unordered_map<std::string, Transfer>& transfer_table() {
  static std::unordered_map<std::string, Transfer> t;
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
  const std::lock_guard<std::mutex> lock(guard);
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

void add_transfer(const std::string& label, int64_t bytes, double seconds) {
  const std::lock_guard<std::mutex> lock(guard);
  Transfer& t = transfer_table()[label];
  t.label = label;
  ++t.calls;
  t.bytes += bytes;
  t.seconds += seconds;
}

std::vector<Transfer> transfers() {
  std::vector<Transfer> out;
  for (const auto& [label, t] : transfer_table()) out.push_back(t);
  std::sort(out.begin(), out.end(), [](const Transfer& a, const Transfer& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.label < b.label;
  });
  return out;
}

void reset() {
  table().clear();
  transfer_table().clear();
}

Scope::~Scope() {
  if (!label_) return;
  Kokkos::fence();
  add(label_, clock_.seconds(), flops_);
}

}  // namespace mpf::profile
