#include "optim/lr_schedule.hpp"

#include <cmath>

#include "core/error.hpp"

namespace mpf {

float learning_rate(const LRSchedule& s, int step) {
  if (step < s.warmup) return s.lr * float(step + 1) / float(s.warmup);
  if (s.kind == LRSchedule::Kind::Constant) return s.lr;
  const float min_lr = s.lr * s.final_lr_frac;
  const int decay_steps = s.steps - s.warmup;
  const float r = decay_steps > 0 ? float(step - s.warmup) / float(decay_steps) : 0.0f;
  const float coeff = 0.5f * (1.0f + std::cos(3.14159265358979f * r));
  return min_lr + coeff * (s.lr - min_lr);
}

LRSchedule::Kind parse_schedule_kind(const std::string& name) {
  if (name == "cosine") return LRSchedule::Kind::Cosine;
  if (name == "constant") return LRSchedule::Kind::Constant;
  throw InputError("unknown --lr-schedule '" + name + "'; use cosine or constant");
}

}  // namespace mpf
