// What a resumed run takes from its checkpoint: the settings it must keep, those it may change,
// and the warnings a change earns.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/checkpoint_info.hpp"
#include "train/options.hpp"

namespace mpf {

// Makes `opts` the resumed run's: the model's sizes, the data and the options not given on the
// command line come from the checkpoint; a given model size, seed or optimizer setting that
// differs is an InputError naming the field; a different --batch or --seq-len is a warning saying
// where in the data the run continues, and so is a different schedule length.
void adopt_checkpoint_options(TrainOptions& opts, const CheckpointInfo& c,
                              std::vector<std::string>& warnings);
}  // namespace mpf
