// A Kokkos Tools library that counts kernel launches by label, for docs/gpu.md's launches per
// step. Not part of the build:
//   g++ -O2 -shared -fPIC -std=c++17 ci/kernel_count.cpp -o /tmp/libkernel_count.so
//   KOKKOS_PROFILE_LIBRARY=/tmp/libkernel_count.so KERNEL_COUNT_OUT=counts.txt mpiexec -n 1 ...
// writes the total, the fences and the deep copies, then each label's launches, most first.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace {
std::map<std::string, long> counts;
long fences = 0, copies = 0;
}  // namespace

extern "C" {
void kokkosp_init_library(int, uint64_t, uint32_t, void*) {}
void kokkosp_begin_parallel_for(const char* name, uint32_t, uint64_t* id) {
  ++counts[name];
  *id = 0;
}
void kokkosp_end_parallel_for(uint64_t) {}
void kokkosp_begin_parallel_reduce(const char* name, uint32_t, uint64_t* id) {
  ++counts[name];
  *id = 0;
}
void kokkosp_end_parallel_reduce(uint64_t) {}
void kokkosp_begin_parallel_scan(const char* name, uint32_t, uint64_t* id) {
  ++counts[name];
  *id = 0;
}
void kokkosp_end_parallel_scan(uint64_t) {}
void kokkosp_begin_fence(const char*, uint32_t, uint64_t* id) {
  ++fences;
  *id = 0;
}
void kokkosp_end_fence(uint64_t) {}
void kokkosp_begin_deep_copy(void*, const char*, const void*, void*, const char*, const void*,
                             uint64_t) {
  ++copies;
}
void kokkosp_end_deep_copy() {}
void kokkosp_finalize_library() {
  const char* path = std::getenv("KERNEL_COUNT_OUT");
  FILE* f = path ? std::fopen(path, "w") : stderr;
  if (!f) return;
  long total = 0;
  std::vector<std::pair<long, std::string>> rows;
  for (const auto& [name, n] : counts) {
    total += n;
    rows.push_back({n, name});
  }
  std::sort(rows.rbegin(), rows.rend());
  std::fprintf(f, "total %ld fences %ld deep_copies %ld\n", total, fences, copies);
  for (const auto& [n, name] : rows) std::fprintf(f, "%8ld %s\n", n, name.c_str());
  if (path) std::fclose(f);
}
}
