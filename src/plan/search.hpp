// The planner's search: every layout of a job over the divisors of its sizes (tp within a node,
// cp, pp, dp, ep, each schedule with its virtual stages (interleaved: 2 up to the blocks a stage
// holds), microbatch counts (with a pipeline, from P up to the rows of a DP rank), recompute,
// sequence parallelism, ZeRO-1), each checked (layout_problem). Those that can run are bounded
// below without simulating (Predictor::step_bound) and taken in the order of their bounds: one
// is predicted in full (memory first, then the simulated pipeline) until its bound is slower than
// every layout the report shows (the best `top`, and the best of the four next-best shapes);
// the rest are left unsimulated ("pruned"). The ranking is the one a search of every layout
// gives, for what the report prints.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "plan/cost_model.hpp"

namespace mpf::plan {

// The most layouts a report may show, each predicted in full.
constexpr int kMaxTop = 1000;
// The most layouts a search weighs (each held in memory with its bound): past it, fewer nodes
// or a layout to --evaluate.
constexpr size_t kMaxLayouts = size_t(1) << 22;

struct Candidate {
  Layout layout;
  std::string problem;   // why it cannot run ("" when it can)
  Prediction predicted;  // when it can and was predicted
  double bound_ms = 0;   // a lower bound of its step (when it can run)
  bool pruned = false;   // not predicted: its bound is slower than every layout shown
  // It does not fit by a floor of its memory alone (Predictor::memory_bound: predicted.memory
  // is that floor, below its peak); its step was not simulated.
  bool memory_bound_only = false;
  // The layouts this entry stands for: those excluded by a problem share one entry per reason
  // (the text before its first ':'), the first of them; a search holds millions.
  size_t count = 1;
  bool ok() const { return problem.empty() && !pruned && predicted.fits; }
};

struct SearchOptions {
  int top = 10;  // the best layouts that must be exact (the report's rows; at least 2)
  // Called now and then: layouts enumerated and bounded so far, predicted in full so far.
  std::function<void(size_t bounded, size_t predicted)> progress;
};

// Layouts that fit, best first; then those that do not fit, smallest peak first; then the pruned,
// by bound; then one entry per reason a layout cannot run. InputError past kMaxLayouts.
std::vector<Candidate> search(const Job& job, const Machine& m, const SearchOptions& o = {});

// One layout, checked and (if it can run) predicted.
Candidate evaluate(const Job& job, const Machine& m, const Layout& l);

}  // namespace mpf::plan
