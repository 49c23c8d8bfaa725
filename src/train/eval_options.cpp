#include "train/eval_options.hpp"

#include <set>

#include "core/error.hpp"
#include "io/output_file.hpp"

namespace mpf {

namespace {

// The settings mpiformer-eval shares with mpiformer-train: the model, the task, the layout and
// the system.
const std::set<std::string>& eval_flags() {
  static const std::set<std::string> flags = {"--init-from",
                                              "--load",
                                              "--load-step",
                                              "--eval-data",
                                              "--eval-examples",
                                              "--tokenizer",
                                              "--batch",
                                              "--seq-len",
                                              "--tp",
                                              "--cp",
                                              "--dp",
                                              "--pp",
                                              "--schedule",
                                              "--virtual-stages",
                                              "--microbatches",
                                              "--micro-batch-size",
                                              "--pp-layout",
                                              "--sequence-parallel",
                                              "--precision",
                                              "--gemm",
                                              "--threads",
                                              "--gpu-aware-mpi",
                                              "--memory-per-rank"};
  return flags;
}

}  // namespace

EvalOptions parse_eval_options(int argc, const char* const* argv) {
  EvalOptions e;
  TrainOptions& o = e.run;
  flags::Table table = settings_table(o, &eval_flags());
  table.values["--eval-details"] = [&e](const std::string&, const std::string& v) {
    e.details = v;
  };
  o.given = flags::parse(argc, argv, table, "mpiformer-eval", "--kokkos-");
  if (o.help) return e;
  check_options(o);
  require(!o.eval_data.empty(), "mpiformer-eval scores a task: pass --eval-data FILE");
  require(!o.init_from.empty() || !o.load.empty(),
          "mpiformer-eval scores a trained model: pass --init-from FILE|DIR or --load DIR");
  // As mpiformer-generate: unlike a training run, which resumes --load's checkpoint when there is
  // one and starts from --init-from when not, a score must say which model it is of.
  require(o.init_from.empty() || o.load.empty(),
          "--init-from and --load both name a model; pass one");
  require(o.given.count("--eval-details") == 0 || !e.details.empty(),
          "--eval-details needs a file name");
  if (!e.details.empty()) check_new_output(e.details, "--eval-details " + e.details);
  // Nothing is trained: no steps, no validation, the built-in corpus as the (unread) data, none
  // of them taken from a checkpoint; MFU is not reported, so no GEMM is timed at start-up.
  o.steps = 0;
  o.val_data = "none";
  o.val_every = 0;
  o.peak_gflops = 1.0;
  o.verbose = false;
  for (const char* kept : {"--data", "--val-data", "--steps", "--doc-mask", "--doc-token"}) {
    o.given.insert(kept);
  }
  return e;
}

std::string eval_usage() {
  return "usage: mpiexec -n N mpiformer-eval --init-from MODEL | --load DIR --eval-data FILE "
         "[flags]\n\n"
         "Scores a model on a multiple-choice task as llm.c scores HellaSwag: acc (the ending\n"
         "with the lowest summed loss) and acc_norm (the lowest mean loss), on any layout of\n"
         "N = tp x cp x dp x pp ranks. Flags as mpiformer-train spells them:\n" +
         settings_help(&eval_flags()) +
         help_entry("--eval-details FILE",
                    "write each example's summed and mean loss per ending and its predictions, "
                    "one JSON object per line (a new file)") +
         help_entry("--help", "this text") +
         "Exit status: 0 done, 2 bad input, 3 stopped by a stop signal (SIGUSR1, SIGTERM, SIGINT)\n"
         "before the end: no score; 128+N a second signal N, at once.\n";
}

}  // namespace mpf
