// What a resumed run takes from its checkpoint, by the settings table's policy for each setting
// (layout/settings.hpp): those it must keep, those it may change, and the warnings a change earns.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/checkpoint_info.hpp"
#include "layout/options.hpp"

namespace mpf {

// Makes `opts` the resumed run's: every saved setting not given on the command line comes from
// the checkpoint `c` (read from `state_file`); a given setting the run must keep (the model's
// sizes, the seed, the optimizer) that differs is an InputError naming it; a different --batch,
// --seq-len or schedule length is a warning saying what it changes. A saved setting missing or
// malformed is an InputError naming the file.
void adopt_checkpoint_options(TrainOptions& opts, const CheckpointInfo& c,
                              const std::string& state_file, std::vector<std::string>& warnings);

}  // namespace mpf
