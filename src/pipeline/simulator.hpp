// A whole pipeline in one process: runs a schedule's own loop or its plan's programs
// (schedule_plan.hpp) for all P ranks, one std::thread per simulated rank, with a StageOps that
// records events on a simulated clock instead of computing. The picture of a run therefore comes
// from the code that runs it.
//
// Time model (OpCosts, schedule.hpp):
// - forward / backward_input / backward_weight advance the rank's clock by F / B / W;
// - a verb posts its halves (one, or two for a pair) at the rank's clock, then waits for all; a
//   post_recv_* posts its receive and goes on;
// - buffered sends (the default; what PipelineP2P does, its sends stay in flight): a send
//   completes at once, its message arrives at the sender's clock + P2P, and a receive completes
//   at max(own clock, arrival);
// - rendezvous sends (what a send that waits for its receiver would do, as MPI_Send with large
//   messages): data moves once both ends have posted, and both complete P2P later;
// - a message to the rank's own next chunk (a V's turn) is a local hand-off: it costs nothing and
//   its send never waits;
// - time a rank spends waiting is idle (bubble).
// Each rank's clock depends only on the messages it receives, never on how the threads are
// scheduled, so results are deterministic.
//
// Errors in a schedule are reported instead of hanging or passing silently: a deadlock (every
// unfinished rank waits for a message nobody has sent) names each waiting rank and the (mb,
// chunk, direction) it awaits; a compute call whose input has not arrived, a repeated call, a
// message never received or a microbatch left without its backward name the rank and (mb,
// chunk). A wall-clock timeout backs the detection up.
#pragma once

#include <chrono>
#include <functional>
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/schedule.hpp"
#include "pipeline/schedule_plan.hpp"

namespace mpf::pipeline {

enum class SendMode { kBuffered, kRendezvous };

enum class SimOp { kForward, kBackwardInput, kBackwardWeight };

struct SimEvent {
  SimOp op;
  int mb, chunk;
  double start, end;
};

struct SimulationResult {
  PipelineShape shape;  // stages, virtual_stages, microbatches (rank unused)
  OpCosts costs;
  std::vector<std::vector<SimEvent>> events;  // per rank, in program order
  std::vector<double> busy;                   // per rank: time spent in compute
  double makespan = 0.0;                      // end of the last event
  double bubble_fraction = 0.0;               // sum of idle / (P × makespan)
  // Per rank, counted per (mb, chunk), in program order (with V chunks each holds 1/V of a
  // stage's activations): the most forwards done whose W had not (what the runtime holds: it
  // frees a microbatch's activations at its W), and the most whose B had not (the microbatches
  // "in flight" of 1F1B and of the paper's memory accounting, where what waits for W is smaller).
  std::vector<int> peak_in_flight, peak_before_b;
  int peak_in_flight_overall = 0;  // the largest over ranks
  // Per rank, the buffers its messages need at once (what ModelStage's pools grow to): received
  // output gradients, from the receive's posting to their B (program order, so any timing);
  // input gradients being sent, from their B until the receiver has posted its receive and the
  // data has moved (on the simulated clock, a tie counted busy); and every message through a
  // staged MPI's host buffers, a send's until it completes as above, a receive's from its posting
  // until its data has arrived.
  std::vector<int> peak_grad_receives, peak_grad_sends, peak_messages;
};

// A message's buffer, held from `start` to `end` (SimulationResult::peak_grad_sends and
// peak_messages); mb and chunk: the (microbatch, chunk) of the rank holding it.
struct HeldBuffer {
  double start, end;
  int mb, chunk;
};
// The most input-gradient send buffers busy at once on a rank with `events`: at each B that sends
// (the chunks `first` says are the first virtual stage send none), its own and the earlier
// `sends` not yet received.
int peak_grad_sends(const std::vector<SimEvent>& events, const std::vector<HeldBuffer>& sends,
                    const std::function<bool(int)>& first);
// The most of `held` open at once (a tie opens before it closes).
int peak_open(const std::vector<HeldBuffer>& held);
// The most forwards on a rank, in program order, whose `until` op had not come yet
// (SimulationResult::peak_in_flight with kBackwardWeight, peak_before_b with kBackwardInput).
int peak_before(const std::vector<SimEvent>& events, SimOp until);

// A broken schedule: deadlock, protocol violation, timeout.
class SimulationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using ScheduleLoop = std::function<void(StageOps&, const PipelineShape&)>;

// Runs `loop` on every rank of shape (shape.rank is ignored; rank r gets shape with rank = r).
// Throws SimulationError for a broken schedule, or whatever the loop throws (e.g. InputError).
SimulationResult simulate(const ScheduleLoop& loop, const PipelineShape& shape,
                          const OpCosts& costs = {}, SendMode sends = SendMode::kBuffered,
                          std::chrono::milliseconds timeout = std::chrono::seconds(60));
// A plan's step (its loop, or its programs).
SimulationResult simulate(const SchedulePlan& plan, const OpCosts& costs = {},
                          SendMode sends = SendMode::kBuffered,
                          std::chrono::milliseconds timeout = std::chrono::seconds(60));
// A table through the P2P pass and the executor.
SimulationResult simulate(const ScheduleTable& table, const PipelineShape& shape,
                          const OpCosts& costs = {}, SendMode sends = SendMode::kBuffered,
                          std::chrono::milliseconds timeout = std::chrono::seconds(60));
// The library's schedule s (zb-auto planned with `costs` under P microbatches in flight);
// InputError for a shape it cannot run.
SimulationResult simulate(Schedule s, const PipelineShape& shape, const OpCosts& costs = {},
                          SendMode sends = SendMode::kBuffered,
                          std::chrono::milliseconds timeout = std::chrono::seconds(60));

// "F3" (V = 1) or "F3c1"; W ops are "W3", B ops "B3".
std::string event_label(const SimEvent& e, int virtual_stages);

// One string per rank, as pipeline write-ups draw a schedule, e.g. ".  F0 F1 B0 -- F2": a cell per
// `cell` time units holding the op that covers its middle, its label in its first cell and "-"
// after, "." where the rank is idle. cell is the largest of 1, 1/2, 1/4, 1/5, 1/10, ... that every
// event boundary is a multiple of (exact at unit costs), else makespan / 200 (scaled).
struct Timelines {
  std::vector<std::string> ranks;
  double cell = 1.0;
  bool exact = true;  // every op is drawn to the cell
};
Timelines render_timelines(const SimulationResult& r);

// Chrome / Perfetto trace (chrome://tracing, ui.perfetto.dev): a complete event ("ph": "X") per
// op of non-zero duration, pid 0, tid = rank, ts and dur in microseconds with one simulated time
// unit = 1 µs, name "F3.c1".
void write_chrome_trace(const SimulationResult& r, std::ostream& out);

}  // namespace mpf::pipeline
