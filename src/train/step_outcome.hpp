// What one training step did, as the step loop hands it to the reporter: its log line's figures
// (the same on every rank, but ms) and what it measured or decided.
#pragma once

#include <vector>

#include "layout/step_log.hpp"

namespace mpf {

struct StepOutcome {
  StepRecord log;
  bool diverged = false;     // a non-finite loss or norm: the update was not applied
  bool timed = false;        // counts into the run's mean step time
  bool ops_timed = false;    // the stage's op times hold its F, B and W times
  bool zb_planning = false;  // zb-auto plans from them
  // Against the outlier windows: the z-scores (NaN while a window fills), and whether
  // --skip-outliers skipped the update.
  double loss_z = 0.0, norm_z = 0.0;
  bool skipped = false;
  // --rerun-suspect: the step was computed again; `suspect` holds the ranks whose gradients
  // changed (the run stops), else the two computations agreed.
  bool rerun = false;
  std::vector<int> suspect;
};

}  // namespace mpf
