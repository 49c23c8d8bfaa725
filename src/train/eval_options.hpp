// Command-line options of mpiformer-eval: a model (--init-from, or --load's checkpoint), the task
// (--eval-data) and the layout it runs on, as mpiformer-train spells them (settings.hpp), and
// where each example's scores go.
#pragma once

#include <string>

#include "layout/options.hpp"

namespace mpf {

struct EvalOptions {
  TrainOptions run;     // the model, the layout, --eval-data; steps 0, no training data
  std::string details;  // --eval-details FILE.jsonl: each example's scores; "" = none
};

// Throws InputError for a flag mpiformer-eval does not take, a missing --eval-data or model, or
// what mpiformer-train's checks refuse.
EvalOptions parse_eval_options(int argc, const char* const* argv);

std::string eval_usage();

}  // namespace mpf
