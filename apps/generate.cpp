// mpiformer-generate: a driver. Parses flags, checks the files, builds a Generation on the TP
// ranks and runs it. Input errors print once (from the lowest failing rank, normally rank 0) and
// every rank exits with status 2.
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
#include "generate/generation.hpp"
#include "generate/options.hpp"
#include "train/exit_status.hpp"
#include "train/trainer.hpp"
#ifdef _OPENMP
#include <omp.h>
#endif

int main(int argc, char** argv) {
  mpf::keep_freed_host_memory();  // before MPI allocates anything
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  mpf::GenerateOptions opts;
  if (!mpf::all_ranks_succeed(MPI_COMM_WORLD,
                              [&] { opts = mpf::parse_generate_options(argc, argv); })) {
    MPI_Finalize();
    return mpf::kExitBadInput;
  }
  if (opts.help) {
    if (rank == 0) std::fputs(mpf::generate_usage().c_str(), stdout);
    MPI_Finalize();
    return 0;
  }

  const int threads = mpf::choose_threads(opts.threads, MPI_COMM_WORLD);
#ifdef _OPENMP
  omp_set_num_threads(threads);
#endif
  mpf::backend::set_num_threads(threads);
  int kokkos_argc = 1;  // Kokkos 3.x also claims --threads and --help: it gets no flags
  Kokkos::initialize(kokkos_argc, argv);
  mpf::bind_backend_to_execution_space();
  bool ok = false;
  {
    // Files and flags first (no MPI inside), agreed on; then the model's shards (collective);
    // then the run, whose errors every rank meets alike.
    const MPI_Comm world = MPI_COMM_WORLD;
    mpf::GenerateInputs inputs;
    std::unique_ptr<mpf::Generation> run;
    ok = mpf::all_ranks_succeed(world, [&] { inputs = mpf::load_generate_inputs(opts, rank); }) &&
         mpf::all_ranks_succeed(
             world, [&] { run = std::make_unique<mpf::Generation>(std::move(inputs), world); }) &&
         mpf::all_ranks_succeed(world, [&] { run->run(); });
  }
  Kokkos::finalize();
  MPI_Finalize();
  return ok ? 0 : mpf::kExitBadInput;
}
