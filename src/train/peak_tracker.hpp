// MFU's denominator over a run. The start-up measurement (peak.hpp) is fooled when another
// process holds the cores at that moment: every later step then reads above 100%. A step faster
// than the peak allows proves the measurement low, so the peak is measured again at once, on every
// rank, and the larger kept (at most kMaxRemeasures times a run). A --peak-gflops the user gave is
// never replaced: a step above it gets a warning instead, as does one still above a fresh
// measurement. No MFU above 100% is printed without a line saying why.
#pragma once

#include <mpi.h>

#include <string>

#include "core/bf16.hpp"
#include "layout/peak.hpp"

namespace mpf {

// What a step's check has to say, for rank 0 to print: a note on the log (stdout) and a warning
// (stderr, without its "warning: "), each empty or one line.
struct PeakCheck {
  std::string note, warning;
};

class PeakTracker {
 public:
  // `start`: this rank's rate, measured at start-up or given (`given`); `comm`: every rank, whose
  // rates add up.
  PeakTracker(PeakRate start, bool given, Precision precision, MPI_Comm comm);

  // After a step of `flops` model FLOPs (all ranks) that took `seconds` on this rank; collective.
  // Measures the peak again when rank 0's clock (its step line's) puts the step above it.
  PeakCheck check(int step, double flops, double seconds);

  double flops() const { return total_; }  // all ranks together, FLOP/s
  // For the summary: per rank, and how it was found ("measured at start-up", "measured again at
  // step 12: the start-up measurement was 210.3", "--peak-gflops").
  std::string describe() const;

  static constexpr int kMaxRemeasures = 3;

 private:
  PeakRate rate_;  // this rank's
  bool given_;
  Precision precision_;
  MPI_Comm comm_;
  double total_ = 0.0;
  double start_gflops_ = 0.0;
  int remeasured_at_ = 0, remeasures_ = 0;
  bool warned_ = false;
};

// The start-up measurement, scaled by MPIFORMER_TEST_BUSY_START (a factor in (0, 1]) when the
// tests set it: a start-up on busy cores, made deterministic.
PeakRate measure_startup_peak(Precision precision);

}  // namespace mpf
