// A rank's program: its compute nodes with the P2P verbs between them, what one executor runs
// through StageOps on the model and in the simulator alike.
//
// The pass (p2p_pass.cpp), per rank, in two steps:
// 1. A receive right before the compute that needs it (F: its input; B, BW: its output's
//    gradient), a send right after the compute that produces it (F: the output; B: the input
//    gradient, at once, so W does not delay it; BW: after its W). A send followed at once by a
//    receive in the opposite direction becomes one paired verb, as in 1F1B's steady state. This
//    is the loops' own placement: a loop's recorded table (loop_table) comes back as exactly the
//    loop's op sequence, so a zero-bubble table placed this way talks as the loops do, and
//    zb-auto may run 1F1B's table as one of its candidates.
// 2. Rendezvous safety: if sends waited for their receivers, two neighbours could each sit in a
//    send to the other while the matching receives come later in both programs. The pass plays
//    the programs with such sends and, wherever two ranks block each other that way, posts one
//    of the receives ahead (post_recv_*) right before the blocked verb — a gradient's when it
//    can, whose buffer exists since its forward. No compute moves and no wait is added, so the
//    timing with sends that do not wait is unchanged. Chunks on a chain (V = 1, or a V) only ever
//    block in pairs; the interleaved ring (V > 1, looped) is left as the loop has it, since its
//    cycle runs through all ranks and needs sends that do not wait (stage_ops.hpp).
#pragma once

#include <string>
#include <vector>

#include "pipeline/schedule_table.hpp"
#include "pipeline/stage_ops.hpp"

namespace mpf::pipeline {

enum class OpKind {
  kForward,
  kBackwardInput,
  kBackwardWeight,
  kRecvForward,
  kSendForward,
  kRecvBackward,
  kSendBackward,
  kSendForwardRecvBackward,  // (mb, chunk) sent, (recv_mb, recv_chunk) received
  kSendBackwardRecvForward,
  kSendForwardRecvForward,
  kSendBackwardRecvBackward,
  kPostRecvForward,
  kPostRecvBackward,
};

struct StageOp {
  OpKind kind;
  int mb, chunk;
  int recv_mb = -1, recv_chunk = -1;  // paired verbs only
  bool operator==(const StageOp& o) const {
    return kind == o.kind && mb == o.mb && chunk == o.chunk && recv_mb == o.recv_mb &&
           recv_chunk == o.recv_chunk;
  }
};

using StageProgram = std::vector<StageOp>;

// The op's verb as the schedules and Megatron's P2P communicator spell it: "forward",
// "backward_input", "backward_weight", "recv_forward", ..., "post_recv_backward". describe()'s
// words, and the names of the P2P ops in a step's trace (ModelStage, StepTrace).
const char* op_name(OpKind kind);

// "send_forward_recv_backward(3c0, 1c0)", for messages and tests.
std::string describe(const StageOp& op);

// Every rank's program for `table` on `shape` (shape.rank is ignored).
std::vector<StageProgram> insert_p2p(const ScheduleTable& table, const PipelineShape& shape);

// Runs a program: each op is one StageOps call.
void execute(const StageProgram& program, StageOps& ops);

// A StageOps that only records the calls, as a program: what a loop does, from which its table is
// recorded (loop_table) and against which the tests check the pass.
class OpRecorder final : public StageOps {
 public:
  StageProgram program;

  void forward(int mb, int chunk) override { add(OpKind::kForward, mb, chunk); }
  void backward_input(int mb, int chunk) override { add(OpKind::kBackwardInput, mb, chunk); }
  void backward_weight(int mb, int chunk) override { add(OpKind::kBackwardWeight, mb, chunk); }
  void recv_forward(int mb, int chunk) override { add(OpKind::kRecvForward, mb, chunk); }
  void send_forward(int mb, int chunk) override { add(OpKind::kSendForward, mb, chunk); }
  void recv_backward(int mb, int chunk) override { add(OpKind::kRecvBackward, mb, chunk); }
  void send_backward(int mb, int chunk) override { add(OpKind::kSendBackward, mb, chunk); }
  void send_forward_recv_backward(int sm, int sc, int rm, int rc) override {
    add(OpKind::kSendForwardRecvBackward, sm, sc, rm, rc);
  }
  void send_backward_recv_forward(int sm, int sc, int rm, int rc) override {
    add(OpKind::kSendBackwardRecvForward, sm, sc, rm, rc);
  }
  void send_forward_recv_forward(int sm, int sc, int rm, int rc) override {
    add(OpKind::kSendForwardRecvForward, sm, sc, rm, rc);
  }
  void send_backward_recv_backward(int sm, int sc, int rm, int rc) override {
    add(OpKind::kSendBackwardRecvBackward, sm, sc, rm, rc);
  }
  void post_recv_forward(int mb, int chunk) override { add(OpKind::kPostRecvForward, mb, chunk); }
  void post_recv_backward(int mb, int chunk) override { add(OpKind::kPostRecvBackward, mb, chunk); }

 private:
  void add(OpKind k, int mb, int chunk, int rm = -1, int rc = -1) {
    program.push_back({k, mb, chunk, rm, rc});
  }
};

}  // namespace mpf::pipeline
