#include "train/outlier_window.hpp"

#include <cmath>
#include <limits>

namespace mpf {

double OutlierWindow::z(double x) const {
  if (size_ <= 0 || int(values_.size()) < size_) return std::numeric_limits<double>::quiet_NaN();
  // Two passes over at most a few hundred values: exact enough, and no running sums to drift
  // over a week of steps.
  double mean = 0.0;
  for (const double v : values_) mean += v;
  mean /= double(values_.size());
  double var = 0.0;
  for (const double v : values_) var += (v - mean) * (v - mean);
  const double sd = std::sqrt(var / double(values_.size()));
  if (sd > 0.0) return (x - mean) / sd;
  return x == mean ? 0.0 : std::copysign(std::numeric_limits<double>::infinity(), x - mean);
}

double OutlierWindow::push(double x) {
  const double score = z(x);
  values_.push_back(x);
  while (int(values_.size()) > size_) values_.pop_front();
  return score;
}

void OutlierWindow::restore(const std::vector<double>& values) {
  values_.assign(values.begin(), values.end());
  while (int(values_.size()) > size_) values_.pop_front();
}

}  // namespace mpf
