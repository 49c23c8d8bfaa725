// mpiformer-plan: the layout for a model on an allocation, from a cost model of the machine
// (src/plan/): a ranked table of layouts with each one's predicted step split into its terms,
// its peak memory per rank, why the first wins and the command that runs it; --evaluate
// predicts one given layout; --calibrate measures the allocation it is launched on and writes
// its machine file. Input errors are one `error:` line and exit 2.
#include <mpi.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <set>
#include <string>

#include "checkpoint/hf_config.hpp"
#include "checkpoint/llmc_checkpoint.hpp"
#include "core/error.hpp"
#include "core/flags.hpp"
#include "io/output_file.hpp"
#include "layout/model_options.hpp"
#include "layout/options.hpp"
#include "plan/calibrate.hpp"
#include "plan/report.hpp"
#include "runtime.hpp"
#include "train/exit_status.hpp"

namespace {

using mpf::plan::Job;

// mpiformer-train's model flags (the "model" group of layout/settings.cpp, less --init-from: the
// plan's --model).
const char* const kModelFlags[] = {"--layers",
                                   "--heads",
                                   "--dim",
                                   "--vocab",
                                   "--max-seq-len",
                                   "--arch",
                                   "--kv-heads",
                                   "--ffn-dim",
                                   "--norm-eps",
                                   "--rope-theta",
                                   "--rope-scaling",
                                   "--tie-embeddings",
                                   "--sliding-window",
                                   "--head-dim",
                                   "--experts",
                                   "--experts-per-token",
                                   "--moe-renormalize",
                                   "--shared-expert-dim"};

struct PlanOptions {
  // The model, the step and the threads: mpiformer-train's own settings (layout/settings.cpp).
  mpf::TrainOptions run;
  std::string model_path;  // --model
  std::string machine;
  std::string evaluate;
  std::string name;
  int nodes = 1, ranks_per_node = 0, top = 10;
  bool json = false, calibrate = false, quick = false;
};

// The settings mpiformer-plan shares with mpiformer-train.
const std::set<std::string>& shared_flags() {
  static const std::set<std::string> flags = [] {
    std::set<std::string> f = {"--batch",     "--seq-len",           "--precision",
                               "--threads",   "--optimizer",         "--muon-ns-precision",
                               "--p2p-dtype", "--grad-reduce-dtype", "--tp-comm-dtype",
                               "--mtp"};
    for (const char* m : kModelFlags) f.insert(m);
    return f;
  }();
  return flags;
}

std::string usage() {
  return "usage: mpiformer-plan --machine FILE.json (--model PATH | model flags) --batch B "
         "--seq-len T [flags]\n"
         "       mpiexec -n R mpiformer-plan --calibrate --machine OUT.json [--name NAME] "
         "[--threads N]\n\n"
         "Ranks the layouts of a model on N nodes of R ranks by predicted step time "
         "(docs/planning.md):\neach row splits the step into compute, pipeline bubble, the TP, "
         "CP, EP and DP communication\nnot hidden and the optimizer, with the peak memory per "
         "rank, tok/s and MFU; then why the first\nwins, what was excluded and why, and the "
         "mpiexec and srun lines that run it.\n" +
         mpf::help_entry("--machine FILE",
                         "the machine file (--calibrate writes one; "
                         "docs/planning.md has the schema)") +
         mpf::help_entry("--model PATH",
                         "a Hugging Face model directory or its config.json, or "
                         "an llm.c model file; or the model flags below") +
         mpf::help_entry("--nodes N", "nodes (default 1)") +
         mpf::help_entry("--ranks-per-node R",
                         "ranks on each node (default: the machine's devices per node)") +
         mpf::help_entry("--top K", "layouts shown, each predicted in full (default 10, at most " +
                                        std::to_string(mpf::plan::kMaxTop) + ")") +
         mpf::help_entry("--json", "the same as one JSON object, best first") +
         mpf::help_entry("--evaluate L",
                         "predict one layout instead of searching: "
                         "tp=2,pp=2,dp=1,schedule=1f1b,microbatches=4 (also cp, ep, vp, "
                         "micro_batch_size, recompute=0|1|selective, sp, zero, "
                         "zero_group=all|node)") +
         mpf::help_entry("--calibrate",
                         "measure the ranks it is launched on and write --machine (a new file)") +
         mpf::help_entry("--name NAME", "the calibrated machine's name (default: the host's)") +
         mpf::help_entry("--quick", "calibrate fewer sizes, fewer times (for tests)") +
         mpf::help_entry("--help", "this text") +
         "Flags as mpiformer-train spells them (--threads: each rank's while calibrating):\n" +
         mpf::settings_help(&shared_flags()) + "Exit status: 0 done, 2 bad input.\n";
}

PlanOptions parse(int argc, char** argv) {
  PlanOptions o;
  mpf::flags::Table table = mpf::settings_table(o.run, &shared_flags());
  auto text = [](std::string& field) {
    return [&field](const std::string&, const std::string& v) { field = v; };
  };
  auto integer = [](int& field) {
    return [&field](const std::string& f, const std::string& v) {
      field = mpf::flags::to_int32(f, v);
      mpf::require(field >= 1, f + " must be >= 1, got " + v);
    };
  };
  table.values["--model"] = text(o.model_path);
  table.values["--machine"] = text(o.machine);
  table.values["--evaluate"] = text(o.evaluate);
  table.values["--name"] = text(o.name);
  table.values["--nodes"] = integer(o.nodes);
  table.values["--ranks-per-node"] = integer(o.ranks_per_node);
  table.values["--top"] = integer(o.top);
  table.switches["--json"] = [&] { o.json = true; };
  table.switches["--calibrate"] = [&] { o.calibrate = true; };
  table.switches["--quick"] = [&] { o.quick = true; };
  const std::set<std::string> given =
      mpf::flags::parse(argc, argv, table, "mpiformer-plan", "--kokkos-");
  o.run.given = given;
  if (o.run.help) return o;
  mpf::require(!o.machine.empty(), o.calibrate ? "--calibrate writes --machine FILE.json; name it"
                                               : "pass --machine FILE.json (mpiexec -n R "
                                                 "mpiformer-plan --calibrate --machine FILE.json "
                                                 "measures this allocation)");
  if (o.calibrate) return o;
  mpf::require(given.count("--batch") && given.count("--seq-len"),
               "pass --batch B and --seq-len T: the step to plan");
  // Every layout shown is predicted in full, and a search prunes only what would not be shown:
  // a --top past the bound would simulate most of a large search.
  mpf::require(o.top <= mpf::plan::kMaxTop,
               "--top " + std::to_string(o.top) + " is more layouts than a plan shows (at most " +
                   std::to_string(mpf::plan::kMaxTop) +
                   ", each simulated in full); give a smaller --top, or --evaluate a layout");
  mpf::require(o.evaluate.empty() || !given.count("--top"),
               "--top ranks a search's layouts and --evaluate predicts one; drop --top");
  for (const char* f : kModelFlags) {
    mpf::require(o.model_path.empty() || !given.count(f),
                 "--model takes the sizes from " + o.model_path + "; drop " + f);
  }
  return o;
}

// The model, and the trainer flags that make it.
mpf::GPTConfig model_of(const PlanOptions& o, std::string& flags, std::string& note) {
  const std::string& p = o.model_path;
  if (p.empty()) {
    const mpf::GPTConfig cfg = mpf::flags_config(o.run);
    flags = mpf::model_flags(cfg);
    return cfg;
  }
  const bool config = p.size() >= 11 && p.compare(p.size() - 11, 11, "config.json") == 0;
  if (mpf::is_directory(p) || config) {
    const std::string file = config ? p : p + "/config.json";
    mpf::GPTConfig cfg = mpf::read_hf_config(file);
    cfg.mtp = mpf::read_hf_mtp_depth(file);  // the trainer's default --mtp
    // A directory brings its weights; a bare config.json only the sizes, unless no flag sets
    // them (deepseek_v3's latent attention): then the trainer takes them from the directory.
    if (!config) {
      flags = "--init-from " + p;
    } else if (mpf::flags_make_model(cfg)) {
      flags = mpf::model_flags(cfg);
    } else {
      const size_t slash = p.rfind('/');
      const std::string dir = slash == std::string::npos ? "."
                              : slash == 0               ? "/"
                                                         : p.substr(0, slash);
      flags = "--init-from " + dir;
      note = "note: no mpiformer-train flags make " + std::string(mpf::arch_name(cfg.arch)) +
             " model " + p + "'s sizes; the commands take it --init-from " + dir +
             ", which must hold the model's weights (model*.safetensors) beside config.json";
    }
    return cfg;
  }
  flags = "--init-from " + p;
  return mpf::read_checkpoint_config(p);
}

int run_calibration(mpf::Runtime& runtime, const PlanOptions& o, int argc, char** argv) {
  const MPI_Comm world = MPI_COMM_WORLD;
  const int rank = runtime.world_rank();
  if (!mpf::all_ranks_succeed(world, [&] {
        if (rank == 0) mpf::check_new_output(o.machine, "--machine " + o.machine);
      })) {
    return mpf::kExitBadInput;
  }
  const int threads = runtime.start_kernels(o.run.threads, argc, argv);
  if (threads < 0) return mpf::kExitBadInput;
  mpf::plan::CalibrationOptions c;
  c.name = o.name;
  c.threads = threads;
  c.quick = o.quick;
  const mpf::plan::Machine m = mpf::plan::calibrate(c, world);
  if (!mpf::all_ranks_succeed(world, [&] {
        if (rank != 0) return;
        const std::string text = mpf::plan::machine_json(m);
        mpf::PendingFile file(o.machine);
        file.write(text.data(), text.size());
        const std::string error = file.commit();
        mpf::require(error.empty(), "--machine " + o.machine + ": " + error);
        const mpf::plan::PrecisionRates& r = m.rates(mpf::Precision::fp32);
        std::printf(
            "calibrated %s: %d %s(s) a node; fp32 GEMM up to %.1f GFLOP/s a device, "
            "attention %.1f/%.1f GFLOP/s (T %d), element-wise %.1f GB/s a device; "
            "intra-node %.2f GB/s %.1f us, inter-node %.2f GB/s %.1f us, %.1f us a message "
            "beyond; wrote %s\n",
            m.name.c_str(), m.devices_per_node, m.gpu() ? "GPU" : "core", r.peak_gflops,
            r.attention.back().forward_gflops, r.attention.back().backward_gflops,
            r.attention.back().seq_len, m.memory_bandwidth_gbs, m.intra_node.bandwidth_gbs,
            m.intra_node.latency_us, m.inter_node.bandwidth_gbs, m.inter_node.latency_us,
            m.message_overhead_us, o.machine.c_str());
      })) {
    return mpf::kExitBadInput;
  }
  return 0;
}

int plan(mpf::Runtime& runtime, int argc, char** argv) {
  const MPI_Comm world = MPI_COMM_WORLD;
  const int rank = runtime.world_rank();
  PlanOptions o;
  if (!mpf::all_ranks_succeed(world, [&] { o = parse(argc, argv); })) return mpf::kExitBadInput;
  if (o.run.help) {
    if (rank == 0) std::fputs(usage().c_str(), stdout);
    return 0;
  }
  if (o.calibrate) return run_calibration(runtime, o, argc, argv);
  // Planning is arithmetic and a simulation: rank 0 does it, the others wait for its verdict.
  const bool ok = mpf::all_ranks_succeed(world, [&] {
    if (rank != 0) return;
    const mpf::plan::Machine machine = mpf::plan::read_machine(o.machine);
    Job job;
    mpf::plan::ReportInput in;
    job.cfg = model_of(o, in.model_flags, in.model_note);
    // --mtp: fewer multi-token prediction modules than the model's, as the trainer takes them.
    if (o.run.mtp >= 0) {
      mpf::require(o.run.mtp <= job.cfg.mtp,
                   "--mtp " + std::to_string(o.run.mtp) + ": the model has " +
                       std::to_string(job.cfg.mtp) +
                       " multi-token prediction modules (deepseek_v3's num_nextn_predict_layers); "
                       "pass --mtp " +
                       std::to_string(job.cfg.mtp) + " or less");
      job.cfg.mtp = o.run.mtp;
      in.model_flags += " --mtp " + std::to_string(o.run.mtp);
    }
    job.batch = o.run.batch;
    job.seq_len = o.run.seq_len;
    job.precision = o.run.precision;
    machine.rates(job.precision);  // an error now if the file lacks it
    // Muon: its Newton-Schulz products and gathers in the optimizer term, its workspace in the
    // memory (docs/planning.md); refused as the trainer refuses it.
    job.muon = o.run.optimizer == "muon";
    mpf::require(job.muon || !o.run.given.count("--muon-ns-precision"),
                 "--muon-ns-precision sets Muon, and the optimizer is " + o.run.optimizer +
                     "; pass --optimizer muon too");
    mpf::require(!job.muon || !job.cfg.mla(),
                 "deepseek_v3's multi-head latent attention does not give its matrices to Muon "
                 "yet; use --optimizer adamw");
    job.muon_products =
        o.run.muon_ns_precision == "bf16" ? mpf::Precision::bf16 : mpf::Precision::fp32;
    if (job.muon) {
      mpf::require(machine.precisions.count(job.muon_products) != 0,
                   "machine " + machine.name + " gives no rates for " +
                       mpf::precision_name(job.muon_products) + " products; add device." +
                       mpf::precision_name(job.muon_products) +
                       " to its file, or plan --muon-ns-precision fp32");
    }
    // The messages' bytes, refused as the trainer refuses them.
    job.p2p_bf16 = o.run.p2p_dtype == "bf16";
    job.reduce_bf16 = o.run.grad_reduce_dtype == "bf16";
    mpf::require(!job.p2p_bf16 || job.precision == mpf::Precision::bf16,
                 "--p2p-dtype bf16 needs --precision bf16; add it, or send in fp32");
    mpf::require(!job.reduce_bf16 || job.precision == mpf::Precision::bf16,
                 "--grad-reduce-dtype bf16 needs --precision bf16; add it, or reduce in fp32");
    job.tp_bf16 = o.run.tp_comm_dtype == "bf16";
    mpf::require(!job.tp_bf16 || job.precision == mpf::Precision::bf16,
                 "--tp-comm-dtype bf16 needs --precision bf16; add it, or run the TP collectives "
                 "in fp32");
    // On a GPU the trainer's bf16 sums run on host copies: their time needs the PCIe link.
    const std::string sums = job.tp_bf16 ? "--tp-comm-dtype" : "--grad-reduce-dtype";
    mpf::require(
        !machine.gpu() || !(job.tp_bf16 || job.reduce_bf16) || machine.host_link.bandwidth_gbs > 0,
        sums + " bf16: on a GPU the trainer sums bf16 on host copies, and machine " + machine.name +
            " gives no host_link (a GPU's PCIe to host memory); add \"host_link\" to "
            "its file, or plan " +
            sums + " fp32");
    job.nodes = o.nodes;
    job.ranks_per_node = o.ranks_per_node > 0 ? o.ranks_per_node : machine.devices_per_node;
    // In 64 bits: an int product would wrap into a world of negative or zero ranks.
    const int64_t world = int64_t(job.nodes) * job.ranks_per_node;
    mpf::require(world <= mpf::plan::kMaxRanks,
                 "--nodes " + std::to_string(job.nodes) + " x --ranks-per-node " +
                     std::to_string(job.ranks_per_node) + " = " + std::to_string(world) +
                     " ranks, more than the " + std::to_string(mpf::plan::kMaxRanks) +
                     " a plan may have; plan fewer nodes or ranks per node");
    mpf::require(!machine.gpu() || job.ranks_per_node <= machine.devices_per_node,
                 "--ranks-per-node " + std::to_string(job.ranks_per_node) + " is more than the " +
                     std::to_string(machine.devices_per_node) + " GPUs a node of " + machine.name +
                     " has; use at most one rank per GPU");
    in.job = &job;
    in.machine = &machine;
    in.machine_path = o.machine;
    in.top = o.top;
    if (!o.evaluate.empty()) {
      const mpf::plan::Layout l = mpf::plan::parse_layout(o.evaluate, job);
      const mpf::plan::Candidate c = mpf::plan::evaluate(job, machine, l);
      mpf::require(c.problem.empty(), "--evaluate " + o.evaluate + " cannot run: " + c.problem);
      std::vector<mpf::plan::Candidate> one{c};
      in.top = 1;
      in.include_unfit = true;
      std::fputs(o.json ? mpf::plan::json_report(in, one).c_str()
                        : mpf::plan::text_evaluation(in, c).c_str(),
                 stdout);
      return;
    }
    mpf::plan::SearchOptions search;
    search.top = o.top;
    // Progress on a terminal only: a log or a test's captured stderr stays clean.
    const bool terminal = isatty(fileno(stderr));
    std::chrono::steady_clock::time_point last{};  // the first call prints
    if (terminal) {
      search.progress = [&last](size_t weighed, size_t predicted) {
        const auto now = std::chrono::steady_clock::now();
        if (now - last < std::chrono::milliseconds(250)) return;
        last = now;
        std::fprintf(stderr, "\rplanning: %zu layouts weighed, %zu predicted in full ...", weighed,
                     predicted);
        std::fflush(stderr);
      };
    }
    const std::vector<mpf::plan::Candidate> ranked = mpf::plan::search(job, machine, search);
    if (terminal) std::fputs("\r\033[K", stderr);
    std::fputs(o.json ? mpf::plan::json_report(in, ranked).c_str()
                      : mpf::plan::text_report(in, ranked).c_str(),
               stdout);
  });
  return ok ? 0 : mpf::kExitBadInput;
}

}  // namespace

int main(int argc, char** argv) {
  mpf::Runtime runtime(&argc, &argv);
  return runtime.finish(plan(runtime, argc, argv));
}
