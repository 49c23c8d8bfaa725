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

namespace mpf {

// A checksum of the bits of x[0, n): each element's bits weighted by its index, summed modulo
// 2^64 (an order-free sum: the same on any thread count); any one changed element changes it.
uint64_t bits_checksum(const float* x, int64_t n);

// Collective over `world`: "" when every rank's two checksums agree, else one line naming each
// rank whose gradients changed and its host, for rank 0 to print.
std::string rerun_verdict(MPI_Comm world, uint64_t first, uint64_t second, int step);

}  // namespace mpf
