// mpiformer-eval: a driver. Parses flags, chooses --load's checkpoint on rank 0, builds the model
// on the layout the flags give (as mpiformer-train would, without training: no gradients or
// optimizer state) and scores --eval-data. Input errors print once (from the lowest failing rank,
// normally rank 0) and every rank exits with status 2; a stop signal ends the scoring early, with
// no score and status 3, as it stops mpiformer-train (train/stop_signals.hpp).
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <optional>

#include "checkpoint/checkpointing.hpp"
#include "core/error.hpp"
#include "io/output_file.hpp"
#include "runtime.hpp"
#include "train/eval_options.hpp"
#include "train/exit_status.hpp"
#include "train/stop_signals.hpp"
#include "train/trainer.hpp"

namespace {

// Rank 0 writes each example's scores into a new file (never over an existing one).
void write_details(const std::string& path, const mpf::TaskResult& r) {
  mpf::PendingFile file(path);
  for (const mpf::ExampleScore& s : r.details) {
    const std::string line = mpf::details_json(s) + "\n";
    file.write(line.data(), line.size());
  }
  const std::string error = file.commit();
  mpf::require(error.empty(), "--eval-details " + path + ": " + error);
}

int evaluate(mpf::Runtime& runtime, int argc, char** argv) {
  const int rank = runtime.world_rank();
  const MPI_Comm world = MPI_COMM_WORLD;
  mpf::EvalOptions opts;
  if (!mpf::all_ranks_succeed(world, [&] { opts = mpf::parse_eval_options(argc, argv); })) {
    return mpf::kExitBadInput;
  }
  if (opts.run.help) {
    if (rank == 0) std::fputs(mpf::eval_usage().c_str(), stdout);
    return 0;
  }
  if (runtime.start_kernels(opts.run.threads, argc, argv) < 0 ||
      !runtime.choose_mpi_memory(opts.run.gpu_aware_mpi)) {
    return mpf::kExitBadInput;
  }
  // As mpiformer-train: rank 0 chooses the checkpoint, the others learn its step; then the
  // files and flags on every rank; then the model on its layout (collective). Unlike a training
  // run, a --load without a checkpoint is refused, not a fresh (random) model.
  std::optional<mpf::checkpoint::SaveLock> no_lock;
  mpf::StartPoint start;
  if (!mpf::all_ranks_succeed(world, [&] {
        if (rank != 0) return;
        start = mpf::decide_start(opts.run, no_lock);
        if (!opts.run.load.empty()) mpf::require_checkpoint_found(opts.run.load, start.resume_step);
      })) {
    return mpf::kExitBadInput;
  }
  MPF_MPI_CHECK(MPI_Bcast(&start.resume_step, 1, MPI_INT64_T, 0, world));
  mpf::RunInputs inputs;
  std::unique_ptr<mpf::TrainingRun> run;
  mpf::TaskResult result;
  // The model alone: scoring trains nothing, so no data, no gradients and no optimizer state.
  auto load = [&] { inputs = mpf::load_inputs(opts.run, start, rank, true); };
  const bool ok = mpf::all_ranks_succeed(world, load) && mpf::all_ranks_succeed(world, [&] {
                    run = std::make_unique<mpf::TrainingRun>(std::move(inputs), world);
                  });
  if (!ok) return mpf::kExitBadInput;
  if (rank == 0) {
    std::printf("scoring %s\n", opts.run.eval_data.c_str());
    std::fflush(stdout);
  }
  if (!mpf::all_ranks_succeed(world, [&] { result = run->evaluate(!opts.details.empty()); })) {
    return mpf::kExitBadInput;
  }
  if (result.cut_short) {
    // Part of a task is not its score: neither the line nor --eval-details is written.
    if (rank == 0) {
      std::printf(
          "%s received: scoring stopped after %d of %d examples; no score reported; exit "
          "status %d\n",
          mpf::signal_name(run->stop_signal()), result.examples, result.total,
          int(mpf::kExitSignalled));
      std::fflush(stdout);
    }
    return mpf::kExitSignalled;
  }
  if (rank == 0) {
    std::printf("%s\n", result.line(run->trained_steps()).c_str());
    std::fflush(stdout);
  }
  if (!mpf::all_ranks_succeed(world, [&] {
        if (rank == 0 && !opts.details.empty()) write_details(opts.details, result);
      })) {
    return mpf::kExitBadInput;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // First, before any thread exists, as mpiformer-train does (apps/train.cpp).
  mpf::install_stop_signals();
  mpf::Runtime runtime(&argc, &argv);
  return runtime.finish(evaluate(runtime, argc, argv));
}
