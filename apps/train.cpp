// mpiformer-train: a driver. Parses flags, takes --save's lock, builds a TrainingRun, trains (or,
// with --dry-run, says what it would train). Input errors print once (from the lowest failing
// rank, normally rank 0) and every rank exits with status 2; the run's other outcomes have their
// own statuses (train/exit_status.hpp).
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <optional>

#include "backends/gemm.hpp"
#include "core/error.hpp"
#include "layout/options.hpp"
#include "runtime.hpp"
#include "train/exit_status.hpp"
#include "train/stop_signals.hpp"
#include "train/trainer.hpp"

namespace {

// The run, from its flags to its end: the process's exit status (train/exit_status.hpp).
int train(mpf::Runtime& runtime, int argc, char** argv) {
  const int rank = runtime.world_rank();

  mpf::TrainOptions opts;
  if (!mpf::all_ranks_succeed(MPI_COMM_WORLD, [&] { opts = mpf::parse_options(argc, argv); })) {
    return mpf::kExitBadInput;
  }
  if (opts.help) {
    if (rank == 0) std::fputs(mpf::usage().c_str(), stdout);
    return 0;
  }

  if (!opts.gemm.empty()) mpf::backend::select(opts.gemm);  // parse_options checked the name
  if (runtime.start_kernels(opts.threads, argc, argv) < 0 ||
      !runtime.choose_mpi_memory(opts.gpu_aware_mpi)) {
    return mpf::kExitBadInput;
  }
  // Rank 0 alone looks at the checkpoint directories and decides, agreed on, and the others learn
  // its decision (another node's view of a shared file system may lag): it takes --save's lock,
  // held until train() returns, so released on every way out of here (checkpoint/save_lock.hpp).
  // Then files and flags on every rank (no MPI inside), agreed on; then the layout (collective).
  std::optional<mpf::checkpoint::SaveLock> lock;
  mpf::StartPoint start;
  if (!mpf::all_ranks_succeed(MPI_COMM_WORLD, [&] {
        if (rank == 0) start = mpf::decide_start(opts, lock);
      })) {
    return mpf::kExitBadInput;
  }
  MPF_MPI_CHECK(MPI_Bcast(&start.resume_step, 1, MPI_INT64_T, 0, MPI_COMM_WORLD));
  mpf::RunInputs inputs;
  std::unique_ptr<mpf::TrainingRun> run;
  const bool built = mpf::all_ranks_succeed(
                         MPI_COMM_WORLD, [&] { inputs = mpf::load_inputs(opts, start, rank); }) &&
                     mpf::all_ranks_succeed(MPI_COMM_WORLD, [&] {
                       run = std::make_unique<mpf::TrainingRun>(std::move(inputs), MPI_COMM_WORLD);
                     });
  if (!built) return mpf::kExitBadInput;
  if (opts.dry_run) return run->dry_run();
  try {
    return run->train().status;
  } catch (const mpf::InputError& e) {
    MPF_FATAL(e.what());  // one rank alone: the others may wait in a collective
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Before MPI_Init: a time-limit signal that comes during start-up is then a request to stop,
  // not the default action (the process killed, the job chain broken); and before any thread
  // exists (MPI's, OpenMP's), so that every thread inherits the stop signals blocked.
  mpf::install_stop_signals();
  mpf::Runtime runtime(&argc, &argv);
  // The run's objects are gone before Kokkos and MPI end; MPI_Finalize gets a time limit.
  return runtime.finish(train(runtime, argc, argv));
}
