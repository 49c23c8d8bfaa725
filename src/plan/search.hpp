// The planner's search: every layout of a job over the divisors of its sizes (tp within a node,
// cp, pp, dp, ep, each schedule with its virtual stages, microbatch counts (with a pipeline, from
// P to 8P), recompute, sequence parallelism, ZeRO-1), each checked (layout_problem) and, if it can
// run, predicted; ranked by predicted step time, those that fit the machine's memory first.
#pragma once

#include <string>
#include <vector>

#include "plan/cost_model.hpp"

namespace mpf::plan {

struct Candidate {
  Layout layout;
  std::string problem;   // why it cannot run ("" when it can)
  Prediction predicted;  // when it can
  bool ok() const { return problem.empty() && predicted.fits; }
};

// Divisible layouts that fit, best first; then those that do not fit, smallest peak first;
// then those excluded by a problem.
std::vector<Candidate> search(const Job& job, const Machine& m);

// One layout, checked and (if it can run) predicted.
Candidate evaluate(const Job& job, const Machine& m, const Layout& l);

}  // namespace mpf::plan
