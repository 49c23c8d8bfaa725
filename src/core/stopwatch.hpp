// Wall-clock timing for logs, benchmarks and traces.
#pragma once

#include <chrono>

namespace mpf {

// Wall-clock seconds since construction or the last reset.
class Stopwatch {
 public:
  Stopwatch() : t0_(std::chrono::steady_clock::now()) {}
  void reset() { t0_ = std::chrono::steady_clock::now(); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace mpf
