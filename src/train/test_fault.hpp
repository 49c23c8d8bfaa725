// For tests only: MPIFORMER_TEST_FAULT=STEP:RANK:SCALE multiplies one rank's gradients by SCALE in
// one step, after its backward and before any reduction: a loss-free spike in the gradient norm,
// on purpose and the same in every run, for the outlier tests (without --overlap-grad-reduce,
// whose buckets are reduced during the backward). Unset, nothing happens.
//
// MPIFORMER_TEST_HANG=STEP:RANK:CALL stops world rank RANK for good at its first entry into MPI
// call CALL (as parallel/rank_activity.hpp names it: MPI_Isend, MPI_Irecv, MPI_Allreduce,
// MPI_Iallreduce, ...) in step STEP: a hang in a P2P call or a collective, for the watchdog's
// tests.
#pragma once

#include <cstdint>

namespace mpf {

struct TestFault {
  int step = 0, rank = -1;
  float scale = 1.0f;
};

// Parsed once; a malformed value is an InputError naming it.
TestFault test_fault_from_environment();

// Arms MPIFORMER_TEST_HANG on this rank if it names it; a malformed value is an InputError.
void arm_test_hang_from_environment(int world_rank);

// MPIFORMER_TEST_SAVE_DELAY=STEP:SECONDS: every rank's background save of step STEP or later
// sleeps SECONDS between its model file and its optimizer file (a write in flight long enough to
// be cut off, or waited for). 0 if unset or an earlier step.
double test_save_delay_from_environment(int step);

// MPIFORMER_TEST_SAVE_FAIL=STEP:RANK: world rank RANK's background writer throws (as a library
// call that fails with an exception would) between its model file and its optimizer file in the
// save of step STEP. False if unset or another step or rank.
bool test_save_failure_from_environment(int step, int world_rank);

// MPIFORMER_TEST_STAGING_FAIL=STEP:RANK: in the save of step STEP (background or not), world rank
// RANK's copy into the model file's staging buffers throws in the middle of MPI-IO's collective
// rounds (its second round, or its last if it has one; io/parallel_file.hpp). False if unset or
// another step or rank.
bool test_staging_failure_from_environment(int step, int world_rank);

// Applies `fault` to `grads` (n floats) when this is its step and rank.
void apply_test_fault(const TestFault& fault, int step, int world_rank, float* grads, int64_t n);

}  // namespace mpf
