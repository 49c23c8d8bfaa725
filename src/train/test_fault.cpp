#include "train/test_fault.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "parallel/rank_activity.hpp"

namespace mpf {

TestFault test_fault_from_environment() {
  TestFault fault;
  const char* text = std::getenv("MPIFORMER_TEST_FAULT");
  if (!text || !*text) return fault;
  char tail = 0;
  const int n = std::sscanf(text, "%d:%d:%f%c", &fault.step, &fault.rank, &fault.scale, &tail);
  require(n == 3 && fault.step >= 1 && fault.rank >= 0,
          std::string("MPIFORMER_TEST_FAULT=") + text +
              " is not STEP:RANK:SCALE (a step from 1, a rank from 0, a factor); it is for tests");
  return fault;
}

void arm_test_hang_from_environment(int world_rank) {
  const char* text = std::getenv("MPIFORMER_TEST_HANG");
  if (!text || !*text) return;
  int step = 0, rank = -1, used = 0;
  const int n = std::sscanf(text, "%d:%d:%n", &step, &rank, &used);
  const char* call = text + used;  // the environment's string: it outlives the run
  require(n == 2 && used > 0 && step >= 1 && rank >= 0 && std::strncmp(call, "MPI_", 4) == 0,
          std::string("MPIFORMER_TEST_HANG=") + text +
              " is not STEP:RANK:CALL (a step from 1, a rank from 0, an MPI call such as "
              "MPI_Isend); it is for tests");
  if (rank == world_rank) rank_activity().arm_test_hang(step, call);
}

double test_save_delay_from_environment(int step) {
  const char* text = std::getenv("MPIFORMER_TEST_SAVE_DELAY");
  if (!text || !*text) return 0;
  int from = 0;
  double seconds = 0;
  char tail = 0;
  require(std::sscanf(text, "%d:%lf%c", &from, &seconds, &tail) == 2 && from >= 1 && seconds >= 0,
          std::string("MPIFORMER_TEST_SAVE_DELAY=") + text +
              " is not STEP:SECONDS (a step from 1, seconds); it is for tests");
  return step >= from ? seconds : 0;
}

namespace {

// A STEP:RANK variable names this step and rank.
bool names_step_and_rank(const char* variable, int step, int world_rank) {
  const char* text = std::getenv(variable);
  if (!text || !*text) return false;
  int at = 0, rank = -1;
  char tail = 0;
  require(std::sscanf(text, "%d:%d%c", &at, &rank, &tail) == 2 && at >= 1 && rank >= 0,
          std::string(variable) + "=" + text +
              " is not STEP:RANK (a step from 1, a rank from 0); it is for tests");
  return step == at && rank == world_rank;
}

}  // namespace

bool test_save_failure_from_environment(int step, int world_rank) {
  return names_step_and_rank("MPIFORMER_TEST_SAVE_FAIL", step, world_rank);
}

bool test_staging_failure_from_environment(int step, int world_rank) {
  return names_step_and_rank("MPIFORMER_TEST_STAGING_FAIL", step, world_rank);
}

void apply_test_fault(const TestFault& fault, int step, int world_rank, float* grads, int64_t n) {
  if (step != fault.step || world_rank != fault.rank) return;
  const float s = fault.scale;
  for_each(
      "mpf::test_fault", n, KOKKOS_LAMBDA(int64_t i) { grads[i] *= s; });
}

}  // namespace mpf
