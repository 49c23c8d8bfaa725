// mpiformer-generate: a driver. Parses flags, checks the files, builds a Generation on the TP
// ranks and runs it. Input errors print once (from the lowest failing rank, normally rank 0) and
// every rank exits with status 2.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpointing.hpp"
#include "core/error.hpp"
#include "generate/generation.hpp"
#include "generate/options.hpp"
#include "runtime.hpp"
#include "train/exit_status.hpp"

int main(int argc, char** argv) {
  mpf::Runtime runtime(&argc, &argv);
  const int rank = runtime.world_rank();

  mpf::GenerateOptions opts;
  if (!mpf::all_ranks_succeed(MPI_COMM_WORLD,
                              [&] { opts = mpf::parse_generate_options(argc, argv); })) {
    return mpf::kExitBadInput;
  }
  if (opts.help) {
    if (rank == 0) std::fputs(mpf::generate_usage().c_str(), stdout);
    return 0;
  }

  if (runtime.start_kernels(opts.threads, argc, argv) < 0 ||
      !runtime.choose_mpi_memory(opts.gpu_aware_mpi)) {
    return mpf::kExitBadInput;
  }
  // Rank 0 alone chooses --load's checkpoint (another node's view of a shared file system may
  // lag), agreed on, and the others learn the step; then files and flags on every rank (no MPI
  // inside), agreed on; then the model's shards (collective); then the run, whose errors every
  // rank meets alike.
  const MPI_Comm world = MPI_COMM_WORLD;
  int64_t step = -1;
  std::vector<std::string> notes;
  if (!mpf::all_ranks_succeed(world, [&] {
        if (rank == 0) step = mpf::choose_checkpoint(opts.load, opts.load_step, notes);
      })) {
    return mpf::kExitBadInput;
  }
  MPF_MPI_CHECK(MPI_Bcast(&step, 1, MPI_INT64_T, 0, world));
  mpf::GenerateInputs inputs;
  std::unique_ptr<mpf::Generation> run;
  const bool ok =
      mpf::all_ranks_succeed(
          world, [&] { inputs = mpf::load_generate_inputs(opts, step, notes, rank); }) &&
      mpf::all_ranks_succeed(
          world, [&] { run = std::make_unique<mpf::Generation>(std::move(inputs), world); }) &&
      mpf::all_ranks_succeed(world, [&] { run->run(); });
  return ok ? 0 : mpf::kExitBadInput;
}
