// mpiformer-train: a driver. Parses flags, builds a TrainingRun, trains. Input errors print once
// (from the lowest failing rank, normally rank 0) and every rank exits with status 2; the run's
// other outcomes have their own statuses (train/exit_status.hpp).
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backends/gemm.hpp"
#include "core/device.hpp"
#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "train/exit_status.hpp"
#include "train/options.hpp"
#include "train/stop_signals.hpp"
#include "train/trainer.hpp"
#ifdef _OPENMP
#include <omp.h>
#endif

int main(int argc, char** argv) {
  // Before MPI_Init: a time-limit signal that comes during start-up is then a request to stop,
  // not the default action (the process killed, the job chain broken); and before any thread
  // exists (MPI's, OpenMP's), so that every thread inherits the stop signals blocked.
  mpf::install_stop_signals();
  mpf::keep_freed_host_memory();  // before MPI allocates anything
  // Funneled: only this thread calls MPI (the watchdog and checkpoint staging threads never do).
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  mpf::TrainOptions opts;
  if (!mpf::all_ranks_succeed(MPI_COMM_WORLD, [&] { opts = mpf::parse_options(argc, argv); })) {
    MPI_Finalize();
    return mpf::kExitBadInput;
  }
  if (opts.help) {
    if (rank == 0) std::fputs(mpf::usage().c_str(), stdout);
    MPI_Finalize();
    return 0;
  }

  if (!opts.gemm.empty()) mpf::backend::select(opts.gemm);  // parse_options checked the name
  const int threads = mpf::choose_threads(opts.threads, MPI_COMM_WORLD);
#ifdef _OPENMP
  omp_set_num_threads(threads);
#endif
  mpf::backend::set_num_threads(threads);
  // Kokkos 3.x also claims --threads and --help: hand it only its own --kokkos-* flags.
  std::vector<char*> kokkos_args{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]).rfind("--kokkos-", 0) == 0) kokkos_args.push_back(argv[i]);
  }
  int kokkos_argc = static_cast<int>(kokkos_args.size());
  Kokkos::initialize(kokkos_argc, kokkos_args.data());
  mpf::bind_backend_to_execution_space();
  int status = 0;
  {
    // Files and flags first (no MPI inside), agreed on; then the layout (collective).
    mpf::RunInputs inputs;
    std::unique_ptr<mpf::TrainingRun> run;
    const bool built =
        mpf::all_ranks_succeed(MPI_COMM_WORLD, [&] { inputs = mpf::load_inputs(opts, rank); }) &&
        mpf::all_ranks_succeed(MPI_COMM_WORLD, [&] {
          run = std::make_unique<mpf::TrainingRun>(std::move(inputs), MPI_COMM_WORLD);
        });
    if (!built) {
      status = mpf::kExitBadInput;
    } else {
      try {
        status = run->train().status;
      } catch (const mpf::InputError& e) {
        MPF_FATAL(e.what());  // one rank alone: the others may wait in a collective
      }
    }
  }
  Kokkos::finalize();
  MPI_Finalize();
  return status;
}
