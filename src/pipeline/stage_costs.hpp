// A run's measured op costs per pipeline stage, for zb-auto (and for the simulator, as the
// trainer's summary prints them): each stage's mean F, B and W time per (microbatch, chunk),
// averaged over the stage's TP and DP ranks so that every rank of the world gets the same numbers
// and so plans the same schedule. P2P time is not measured (it hides in the waits): 0.
#pragma once

#include <mpi.h>

#include "pipeline/model_stage.hpp"
#include "pipeline/schedule.hpp"

namespace mpf {

// Collective over `world`, whose ranks are on pp_size pipeline stages.
pipeline::OpCosts stage_costs(const StageTimes& times, int pp_rank, int pp_size, MPI_Comm world);

}  // namespace mpf
