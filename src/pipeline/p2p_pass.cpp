// The P2P pass (stage_program.hpp): compute nodes in, each rank's program of compute calls and
// P2P verbs out.
#include <optional>
#include <tuple>
#include <vector>

#include "pipeline/stage_program.hpp"

namespace mpf::pipeline {

namespace {

// Step 1: receives right before, sends right after, adjacent opposite directions paired.
StageProgram place_verbs(const std::vector<ComputeNode>& nodes) {
  StageProgram out;
  std::optional<StageOp> pending;  // the last compute's send, not yet emitted
  for (const ComputeNode& n : nodes) {
    std::optional<StageOp> recv;
    if (n.kind == NodeKind::kF) recv = StageOp{OpKind::kRecvForward, n.mb, n.chunk};
    if (n.kind == NodeKind::kB || n.kind == NodeKind::kBW) {
      recv = StageOp{OpKind::kRecvBackward, n.mb, n.chunk};
    }
    if (pending) {
      const bool fwd_then_bwd =
          pending->kind == OpKind::kSendForward && recv && recv->kind == OpKind::kRecvBackward;
      const bool bwd_then_fwd =
          pending->kind == OpKind::kSendBackward && recv && recv->kind == OpKind::kRecvForward;
      if (fwd_then_bwd || bwd_then_fwd) {
        out.push_back(
            {fwd_then_bwd ? OpKind::kSendForwardRecvBackward : OpKind::kSendBackwardRecvForward,
             pending->mb, pending->chunk, recv->mb, recv->chunk});
        recv.reset();
      } else {
        out.push_back(*pending);
      }
      pending.reset();
    }
    if (recv) out.push_back(*recv);
    switch (n.kind) {
      case NodeKind::kF:
        out.push_back({OpKind::kForward, n.mb, n.chunk});
        pending = StageOp{OpKind::kSendForward, n.mb, n.chunk};
        break;
      case NodeKind::kB:
        out.push_back({OpKind::kBackwardInput, n.mb, n.chunk});
        pending = StageOp{OpKind::kSendBackward, n.mb, n.chunk};
        break;
      case NodeKind::kW:
        out.push_back({OpKind::kBackwardWeight, n.mb, n.chunk});
        break;
      case NodeKind::kBW:
        out.push_back({OpKind::kBackwardInput, n.mb, n.chunk});
        out.push_back({OpKind::kBackwardWeight, n.mb, n.chunk});
        pending = StageOp{OpKind::kSendBackward, n.mb, n.chunk};
        break;
    }
  }
  if (pending) out.push_back(*pending);
  return out;
}

// Step 2 plays the programs as if every send waited for its receive: posting and matching only,
// no clock (whether such a run deadlocks does not depend on timing).
struct Message {
  int rank, mb, chunk;  // the receiver and its chunk
  Direction dir;
};

// One half of a verb: a send to `peer` or a receive from `peer` of `msg`.
struct Half {
  bool send;
  int peer;
  Message msg;
};

// A verb's halves: at most two, kept in place (the pass asks for them of every verb it plays).
struct Halves {
  Half at[2];
  int n = 0;
  const Half* begin() const { return at; }
  const Half* end() const { return at + n; }
};

// Which messages have been posted: a flag per (receiver, mb, chunk, direction), not a set (the
// planner runs this pass on pipelines of hundreds of stages and thousands of microbatches).
class Posted {
 public:
  explicit Posted(const PipelineShape& s)
      : M_(s.microbatches),
        V_(s.virtual_stages),
        flags_(size_t(s.stages) * size_t(s.microbatches) * size_t(s.virtual_stages) * 2, 0) {}
  void insert(const Message& m) { flags_[index(m)] = 1; }
  bool count(const Message& m) const { return flags_[index(m)] != 0; }

 private:
  size_t index(const Message& m) const {
    return ((size_t(m.rank) * size_t(M_) + size_t(m.mb)) * size_t(V_) + size_t(m.chunk)) * 2 +
           (m.dir == Direction::kBackward ? 1 : 0);
  }
  int M_, V_;
  std::vector<char> flags_;
};

class Rendezvous {
 public:
  Rendezvous(const PipelineShape& shape, std::vector<StageProgram>& programs)
      : shape_(shape),
        programs_(programs),
        pc_(programs.size(), 0),
        posted_(programs.size()),
        sent_(shape),
        received_(shape) {}

  // Runs until every rank is done (true) or no rank can move (false).
  bool run() {
    for (bool moved = true; moved;) {
      moved = false;
      for (size_t r = 0; r < programs_.size(); ++r) moved |= advance(int(r));
    }
    for (size_t r = 0; r < programs_.size(); ++r) {
      if (pc_[r] < programs_[r].size()) return false;
    }
    return true;
  }

  // After run() returned false: finds two ranks each blocked in a send to the other whose
  // receive the other has not posted, and posts one of those receives ahead, right before the
  // blocked verb. False if there is no such pair (a longer cycle).
  bool post_one_receive_ahead() {
    std::optional<std::tuple<int, int, Half>> best;  // (priority, rank to post on, the send)
    const int P = int(programs_.size());
    for (int a = 0; a < P; ++a) {
      if (!blocked(a)) continue;
      for (const Half& h : halves(a, programs_[a][pc_[a]])) {
        if (!h.send || h.peer == a || received_.count(h.msg)) continue;
        const int b = h.peer;
        if (!blocked(b) || !waits_on(b, a)) continue;
        const int priority = h.msg.dir == Direction::kBackward ? 0 : 1;  // gradients first
        if (!best ||
            std::make_pair(priority, b) < std::make_pair(std::get<0>(*best), std::get<1>(*best))) {
          best = std::make_tuple(priority, b, h);
        }
      }
    }
    if (!best) return false;
    const int b = std::get<1>(*best);
    const Message m = std::get<2>(*best).msg;
    const OpKind post =
        m.dir == Direction::kForward ? OpKind::kPostRecvForward : OpKind::kPostRecvBackward;
    StageProgram& prog = programs_[b];
    prog.insert(prog.begin() + long(pc_[b]), StageOp{post, m.mb, m.chunk});
    ++pc_[b];  // it has run: the blocked verb is still the next
    received_.insert(m);
    return true;
  }

 private:
  bool blocked(int r) const { return pc_[r] < programs_[r].size(); }

  // Whether rank r's current verb misses a half that rank `peer` has to complete.
  bool waits_on(int r, int peer) const {
    for (const Half& h : halves(r, programs_[r][pc_[r]])) {
      if (h.peer == peer && !complete(r, h)) return true;
    }
    return false;
  }

  bool complete(int r, const Half& h) const {
    if (!h.send) return sent_.count(h.msg) > 0;
    return h.peer == r || received_.count(h.msg) > 0;  // a send to its own rank never waits
  }

  // Moves rank r as far as it can; whether it moved.
  bool advance(int r) {
    bool moved = false;
    while (blocked(r)) {
      const StageOp& op = programs_[r][pc_[r]];
      const Halves hs = halves(r, op);
      const bool post_only =
          op.kind == OpKind::kPostRecvForward || op.kind == OpKind::kPostRecvBackward;
      if (!posted_[r]) {
        for (const Half& h : hs) (h.send ? sent_ : received_).insert(h.msg);
        posted_[r] = true;
      }
      if (!post_only) {
        for (const Half& h : hs) {
          if (!complete(r, h)) return moved;
        }
      }
      posted_[r] = false;
      ++pc_[r];
      moved = true;
    }
    return moved;
  }

  // The halves of op on rank r that are messages (edges and compute calls have none).
  Halves halves(int r, const StageOp& op) const {
    Halves out;
    auto add = [&](bool send, Direction dir, int mb, int chunk) {
      const int S = shape_.stages * shape_.virtual_stages;
      const int s = virtual_stage(shape_.placement, shape_.stages, r, chunk);
      // The other end: the next virtual stage for forward sends and backward receives.
      const bool toward_next = send == (dir == Direction::kForward);
      const int other = toward_next ? s + 1 : s - 1;
      if (other < 0 || other >= S) return;  // an edge of the pipeline: a no-op
      const ChunkSite site = chunk_site(shape_.placement, shape_.stages, other);
      const Message msg =
          send ? Message{site.rank, mb, site.chunk, dir} : Message{r, mb, chunk, dir};
      out.at[out.n++] = {send, site.rank, msg};
    };
    switch (op.kind) {
      case OpKind::kRecvForward:
      case OpKind::kPostRecvForward:
        add(false, Direction::kForward, op.mb, op.chunk);
        break;
      case OpKind::kSendForward:
        add(true, Direction::kForward, op.mb, op.chunk);
        break;
      case OpKind::kRecvBackward:
      case OpKind::kPostRecvBackward:
        add(false, Direction::kBackward, op.mb, op.chunk);
        break;
      case OpKind::kSendBackward:
        add(true, Direction::kBackward, op.mb, op.chunk);
        break;
      case OpKind::kSendForwardRecvBackward:
        add(true, Direction::kForward, op.mb, op.chunk);
        add(false, Direction::kBackward, op.recv_mb, op.recv_chunk);
        break;
      case OpKind::kSendBackwardRecvForward:
        add(true, Direction::kBackward, op.mb, op.chunk);
        add(false, Direction::kForward, op.recv_mb, op.recv_chunk);
        break;
      case OpKind::kSendForwardRecvForward:
        add(true, Direction::kForward, op.mb, op.chunk);
        add(false, Direction::kForward, op.recv_mb, op.recv_chunk);
        break;
      case OpKind::kSendBackwardRecvBackward:
        add(true, Direction::kBackward, op.mb, op.chunk);
        add(false, Direction::kBackward, op.recv_mb, op.recv_chunk);
        break;
      default:
        break;
    }
    return out;
  }

  const PipelineShape& shape_;
  std::vector<StageProgram>& programs_;
  std::vector<size_t> pc_;
  std::vector<bool> posted_;  // the current verb's halves are posted
  Posted sent_, received_;    // posted sends, posted receives
};

}  // namespace

std::vector<StageProgram> insert_p2p(const ScheduleTable& table, const PipelineShape& shape) {
  std::vector<StageProgram> programs;
  for (const auto& nodes : table) programs.push_back(place_verbs(nodes));
  const bool chain = shape.placement == ChunkPlacement::kV || shape.virtual_stages == 1;
  if (!chain) return programs;
  Rendezvous play(shape, programs);
  while (!play.run()) {
    if (!play.post_one_receive_ahead()) break;  // not a pair of neighbours: left as it is
  }
  return programs;
}

void execute(const StageProgram& program, StageOps& ops) {
  for (const StageOp& op : program) {
    switch (op.kind) {
      case OpKind::kForward:
        ops.forward(op.mb, op.chunk);
        break;
      case OpKind::kBackwardInput:
        ops.backward_input(op.mb, op.chunk);
        break;
      case OpKind::kBackwardWeight:
        ops.backward_weight(op.mb, op.chunk);
        break;
      case OpKind::kRecvForward:
        ops.recv_forward(op.mb, op.chunk);
        break;
      case OpKind::kSendForward:
        ops.send_forward(op.mb, op.chunk);
        break;
      case OpKind::kRecvBackward:
        ops.recv_backward(op.mb, op.chunk);
        break;
      case OpKind::kSendBackward:
        ops.send_backward(op.mb, op.chunk);
        break;
      case OpKind::kSendForwardRecvBackward:
        ops.send_forward_recv_backward(op.mb, op.chunk, op.recv_mb, op.recv_chunk);
        break;
      case OpKind::kSendBackwardRecvForward:
        ops.send_backward_recv_forward(op.mb, op.chunk, op.recv_mb, op.recv_chunk);
        break;
      case OpKind::kSendForwardRecvForward:
        ops.send_forward_recv_forward(op.mb, op.chunk, op.recv_mb, op.recv_chunk);
        break;
      case OpKind::kSendBackwardRecvBackward:
        ops.send_backward_recv_backward(op.mb, op.chunk, op.recv_mb, op.recv_chunk);
        break;
      case OpKind::kPostRecvForward:
        ops.post_recv_forward(op.mb, op.chunk);
        break;
      case OpKind::kPostRecvBackward:
        ops.post_recv_backward(op.mb, op.chunk);
        break;
    }
  }
}

const char* op_name(OpKind kind) {
  static const char* const names[] = {"forward",  // in OpKind's order
                                      "backward_input",
                                      "backward_weight",
                                      "recv_forward",
                                      "send_forward",
                                      "recv_backward",
                                      "send_backward",
                                      "send_forward_recv_backward",
                                      "send_backward_recv_forward",
                                      "send_forward_recv_forward",
                                      "send_backward_recv_backward",
                                      "post_recv_forward",
                                      "post_recv_backward"};
  static_assert(sizeof(names) / sizeof(names[0]) == size_t(OpKind::kPostRecvBackward) + 1,
                "one name per OpKind");
  return names[int(kind)];
}

std::string describe(const StageOp& op) {
  auto at = [](int mb, int chunk) { return std::to_string(mb) + "c" + std::to_string(chunk); };
  std::string s = std::string(op_name(op.kind)) + "(" + at(op.mb, op.chunk);
  if (op.recv_mb >= 0) s += ", " + at(op.recv_mb, op.recv_chunk);
  return s + ")";
}

}  // namespace mpf::pipeline
