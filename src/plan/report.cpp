#include "plan/report.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "io/json.hpp"

namespace mpf::plan {

namespace {

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

// " --optimizer muon" and its products' precision where planned so; "" for AdamW.
std::string optimizer_flags(const Job& job) {
  if (!job.muon) return "";
  return std::string(" --optimizer muon") +
         (job.muon_products == Precision::bf16 ? " --muon-ns-precision bf16" : "");
}

// The messages' bytes, as the job was planned with them.
std::string dtype_flags(const Job& job) {
  return std::string(job.p2p_bf16 ? " --p2p-dtype bf16" : "") +
         (job.reduce_bf16 ? " --grad-reduce-dtype bf16" : "") +
         (job.tp_bf16 ? " --tp-comm-dtype bf16" : "");
}

std::string common_flags(const ReportInput& in, const Layout& l) {
  std::string s = in.model_flags + " --batch " + std::to_string(in.job->batch) + " --seq-len " +
                  std::to_string(in.job->seq_len);
  if (in.job->precision == Precision::bf16) s += " --precision bf16";
  s += optimizer_flags(*in.job) + dtype_flags(*in.job);
  return s + " " + layout_flags(l);
}

std::string schedule_cell(const Layout& l) {
  if (l.pp == 1) return "-";
  std::string s = pipeline::schedule_name(l.schedule);
  if (l.virtual_stages > 1) s += "/v" + std::to_string(l.virtual_stages);
  return s;
}

const char* yes(bool b) {
  return b ? "yes" : "-";
}

// ZeRO's stage, "n" after it under HSDP (--zero-group node), or "-".
const char* zero_cell(int stage, bool node) {
  static const char* cells[] = {"-", "1", "2", "3"};
  static const char* node_cells[] = {"-", "1n", "2n", "3n"};
  return node ? node_cells[stage] : cells[stage];
}

// The term by which `b` is slower than `a`, as "+12.3 ms of TP communication".
std::string biggest_gap(const StepTerms& a, const StepTerms& b) {
  const std::pair<const char*, double> gaps[] = {
      {"compute", b.compute - a.compute},      {"pipeline bubble", b.bubble - a.bubble},
      {"TP communication", b.tp - a.tp},       {"CP communication", b.cp - a.cp},
      {"EP all-to-alls", b.ep - a.ep},         {"DP gradient sums", b.dp - a.dp},
      {"optimizer", b.optimizer - a.optimizer}};
  const auto* worst =
      std::max_element(std::begin(gaps), std::end(gaps),
                       [](const auto& x, const auto& y) { return x.second < y.second; });
  return fmt("%+.1f ms of ", worst->second) + worst->first;
}

// "3.2% slower: +12.3 ms of TP communication", or "as fast (within 0.1%)".
std::string slower(const Prediction& best, const Prediction& other) {
  const double r = other.ms.step() / best.ms.step() - 1;
  if (r < 0.001) return "as fast (within 0.1%)";
  return fmt("%.1f%% slower: ", 100 * r) + biggest_gap(best.ms, other.ms);
}

std::string shape_of(const Layout& l) {
  std::string s = "tp " + std::to_string(l.tp);
  if (l.cp > 1) s += " x cp " + std::to_string(l.cp);
  s += " x pp " + std::to_string(l.pp) + " x dp " + std::to_string(l.dp);
  if (l.ep > 1) s += " (ep " + std::to_string(l.ep) + ")";
  return s;
}

std::string table_row(int rank, const Candidate& c, const Job& job) {
  const Layout& l = c.layout;
  const Prediction& p = c.predicted;
  const StepTerms& t = p.ms;
  char buf[320];
  std::snprintf(
      buf, sizeof buf,
      "%3d %3d %3d %3d %3d %4d  %-14s %4d %4d  %-3s %-3s %-3s %9.1f %8.1f %7.1f %6.1f %6.1f "
      "%6.1f %6.1f %6.1f %8.2f %9.0f %5.1f%%\n",
      rank, l.tp, l.cp, l.ep, l.pp, l.dp, schedule_cell(l).c_str(), l.microbatches,
      l.micro_batch_size(job), l.selective ? "sel" : yes(l.recompute), yes(l.sequence_parallel),
      zero_cell(l.zero, l.zero_node), t.step(), t.compute, t.bubble, t.tp, t.cp, t.ep, t.dp,
      t.optimizer, double(p.memory.total()) / 1e9, p.tokens_per_s, 100 * p.mfu);
  return buf;
}

const char* kHeader =
    "  # tp  cp  ep  pp   dp  schedule          M    b  rc  sp  zero  step ms  compute  bubble "
    "    tp     cp     ep     dp    opt  peak GB     tok/s   MFU\n";

// The best the GPU build's fused attention has reached: 4.39 TFLOP/s forward, bf16, T = 16,384,
// on an H200 (docs/gpu.md), about 1% of SDPA's there.
constexpr double kBuildGpuAttentionGflops = 4390;

// Where the machine file's figures come from, and, where a GPU file's attention rate is not
// measured and far past what this build's attention reaches, one line that says so.
std::string machine_lines(const ReportInput& in) {
  const Machine& m = *in.machine;
  const Job& job = *in.job;
  std::string s =
      "machine figures: " +
      std::string(m.source == "calibrated"   ? "calibrated (mpiformer-plan --calibrate)"
                  : m.source == "data sheet" ? "from a data sheet, not measured"
                                             : "of unstated source (no \"source\" key)") +
      "\n";
  if (!in.model_note.empty()) s += in.model_note + "\n";
  if (m.gpu() && m.source != "calibrated") {
    const double gflops = 1e3 / attention_ms(m, job.precision, 1e9, job.seq_len, false, 1);
    if (gflops > 10 * kBuildGpuAttentionGflops) {
      s += fmt("note: the file's attention rate, %.0f TFLOP/s", gflops / 1e3) + " (" +
           precision_name(job.precision) + "), is not this build's: its fused attention has " +
           fmt("reached %.1f TFLOP/s on a GPU (docs/gpu.md), so ", kBuildGpuAttentionGflops / 1e3) +
           "attention will take longer than predicted here; calibrate on the GPU for its rate\n";
    }
  }
  return s;
}

std::string jnum(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

}  // namespace

std::string mpiexec_command(const ReportInput& in, const Layout& l) {
  return "mpiexec -n " + std::to_string(in.job->world()) + " mpiformer-train " +
         common_flags(in, l);
}

std::string srun_command(const ReportInput& in, const Layout& l) {
  return "srun --nodes=" + std::to_string(in.job->nodes) +
         " --ntasks-per-node=" + std::to_string(in.job->ranks_per_node) +
         " --distribution=block mpiformer-train " + common_flags(in, l);
}

std::string job_script_command(const ReportInput& in, const Layout& l) {
  const Job& job = *in.job;
  const std::string init = "--init-from ";
  const std::string model = in.model_flags.compare(0, init.size(), init) == 0
                                ? "INIT_FROM=" + in.model_flags.substr(init.size())
                                : "MODEL=\"" + in.model_flags + "\"";
  std::string extra = layout_extra_flags(l).substr(1);
  if (job.precision == Precision::bf16) extra += " --precision bf16";
  extra += optimizer_flags(job) + dtype_flags(job);
  return "TP=" + std::to_string(l.tp) + " PP=" + std::to_string(l.pp) +
         " DP=" + std::to_string(l.dp) + " BATCH=" + std::to_string(job.batch) +
         " SEQ_LEN=" + std::to_string(job.seq_len) + " " + model + " EXTRA_ARGS=\"" + extra +
         "\" sbatch --nodes=" + std::to_string(job.nodes) +
         " --ntasks-per-node=" + std::to_string(job.ranks_per_node) +
         (in.machine->gpu() ? " ci/slurm/gpu.sbatch" : " ci/slurm/cpu.sbatch");
}

std::string text_evaluation(const ReportInput& in, const Candidate& c) {
  std::string s = "layout " + layout_text(c.layout) + "\n" + machine_lines(in);
  if (!c.problem.empty()) return s + "cannot run: " + c.problem + "\n";
  const Prediction& p = c.predicted;
  const StepTerms& t = p.ms;
  s += fmt("predicted step %.1f ms = ", t.step()) + fmt("compute %.1f", t.compute) +
       fmt(" + bubble %.1f", t.bubble) + fmt(" + TP %.1f", t.tp) + fmt(" + CP %.1f", t.cp) +
       fmt(" + EP %.1f", t.ep) + fmt(" + DP %.1f", t.dp) +
       fmt(" + optimizer %.1f ms\n", t.optimizer);
  s += fmt("%.0f tok/s, ", p.tokens_per_s) + fmt("MFU %.1f%%, ", 100 * p.mfu) +
       fmt("pipeline bubble %.1f%% of the makespan\n", 100 * p.bubble_fraction);
  s += "memory: " + p.memory.summary() + "; the rank may use " + gigabytes(p.memory_limit) +
       (p.fits ? "" : ": DOES NOT FIT") + "\n";
  s += "run it:\n  " + mpiexec_command(in, c.layout) + "\n  " + srun_command(in, c.layout) +
       "\n  " + job_script_command(in, c.layout) + "\n";
  return s;
}

std::string text_report(const ReportInput& in, const std::vector<Candidate>& ranked) {
  const Job& job = *in.job;
  const Machine& m = *in.machine;
  std::string s = "plan: " + std::to_string(job.world()) + " ranks (" + std::to_string(job.nodes) +
                  " node(s) x " + std::to_string(job.ranks_per_node) + "), batch " +
                  std::to_string(job.batch) + " x " + std::to_string(job.seq_len) + ", " +
                  precision_name(job.precision) + ", machine " + m.name + " (" + in.machine_path +
                  ")\n" + machine_lines(in);
  std::vector<const Candidate*> ok, heavy;
  std::map<std::string, std::pair<size_t, const Candidate*>> excluded;  // reason -> count, example
  size_t pruned = 0, cannot = 0;
  for (const Candidate& c : ranked) {
    if (c.ok()) {
      ok.push_back(&c);
    } else if (c.pruned) {
      ++pruned;
    } else if (c.problem.empty()) {
      heavy.push_back(&c);
    } else {
      std::string reason = c.problem.substr(0, c.problem.find(':'));
      auto& e = excluded[reason];
      if (e.first == 0) e.second = &c;
      e.first += c.count;
      cannot += c.count;
    }
  }
  s += std::to_string(ok.size() + heavy.size() + pruned + cannot) +
       " layouts: " + std::to_string(ok.size()) + " run and fit, " + std::to_string(heavy.size()) +
       " do not fit, " + std::to_string(cannot) + " cannot run";
  if (pruned > 0) {
    s += ", " + std::to_string(pruned) +
         " not simulated (a lower bound of each step is slower than every layout shown)";
  }
  s += "\n\n";
  if (ok.empty()) {
    s += "no layout fits";
    if (!heavy.empty()) {
      const Candidate& c = *heavy.front();
      s += ": the smallest, " + layout_text(c.layout) + ", needs " +
           (c.memory_bound_only ? "at least " : "") + gigabytes(c.predicted.memory.total()) +
           " per rank of " + gigabytes(c.predicted.memory_limit) + " (" +
           c.predicted.memory.summary() + "); more nodes, a shorter --seq-len or a smaller --batch";
    }
    return s + "\n";
  }
  s += kHeader;
  for (size_t i = 0; i < ok.size() && int(i) < in.top; ++i) s += table_row(int(i) + 1, *ok[i], job);
  const Candidate& best = *ok.front();
  s += "\n(ms per step; compute, bubble and tp/cp/ep are the busiest pipeline stage's, tp/cp/ep/dp "
       "the communication not hidden; M microbatches of b sequences per DP rank; peak GB per "
       "rank)\n\nwhy #1: " +
       shape_of(best.layout) + ", " + schedule_cell(best.layout) + "\n";
  if (ok.size() > 1) {
    const Candidate& next = *ok[1];
    s += "  the next, #2, is " + slower(best.predicted, next.predicted) + "\n";
  }
  // The best of each other shape, and what it loses by.
  std::map<std::string, const Candidate*> shapes;
  for (const Candidate* c : ok) shapes.emplace(shape_of(c->layout), c);
  std::vector<const Candidate*> others;
  for (const auto& [name, c] : shapes) {
    if (name != shape_of(best.layout)) others.push_back(c);
  }
  std::sort(others.begin(), others.end(), [](const Candidate* a, const Candidate* b) {
    return a->predicted.ms.step() < b->predicted.ms.step();
  });
  for (size_t i = 0; i < others.size() && i < 4; ++i) {
    const Candidate& c = *others[i];
    s += "  the best " + shape_of(c.layout) + " is " + slower(best.predicted, c.predicted) + "\n";
  }
  if (!heavy.empty()) {
    const Candidate& c = *heavy.front();
    s += "excluded, does not fit (" + std::to_string(heavy.size()) + "): e.g. " +
         layout_text(c.layout) + " needs " + (c.memory_bound_only ? "at least " : "") +
         gigabytes(c.predicted.memory.total()) + " per rank of " +
         gigabytes(c.predicted.memory_limit) + "\n";
  }
  for (const auto& [reason, e] : excluded) {
    s += "excluded, " + reason + " (" + std::to_string(e.first) + "): e.g. " +
         layout_text(e.second->layout) + ": " + e.second->problem + "\n";
  }
  s += "\nrun #1:\n  " + mpiexec_command(in, best.layout) + "\n  " + srun_command(in, best.layout) +
       "\nor through the job script:\n  " + job_script_command(in, best.layout) + "\n";
  return s;
}

std::string json_report(const ReportInput& in, const std::vector<Candidate>& ranked) {
  const Job& job = *in.job;
  const Machine& m = *in.machine;
  std::string s = "{\"machine\": {\"name\": " + json::quote(m.name) +
                  ", \"file\": " + json::quote(in.machine_path) +
                  ", \"source\": " + json::quote(m.source) + ", \"kind\": " + json::quote(m.kind) +
                  ", \"devices_per_node\": " + std::to_string(m.devices_per_node) +
                  "}, \"job\": {\"nodes\": " + std::to_string(job.nodes) +
                  ", \"ranks_per_node\": " + std::to_string(job.ranks_per_node) +
                  ", \"batch\": " + std::to_string(job.batch) +
                  ", \"seq_len\": " + std::to_string(job.seq_len) +
                  ", \"precision\": " + json::quote(precision_name(job.precision)) +
                  "}, \"candidates\": [";
  int shown = 0;
  size_t excluded = 0, pruned = 0;
  for (const Candidate& c : ranked) {
    if (c.pruned) {
      ++pruned;
      continue;
    }
    if (!c.ok() && !(in.include_unfit && c.problem.empty())) {
      excluded += c.count;
      continue;
    }
    if (shown >= in.top) continue;
    const Layout& l = c.layout;
    const Prediction& p = c.predicted;
    s += std::string(shown++ ? ", " : "") + "\n  {\"tp\": " + std::to_string(l.tp) +
         ", \"cp\": " + std::to_string(l.cp) + ", \"ep\": " + std::to_string(l.ep) +
         ", \"pp\": " + std::to_string(l.pp) + ", \"dp\": " + std::to_string(l.dp) +
         ", \"virtual_stages\": " + std::to_string(l.virtual_stages) +
         ", \"schedule\": " + json::quote(pipeline::schedule_name(l.schedule)) +
         ", \"microbatches\": " + std::to_string(l.microbatches) +
         ", \"micro_batch_size\": " + std::to_string(l.micro_batch_size(job)) +
         ", \"recompute\": " +
         (l.recompute   ? "\"full\""
          : l.selective ? "\"selective\""
                        : "\"none\"") +
         ", \"sequence_parallel\": " + (l.sequence_parallel ? "true" : "false") +
         ", \"zero\": " + std::to_string(l.zero) +
         ", \"zero_group\": " + (l.zero_node ? "\"node\"" : "\"all\"") +
         ", \"fits\": " + (p.fits ? "true" : "false") +
         ", \"predicted\": {\"step_ms\": " + jnum(p.ms.step()) +
         ", \"compute_ms\": " + jnum(p.ms.compute) + ", \"bubble_ms\": " + jnum(p.ms.bubble) +
         ", \"tp_ms\": " + jnum(p.ms.tp) + ", \"cp_ms\": " + jnum(p.ms.cp) +
         ", \"ep_ms\": " + jnum(p.ms.ep) + ", \"dp_ms\": " + jnum(p.ms.dp) +
         ", \"optimizer_ms\": " + jnum(p.ms.optimizer) +
         ", \"tokens_per_s\": " + jnum(p.tokens_per_s) + ", \"mfu\": " + jnum(p.mfu) +
         ", \"peak_mb_per_rank\": " + jnum(double(p.memory.total()) / 1e6) +
         ", \"bubble\": " + jnum(p.bubble_fraction) +
         "}, \"command\": " + json::quote(mpiexec_command(in, l)) +
         ", \"srun\": " + json::quote(srun_command(in, l)) + "}";
  }
  s += "\n], \"excluded\": " + std::to_string(excluded) +
       ", \"pruned\": " + std::to_string(pruned) + "}\n";
  return s;
}

}  // namespace mpf::plan
