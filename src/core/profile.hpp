// A per-kernel time profile (--profile): while it is on, every labelled kernel launch
// (core/parallel.hpp) and every matrix product (model/layers/matmul.hpp) adds its wall time to its
// label, after a fence so asynchronous work is charged to the kernel that launched it; and every
// copy between the kernels' memory and the host (core/transfer.hpp) adds its bytes to its label.
// Off, a launch or a copy pays one branch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/stopwatch.hpp"

namespace mpf::profile {

void set_enabled(bool on);
bool enabled();

struct Entry {
  std::string label;
  int64_t calls = 0;
  double seconds = 0.0;
  double flops = 0.0;  // matrix products only
};
void add(const std::string& label, double seconds, double flops = 0.0);
// Every label so far, the most time first.
std::vector<Entry> entries();
void reset();

// Copies between the kernels' memory and the host, by label ("d2h loss", "h2d batch", ...).
struct Transfer {
  std::string label;
  int64_t calls = 0;
  int64_t bytes = 0;
  double seconds = 0.0;
};
void add_transfer(const std::string& label, int64_t bytes, double seconds);
// Every transfer label so far, the most bytes first.
std::vector<Transfer> transfers();

// Times its own lifetime into `label` when profiling is on.
class Scope {
 public:
  explicit Scope(const char* label, double flops = 0.0)
      : label_(enabled() ? label : nullptr), flops_(flops) {}
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* label_;
  double flops_;
  Stopwatch clock_;
};

}  // namespace mpf::profile
