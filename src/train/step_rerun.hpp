// --rerun-suspect: a step that --skip-outliers flags, or whose loss or gradient norm is not
// finite, is computed again from the same state (the same parameters and batch). The training is
// bit-reproducible, so the second computation must give every rank's gradients the same bits as
// the first. Where it does not, a rank's hardware gave two answers to one question (Megatron's
// re-run state machine asks the same, against GPU non-determinism): the ranks whose gradients
// changed are named with their hosts and the run stops (exit 7). Where it does, the spike is the
// data's, and --skip-outliers decides.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/placement.hpp"

namespace mpf {

// A checksum of the bits of x[0, n): each element's bits weighted by its index, summed modulo
// 2^64 (an order-free sum: the same on any thread count); any one changed element changes it.
uint64_t bits_checksum(const float* x, int64_t n);

// Collective over `world`: the ranks (every rank gets them) whose two checksums differ.
std::vector<int> ranks_whose_bits_changed(MPI_Comm world, uint64_t first, uint64_t second);

// The error line for rank 0: the step, and each such rank with its host from the start-up
// placement table (world order).
std::string suspect_line(int step, const std::vector<int>& ranks,
                         const std::vector<PlacementRow>& placement);

}  // namespace mpf
