// mpiformer-schedule: a driver for the pipeline simulator. Runs the trainer's own schedule loops
// and schedule tables for every rank of a pipeline under a cost model and prints each rank's
// timeline, the bubble and the activations in flight; optionally writes a Chrome/Perfetto trace.
// No MPI, no model.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/flags.hpp"
#include "io/output_file.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/schedule_plan.hpp"
#include "pipeline/simulator.hpp"

namespace {

using mpf::require;
namespace pp = mpf::pipeline;

const char* kUsage = R"(usage: mpiformer-schedule [flags]

Simulates one training step of a pipeline schedule on P ranks: the same loop and table code the
trainer runs, with each op costing a fixed time. Prints every rank's timeline (a cell per time unit;
F<mb> forward, B<mb> backward (its input gradient), W<mb> weight gradient when it has its own cost,
c<k> the chunk with virtual stages, "-" an op continuing, "." idle), then the bubble = idle rank-time
/ (P x makespan), and last a summary line: bubble 27.27% | peak in-flight 4 mb. A step ends with a
synchronous optimizer step, so a bubble is counted within the step (docs/pipelines.md says what the
zero-bubble paper's "zero" counts). Flags take a value as `--flag V` or `--flag=V`.

  --schedule S          afab, 1f1b (default), interleaved, or zero-bubble (W apart from B): zb-h1,
                        zb-h2, zb-v (two chunks per rank in a V), zb-auto (searched for the costs
                        given, under --max-in-flight)
  --pp P                pipeline stages (default 4)
  --virtual-stages V    model chunks per rank: interleaved (default 2), zb-v (2), zb-auto (1, or
                        2 for a V); else 1
  --microbatches M      microbatches per step (default 8; interleaved needs M >= P)
  --f X --b X --w X     cost of a forward, a backward's input gradient and its weight gradient
                        (default 1, 2, 0: W inside B; the zero-bubble schedules default to 1, 1,
                        1, the paper's F = B = W); each also takes one cost per stage,
                        X0,X1,... (a measured profile, e.g. mpiformer-train's summary)
  --p2p X               cost of one message between stages (default 0)
  --max-in-flight N     microbatches' activations a rank may hold (forwarded, W not done):
                        zb-auto's limit (default P, 1F1B's peak); other schedules stop with an
                        error if they need more
  --sends S             buffered (default: a send never waits) or rendezvous (a send waits for
                        its receiver, as MPI does with large messages)
  --trace FILE.json     also write a Chrome/Perfetto trace (chrome://tracing, ui.perfetto.dev;
                        one time unit = 1 us); never overwrites
  --help                this text

Bad input prints one "error:" line and exits with status 2.
)";

struct Options {
  pp::Schedule schedule = pp::Schedule::kOneFOneB;
  int stages = 4, virtual_stages = 0, microbatches = 8;  // virtual_stages 0: the default
  int max_in_flight = 0;                                 // 0: not given
  pp::OpCosts costs;
  bool b_given = false, w_given = false;
  pp::SendMode sends = pp::SendMode::kBuffered;
  std::string trace;
  bool help = false;
};

double to_cost(const std::string& flag, const std::string& text, bool positive) {
  const double v = mpf::flags::to_double(flag, text);
  require(positive ? v > 0 : v >= 0,
          flag + " must be " + (positive ? "positive" : ">= 0") + ", got " + text);
  return v;
}

// "X" (every rank) or "X0,X1,..." (one per rank, a measured profile); positive unless it may be 0.
void costs(const std::string& flag, const std::string& text, double& all,
           std::vector<double>& by_rank, bool positive = true) {
  by_rank.clear();
  if (text.find(',') == std::string::npos) {
    all = to_cost(flag, text, positive);
    return;
  }
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    by_rank.push_back(to_cost(flag, text.substr(start, comma - start), positive));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
}

pp::PipelineShape shape_of(const Options& o) {
  return {o.stages, 0, o.virtual_stages, o.microbatches,
          pp::placement_of(o.schedule, o.virtual_stages)};
}

Options parse(int argc, char** argv) {
  Options o;
  mpf::flags::Table table;
  table.values = {
      {"--schedule", [&](auto&, auto& v) { o.schedule = pp::parse_schedule(v); }},
      {"--pp", [&](auto& f, auto& v) { o.stages = mpf::flags::to_int32(f, v); }},
      {"--virtual-stages",
       [&](auto& f, auto& v) { o.virtual_stages = mpf::flags::to_int32(f, v); }},
      {"--microbatches", [&](auto& f, auto& v) { o.microbatches = mpf::flags::to_int32(f, v); }},
      {"--f", [&](auto& f, auto& v) { costs(f, v, o.costs.forward, o.costs.forward_by_rank); }},
      {"--b",
       [&](auto& f, auto& v) {
         costs(f, v, o.costs.backward_input, o.costs.backward_by_rank);
         o.b_given = true;
       }},
      {"--w",
       [&](auto& f, auto& v) {
         costs(f, v, o.costs.backward_weight, o.costs.weight_by_rank, false);
         o.w_given = true;
       }},
      {"--max-in-flight",
       [&](auto& f, auto& v) {
         o.max_in_flight = mpf::flags::to_int32(f, v);
         require(o.max_in_flight >= 1,
                 "--max-in-flight must be at least 1 microbatch, got " + std::string(v));
       }},
      {"--p2p", [&](auto& f, auto& v) { o.costs.p2p = to_cost(f, v, false); }},
      {"--sends",
       [&](auto&, auto& v) {
         require(v == "buffered" || v == "rendezvous",
                 "unknown --sends '" + v + "': choose buffered or rendezvous");
         o.sends = v == "buffered" ? pp::SendMode::kBuffered : pp::SendMode::kRendezvous;
       }},
      {"--trace", [&](auto&, auto& v) { o.trace = v; }},
  };
  table.switches = {{"--help", [&] { o.help = true; }}, {"-h", [&] { o.help = true; }}};
  mpf::flags::parse(argc, argv, table, "mpiformer-schedule");
  if (o.virtual_stages == 0) {
    o.virtual_stages =
        o.schedule == pp::Schedule::kInterleaved ? 2 : pp::default_virtual_stages(o.schedule);
  }
  pp::validate(shape_of(o), o.schedule);
  // The zero-bubble schedules are about W: without a cost of its own they take the paper's
  // F = B = W.
  if (pp::is_zero_bubble(o.schedule)) {
    if (!o.b_given) o.costs.backward_input = 1.0;
    if (!o.w_given) o.costs.backward_weight = 1.0;
  }
  for (const auto& [flag, by_rank] : {std::make_pair("--f", &o.costs.forward_by_rank),
                                      std::make_pair("--b", &o.costs.backward_by_rank),
                                      std::make_pair("--w", &o.costs.weight_by_rank)}) {
    require(by_rank->empty() || int(by_rank->size()) == o.stages,
            std::string(flag) + " lists " + std::to_string(by_rank->size()) + " costs for --pp " +
                std::to_string(o.stages) + "; give one cost, or one per stage");
  }
  require(o.trace.empty() || !mpf::path_exists(o.trace),
          "--trace " + o.trace + ": already exists; remove it or choose another file name");
  // One thread per simulated rank, and every op is kept: stay within a laptop's means.
  require(o.stages <= 1024, "--pp " + std::to_string(o.stages) +
                                " is more stages than the simulator runs (at most 1024)");
  require(static_cast<double>(o.stages) * o.microbatches * o.virtual_stages <= 1e7,
          "--pp x --microbatches x --virtual-stages is above 10^7 ops; use fewer microbatches");
  return o;
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100.0 * fraction);
  return buf;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string numbers(double all, const std::vector<double>& by_rank) {
  if (by_rank.empty()) return number(all);
  std::string s;
  for (double v : by_rank) s += (s.empty() ? "" : ",") + number(v);
  return s;
}

// Microbatches' worth of activations, at most 2 decimals: "4", "5.5", "5.67".
std::string microbatches(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

// The textbook bubble where one applies: "(P-1)/(M+P-1) = 27.27%".
std::string ideal(const Options& o, const pp::PipelineShape& shape) {
  const double v = pp::ideal_bubble_fraction(shape, o.schedule);
  if (v < 0) return "none in closed form for " + std::string(pp::schedule_name(o.schedule));
  const char* formula = o.schedule == pp::Schedule::kInterleaved ? "(P-1)/(V*M+P-1)"
                        : o.schedule == pp::Schedule::kZbH1      ? "(P-1)/(3M+P-1) at F=B=W"
                                                                 : "(P-1)/(M+P-1)";
  return std::string(formula) + " = " + percent(v);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const mpf::InputError& e) {
    mpf::print_error("%s", e.what());
    return 2;
  }
  if (o.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }

  const pp::PipelineShape shape = shape_of(o);
  pp::SimulationResult r;
  try {
    const pp::SchedulePlan plan(o.schedule, shape, o.costs,
                                o.max_in_flight > 0 ? o.max_in_flight : o.stages);
    if (o.max_in_flight > 0 && o.schedule != pp::Schedule::kZbAuto) {
      pp::require_within_memory(plan, o.max_in_flight);
    }
    r = pp::simulate(plan, o.costs, o.sends);
    if (!o.trace.empty()) {
      std::ofstream out(o.trace);
      require(static_cast<bool>(out), "cannot write --trace " + o.trace + ": " +
                                          std::strerror(errno) + "; choose a writable path");
      pp::write_chrome_trace(r, out);
      out.close();
      require(!out.fail(), "writing --trace " + o.trace + " failed; check the disk");
    }
  } catch (const mpf::InputError& e) {
    mpf::print_error("%s", e.what());
    return 2;
  } catch (const pp::SimulationError& e) {  // a broken schedule: a bug, not the user's input
    mpf::print_error("schedule %s: %s", pp::schedule_name(o.schedule), e.what());
    return 1;
  }

  const int P = o.stages, V = o.virtual_stages;
  const bool w_inside_b = o.costs.backward_weight == 0 && o.costs.weight_by_rank.empty();
  std::printf(
      "%s | pp %d | virtual stages %d%s | microbatches %d | F %s B %s W %s%s P2P %s | %s sends\n",
      pp::schedule_name(o.schedule), P, V,
      shape.placement == pp::ChunkPlacement::kV ? " in a V" : "", o.microbatches,
      numbers(o.costs.forward, o.costs.forward_by_rank).c_str(),
      numbers(o.costs.backward_input, o.costs.backward_by_rank).c_str(),
      numbers(o.costs.backward_weight, o.costs.weight_by_rank).c_str(),
      w_inside_b ? " (inside B)" : "", number(o.costs.p2p).c_str(),
      o.sends == pp::SendMode::kBuffered ? "buffered" : "rendezvous");
  const pp::Timelines t = pp::render_timelines(r);
  std::printf("one cell = %s time unit%s\n", number(t.cell).c_str(),
              t.exact ? "" : " (scaled: short ops may not show)");
  for (int rank = 0; rank < P; ++rank) std::printf("rank %d | %s\n", rank, t.ranks[rank].c_str());

  // In flight in microbatches' worth of a stage's activations: a chunk holds 1/V of them.
  auto in_flight = [&](int chunks) {
    return V == 1 ? std::to_string(chunks)
                  : std::to_string(chunks) + " (mb, chunk) = " + microbatches(double(chunks) / V);
  };
  for (int rank = 0; rank < P; ++rank) {
    std::printf("rank %d | busy %s | idle %s | peak in-flight %s mb (%s before their B)\n", rank,
                number(r.busy[rank]).c_str(), number(r.makespan - r.busy[rank]).c_str(),
                in_flight(r.peak_in_flight[rank]).c_str(),
                microbatches(double(r.peak_before_b[rank]) / V).c_str());
  }
  std::printf("makespan %s | bubble %s | ideal %s\n", number(r.makespan).c_str(),
              percent(r.bubble_fraction).c_str(), ideal(o, shape).c_str());
  if (!o.trace.empty()) std::printf("trace written to %s\n", o.trace.c_str());
  std::printf("bubble %s | peak in-flight %s mb\n", percent(r.bubble_fraction).c_str(),
              microbatches(double(r.peak_in_flight_overall) / V).c_str());
  return 0;
}
