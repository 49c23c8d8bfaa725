// mpiformer-bench: training throughput of one GPT-2 (or Llama) configuration (AdamW inside the
// step) on the ranks it is launched with: data parallel, or tensor parallel with `--tp T`. Prints
// one result line (and, with --profile, where the step's time goes). ci/bench_throughput.sh (make
// bench) runs it row by row, alternating with PyTorch on the same model, batch and threads.
//
//   mpiexec -n R mpiformer-bench [--model gpt2-124M|llama-124M|mixtral-124M|small] [--batch B]
//   [--seq-len T]
//       [--steps N] [--tp T] [--cp N] [--recompute] [--precision fp32|bf16] [--gemm LIB]
//       [--peak-gflops X] [--profile]
//
// MFU is against the best GEMM rate measured in the process, or against --peak-gflops (per rank),
// e.g. a GPU's dense peak from its data sheet.
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backends/gemm.hpp"
#include "core/error.hpp"
#include "core/flags.hpp"
#include "core/parallel.hpp"
#include "core/profile.hpp"
#include "layout/model_options.hpp"
#include "layout/options.hpp"
#include "layout/peak.hpp"
#include "layout/step_log.hpp"
#include "runtime.hpp"
#include "train/trainer.hpp"

namespace {

struct Row {
  std::string model = "gpt2-124M";
  int warmup = 2;
  // The step, the layout and the system: mpiformer-train's own settings (layout/settings.cpp).
  mpf::TrainOptions run;
};

// The settings mpiformer-bench shares with mpiformer-train.
const std::set<std::string>& shared_flags() {
  static const std::set<std::string> flags = {"--batch",
                                              "--seq-len",
                                              "--steps",
                                              "--tp",
                                              "--cp",
                                              "--ep",
                                              "--moe-a2a-chunks",
                                              "--recompute",
                                              "--precision",
                                              "--gemm",
                                              "--peak-gflops",
                                              "--profile",
                                              "--attention",
                                              "--init-from",
                                              "--mtp",
                                              "--moe-bias-update-rate"};
  return flags;
}

std::string usage() {
  return "usage: mpiexec -n R mpiformer-bench [flags]\n"
         "Training throughput of one model on the ranks given: data parallel, or tensor parallel "
         "with --tp.\n" +
         mpf::help_entry("--model M",
                         "gpt2-124M (default), llama-124M (GPT-2 124M's size as a Llama), "
                         "mixtral-124M (llama-124M with 8 experts of F 1024, top-2: the same "
                         "active parameters per token) or small; --init-from DIR: a Hugging "
                         "Face model directory's model in its place (ci/bench_deepseek.sh's)") +
         mpf::help_entry("--warmup N",
                         "untimed steps (default 2; 1 for long sequences, whose steps take "
                         "minutes)") +
         mpf::help_entry("--help", "this text") +
         "Flags as mpiformer-train spells them, with its defaults shown; the bench's own are "
         "--batch 4\n--seq-len 64 --steps 8, and --peak-gflops X measures MFU against X GFLOP/s "
         "per rank:\n" +
         mpf::settings_help(&shared_flags());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Row parse(int argc, char** argv) {
  Row r;
  mpf::TrainOptions& o = r.run;
  o.batch = 4;  // the bench's defaults
  o.seq_len = 64;
  o.steps = 8;
  mpf::flags::Table table = mpf::settings_table(o, &shared_flags());
  table.values["--model"] = [&](const std::string&, const std::string& v) {
    mpf::require(
        v == "gpt2-124M" || v == "small" || v == "llama-124M" || v == "mixtral-124M",
        "--model " + v + " is not a bench model; use gpt2-124M, llama-124M, mixtral-124M or small");
    r.model = v;
  };
  table.values["--warmup"] = [&](const std::string& f, const std::string& v) {
    r.warmup = mpf::flags::to_int32(f, v);
  };
  o.given = mpf::flags::parse(argc, argv, table, "mpiformer-bench", "--kokkos-");
  if (o.help) return r;
  mpf::require(r.warmup >= 1 && o.steps > r.warmup,
               "--steps must exceed --warmup (>= 1): the warm-up steps are not timed");
  mpf::require(o.gemm.empty() || mpf::backend::select(o.gemm),
               "--gemm " + o.gemm + " is not a GEMM library of this build");
  if (o.precision == mpf::Precision::bf16) {
    const std::string missing = mpf::backend::kernels().bf16_missing;
    mpf::require(missing.empty(), "--precision bf16: " + missing);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  mpf::Runtime runtime(&argc, &argv);
  const int rank = runtime.world_rank();
  Row row;
  if (!mpf::all_ranks_succeed(MPI_COMM_WORLD, [&] { row = parse(argc, argv); })) return 2;
  if (row.run.help) {
    if (rank == 0) std::fputs(usage().c_str(), stdout);
    return 0;
  }
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const int threads = runtime.start_kernels(0, argc, argv);
  if (threads < 0 || !runtime.choose_mpi_memory("auto")) return 2;
  {
    mpf::TrainOptions o = row.run;
    const bool small = row.model == "small";  // the small GPT-2 of the notes: L4 H4 C256
    // --init-from: the file's model (its sizes, the flags' defaults), named by its directory.
    const bool file = !o.init_from.empty();
    if (file) row.model = o.init_from.substr(o.init_from.find_last_of('/') + 1);
    o.layers = small ? 4 : 12;
    o.heads = small ? 4 : 12;
    o.dim = small ? 256 : 768;
    o.vocab = 50257;
    o.max_seq_len = std::max(1024, o.seq_len);  // long-context rows: positions up to T
    if (row.model == "llama-124M") {  // ci/bench_torch.py's: GPT-2 124M's size as a tied Llama
      o.arch = "llama";
      o.kv_heads = 4;
      o.ffn_dim = 2048;
      o.rope_theta = 500000.0f;
    }
    if (row.model == "mixtral-124M") {  // llama-124M's active parameters: 2 of 8 experts of F/2
      o.arch = "mixtral";
      o.kv_heads = 4;
      o.ffn_dim = 1024;
      o.rope_theta = 500000.0f;
      o.experts = 8;
      o.experts_per_token = 2;
      o.moe_renormalize = 1;
      o.moe_aux_coef = 0.01f;
    }
    o.val_every = 0;
    o.verbose = false;
    o.overlap_grad_reduce = true;  // data parallel: reduce buckets during the backward
    // The peak before the run and after it, the better kept: a moment of contention from another
    // tenant cannot inflate the MFU column (--peak-gflops: as given).
    // A layout the model does not split into (--tp 3 of 4 kv heads, an odd --batch over 2 ranks)
    // is one error line and exit 2, as in mpiformer-train, before the peak is measured.
    mpf::RunInputs inputs;
    std::unique_ptr<mpf::TrainingRun> run;
    mpf::GPTConfig cfg;  // the model as it trains (a file's --mtp modules included)
    const bool built =
        mpf::all_ranks_succeed(MPI_COMM_WORLD,
                               [&] {
                                 inputs = mpf::load_inputs(o, mpf::StartPoint{}, rank);
                                 cfg = inputs.cfg;
                               }) &&
        mpf::all_ranks_succeed(MPI_COMM_WORLD, [&] {
          run = std::make_unique<mpf::TrainingRun>(std::move(inputs), MPI_COMM_WORLD);
        });
    if (!built) return 2;
    double peak = run->peak_rate().gflops;  // measured before the run's allocations
    const std::vector<double> ms = run->train().step_ms;
    const double predicted = double(run->memory_plan().total());
    run.reset();
    if (o.peak_gflops <= 0) peak = std::max(peak, mpf::measure_peak(o.precision).gflops);
    const double peak_all = mpf::allreduce_sum(peak, MPI_COMM_WORLD);
    // The most memory any rank held: its peak resident set (Linux reports KB).
    struct rusage usage {};
    getrusage(RUSAGE_SELF, &usage);
    double rss = double(usage.ru_maxrss) * 1024.0, most = 0.0;
    MPI_Allreduce(&rss, &most, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
      // The first two steps fault in pages and warm caches; the median of the rest is the figure.
      const std::vector<double> timed(ms.begin() + row.warmup, ms.end());
      const double s = median(timed) / 1e3, tokens = double(o.batch) * o.seq_len;
      const double flops = mpf::flops_per_token(cfg, o.seq_len);
      const double mfu = flops * tokens / s / (peak_all * 1e9);
      const mpf::backend::Kernels k = mpf::backend::kernels();
      std::printf(
          "mpiformer | %s | %d x %d | %s%d x %dt | %s | %.4f s/step | %.1f tok/s | MFU %.1f%% | "
          "peak %.0f GFLOP/s/rank | gemm: %s %s%s%s | peak RSS %.2f GB/rank (predicted %.2f)%s | "
          "%.1f MFLOP/token\n",
          row.model.c_str(), o.batch, o.seq_len,
          o.tp > 1 ? "tp" : (o.cp > 1 ? "cp" : (o.ep > 1 ? "ep" : "dp")), ranks, threads,
          mpf::precision_name(o.precision), s, tokens / s, 100.0 * mfu, peak_all / ranks,
          k.library.c_str(), k.isa.c_str(),
          k.narrower.empty() ? "" : " | narrower: ", k.narrower.c_str(), most / 1e9,
          predicted / 1e9, o.recompute == "none" ? "" : (" | recompute " + o.recompute).c_str(),
          flops / 1e6);
      std::fflush(stdout);
    }
  }
  return 0;
}
