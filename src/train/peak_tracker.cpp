#include "train/peak_tracker.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/error.hpp"
#include "parallel/grid.hpp"

namespace mpf {

PeakTracker::PeakTracker(PeakRate start, bool given, Precision precision, MPI_Comm comm)
    : rate_(std::move(start)), given_(given), precision_(precision), comm_(comm) {
  total_ = allreduce_sum(rate_.gflops * 1e9, comm_);
  start_gflops_ = rate_.gflops;
}

PeakCheck PeakTracker::check(int step, double flops, double seconds) {
  // Rank 0's clock, the one its step line prints from, on every rank: all of them decide alike.
  // (Another rank's may read shorter: one descheduled between steps starts its clock late, while
  // the others wait for it in the step's collectives.)
  double timed = seconds;
  MPF_MPI_CHECK(MPI_Bcast(&timed, 1, MPI_DOUBLE, 0, comm_));
  PeakCheck out;
  if (timed <= 0.0 || flops / timed <= total_) return out;
  const double achieved = flops / timed;
  char line[400];
  if (!given_ && remeasures_ < kMaxRemeasures) {
    const double before = total_;
    const PeakRate now = measure_peak(precision_);
    if (now.gflops > rate_.gflops) rate_ = now;
    total_ = std::max(total_, allreduce_sum(rate_.gflops * 1e9, comm_));
    ++remeasures_;
    remeasured_at_ = step;
    std::snprintf(line, sizeof line,
                  "peak: step %d ran at %.1f GFLOP/s, above the peak of %.1f GFLOP/s measured "
                  "before (another process held the cores then); measured again: %.1f GFLOP/s",
                  step, achieved / 1e9, before / 1e9, total_ / 1e9);
    out.note = line;
    if (achieved <= total_) return out;
  }
  if (!warned_) {
    warned_ = true;
    if (given_) {
      std::snprintf(line, sizeof line,
                    "MFU above 100%% from step %d: the steps run at %.1f GFLOP/s, more than "
                    "--peak-gflops allows (%.1f GFLOP/s over all ranks); pass the hardware's "
                    "peak",
                    step, achieved / 1e9, total_ / 1e9);
    } else {
      std::snprintf(line, sizeof line,
                    "MFU above 100%% from step %d: the steps run at %.1f GFLOP/s, more than the "
                    "best product this machine ran (%.1f GFLOP/s, measured %d times); the MFU "
                    "figures overstate: pass --peak-gflops with the hardware's peak",
                    step, achieved / 1e9, total_ / 1e9, remeasures_ + 1);
    }
    out.warning = line;
  }
  return out;
}

std::string PeakTracker::describe() const {
  char text[200];
  if (given_) {
    std::snprintf(text, sizeof text, "peak %.1f GFLOP/s/rank (--peak-gflops)", rate_.gflops);
  } else if (remeasured_at_ > 0) {
    std::snprintf(text, sizeof text,
                  "peak %.1f GFLOP/s/rank (%s, measured again at step %d: %.1f at start-up)",
                  rate_.gflops, rate_.library.c_str(), remeasured_at_, start_gflops_);
  } else {
    std::snprintf(text, sizeof text, "peak %.1f GFLOP/s/rank (%s, measured at start-up)",
                  rate_.gflops, rate_.library.c_str());
  }
  return text;
}

PeakRate measure_startup_peak(Precision precision) {
  PeakRate peak = measure_peak(precision);
  if (const char* busy = std::getenv("MPIFORMER_TEST_BUSY_START")) {
    const double f = std::atof(busy);
    if (f > 0.0 && f <= 1.0) peak.gflops *= f;
  }
  return peak;
}

}  // namespace mpf
