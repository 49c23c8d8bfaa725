// Learning-rate schedules (llm.c train_gpt2.cu, 0-based step s):
//   warmup:   lr·(s+1)/warmup                 for s < warmup
//   cosine:   min + ½(1 + cos(π·r))·(lr − min), r = (s − warmup)/(steps − warmup), min =
//   lr·final_frac constant: lr
#pragma once

#include <string>

namespace mpf {

struct LRSchedule {
  enum class Kind { Cosine, Constant } kind = Kind::Cosine;
  float lr = 3e-4f;
  int warmup = 0;
  int steps = 1;
  float final_lr_frac = 0.0f;
};

float learning_rate(const LRSchedule& schedule, int step);

// "cosine" or "constant"; throws InputError naming the accepted values otherwise.
LRSchedule::Kind parse_schedule_kind(const std::string& name);

}  // namespace mpf
