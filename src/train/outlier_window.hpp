// A step's loss or gradient norm against the running window of the steps before it, as llm.c's
// outlier detector keeps it (llmc/outlier_detector.h): z = (x - mean) / std over the last `size`
// values, and no z until the window is full. Every step's value joins the window, skipped or not,
// as in llm.c: a lasting change of level is learned, not skipped for ever. The window is part of a
// checkpoint, so a resumed run judges its steps as the uninterrupted run does.
#pragma once

#include <deque>
#include <vector>

namespace mpf {

class OutlierWindow {
 public:
  explicit OutlierWindow(int size) : size_(size) {}

  // x's z-score against the values before it (NaN while there are fewer than the window's size;
  // ±inf where they are all equal and x is not); then x joins, the oldest leaving.
  double push(double x);
  // The same z-score, without x joining.
  double z(double x) const;

  std::vector<double> values() const { return {values_.begin(), values_.end()}; }  // oldest first
  // From a checkpoint (oldest first); only the newest `size` are kept (--outlier-window changed).
  void restore(const std::vector<double>& values);

 private:
  int size_;
  std::deque<double> values_;
};

}  // namespace mpf
