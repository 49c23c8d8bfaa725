// `mpiformer-plan --calibrate`: measures the allocation it runs on (every rank at once, as a
// run would load it) and describes it as a machine file: GEMM rates by size and precision, the
// fused attention's rate by sequence length, element-wise bandwidth and the kernels' launch
// overhead, what a process holds before the model, point-to-point latency and bandwidth within
// and across nodes, and all-reduce, all-gather and all-to-all times by size over groups of every
// size that divides the world (consecutive ranks, as the grid puts TP, then CP and DP).
#pragma once

#include <mpi.h>

#include <string>

#include "plan/machine.hpp"

namespace mpf::plan {

struct CalibrationOptions {
  std::string name;    // the machine's name ("" : this host's)
  int threads = 1;     // each rank's threads (the cores a CPU rank computes on)
  bool quick = false;  // fewer sizes and repetitions: for tests
};

// Collective over world; every rank returns the same description.
Machine calibrate(const CalibrationOptions& o, MPI_Comm world);

}  // namespace mpf::plan
