#include "pipeline/simulator.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>

namespace mpf::pipeline {

namespace {

using WallClock = std::chrono::steady_clock;

// A P2P message as its receiver names it: (microbatch, the receiver's chunk, direction).
struct MessageKey {
  int mb, chunk;
  Direction dir;
  bool operator<(const MessageKey& o) const {
    return std::tie(mb, chunk, dir) < std::tie(o.mb, o.chunk, o.dir);
  }
};

std::string mb_chunk(int mb, int chunk) {
  return "(mb " + std::to_string(mb) + ", chunk " + std::to_string(chunk) + ")";
}

// The rank that sends `k` to `rank`: the one running the previous virtual stage (forward) or the
// next one (backward) of the receiving chunk.
int sender_of(MessageKey k, int rank, const PipelineShape& shape) {
  const int s = virtual_stage(shape.placement, shape.stages, rank, k.chunk);
  return chunk_site(shape.placement, shape.stages, k.dir == Direction::kForward ? s - 1 : s + 1)
      .rank;
}

// "the activation of (mb 3, chunk 1)": chunk is the receiver's.
std::string what(MessageKey k) {
  return (k.dir == Direction::kForward ? "the activation of " : "the gradient of ") +
         mb_chunk(k.mb, k.chunk);
}

std::string describe(MessageKey k, int rank, const PipelineShape& shape) {
  return what(k) + " from rank " + std::to_string(sender_of(k, rank, shape));
}

// Thrown inside a rank's thread once another rank has failed: unwinds it without a report.
struct Aborted {};

// One half of a message as a rank posts it: a send to `dest`, or a receive at `dest` (its own
// rank). The message is (dest, key) for both halves. `local`: between two chunks of one rank (a
// hand-off: free, and its send never waits); `posted`: a receive already posted ahead.
struct Request {
  bool send;
  int dest;
  MessageKey key;
  bool local = false, posted = false;
};

// The simulated ranks' messages and the bookkeeping that turns a deadlock or a hang into an
// error. Everything below is guarded by mutex_.
class Network {
 public:
  Network(const PipelineShape& shape, const OpCosts& costs, SendMode sends,
          WallClock::time_point deadline)
      : P_(shape.stages),
        shape_(shape),
        p2p_(costs.p2p),
        sends_(sends),
        deadline_(deadline),
        channels_(shape.stages),
        cv_(shape.stages),
        state_(shape.stages, State::kRunning),
        awaiting_(shape.stages) {}

  // Posts `requests` at simulated time `clock` on `rank`, waits until every one has completed,
  // and returns the time the last completed: a receive when its message has arrived, a send at
  // once (buffered) or when its receiver has posted and the data has moved (rendezvous).
  double exchange(int rank, const std::vector<Request>& requests, double clock) {
    std::unique_lock<std::mutex> lock(mutex_);
    for (const Request& q : requests) post_locked(q, clock);
    for (;;) {
      if (aborted_) throw Aborted{};
      const Request* pending = first_pending_locked(requests);
      if (!pending) {
        double done = clock;
        for (const Request& q : requests) done = std::max(done, completion_locked(q));
        state_[rank] = State::kRunning;
        return done;
      }
      state_[rank] = State::kWaiting;
      awaiting_[rank] = requests;
      detect_deadlock_locked();
      if (aborted_) throw Aborted{};
      if (cv_[rank].wait_until(lock, deadline_) == std::cv_status::timeout && !aborted_ &&
          first_pending_locked(requests)) {
        fail_locked(std::make_exception_ptr(SimulationError("simulation timed out (wall clock): " +
                                                            describe_wait(rank, *pending))));
        throw Aborted{};
      }
    }
  }

  // Posts a receive ahead of the verb that will wait for it.
  void post(const Request& receive, double clock) {
    std::lock_guard<std::mutex> lock(mutex_);
    post_locked(receive, clock);
  }

  // Between ops: stop if another rank failed or the wall clock ran out.
  void check_alive(int rank) {
    if (aborted_) throw Aborted{};
    if (WallClock::now() > deadline_) {
      fail(rank, std::make_exception_ptr(SimulationError(
                     "simulation timed out (wall clock) on rank " + std::to_string(rank))));
      throw Aborted{};
    }
  }

  void finish(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    state_[rank] = State::kDone;
    detect_deadlock_locked();
  }

  // The first failure is the one reported; it stops every rank.
  void fail(int rank, std::exception_ptr error) {
    std::lock_guard<std::mutex> lock(mutex_);
    state_[rank] = State::kDone;
    fail_locked(error);
  }

  void abandon(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    state_[rank] = State::kDone;
  }

  // After every thread has joined.
  std::exception_ptr error() const { return error_; }
  // After every thread has joined: per rank, when each of its messages holds a buffer
  // (SimulationResult::peak_grad_sends, peak_messages).
  struct RankHeld {
    std::vector<HeldBuffer> grad_sends, messages;
  };
  std::vector<RankHeld> held_buffers() const {
    std::vector<RankHeld> held(static_cast<size_t>(P_));
    for (int r = 0; r < P_; ++r) {
      for (const auto& [key, ch] : channels_[r]) {
        // A send's buffer is free once the receive is posted and the data has moved, a
        // receive's once the data has arrived.
        const double move = ch.local ? 0.0 : p2p_;
        const double done = sends_ == SendMode::kRendezvous
                                ? std::max(ch.send_time, ch.recv_time) + move
                                : std::max(ch.recv_time, ch.send_time + move);
        const int from = sender_of(key, r, shape_);
        const int to_stage = virtual_stage(shape_.placement, P_, r, key.chunk);
        const int from_chunk =
            chunk_site(shape_.placement, P_,
                       key.dir == Direction::kForward ? to_stage - 1 : to_stage + 1)
                .chunk;
        const HeldBuffer send{ch.send_time, done, key.mb, from_chunk};
        held[size_t(from)].messages.push_back(send);
        if (key.dir == Direction::kBackward) held[size_t(from)].grad_sends.push_back(send);
        held[size_t(r)].messages.push_back({ch.recv_time, done, key.mb, key.chunk});
      }
    }
    return held;
  }

  std::string undelivered() const {
    for (int r = 0; r < P_; ++r) {
      for (const auto& [key, ch] : channels_[r]) {
        if (!ch.recv_posted)
          return "rank " + std::to_string(r) + " never received " + describe(key, r, shape_);
      }
    }
    return "";
  }

 private:
  enum class State { kRunning, kWaiting, kDone };
  struct Channel {
    bool send_posted = false, recv_posted = false, local = false;
    double send_time = 0.0, recv_time = 0.0;  // the posters' clocks
  };

  const Channel& channel_locked(const Request& q) { return channels_[q.dest][q.key]; }

  void post_locked(const Request& q, double clock) {
    Channel& ch = channels_[q.dest][q.key];
    ch.local = q.local;
    if (q.send) {
      ch.send_posted = true;
      ch.send_time = clock;
      cv_[q.dest].notify_one();
    } else if (!q.posted) {
      ch.recv_posted = true;
      ch.recv_time = clock;
      cv_[sender_of(q.key, q.dest, shape_)].notify_one();
    }
  }

  bool complete_locked(const Request& q) {
    const Channel& ch = channel_locked(q);
    if (!q.send) return ch.send_posted;
    return sends_ == SendMode::kBuffered || q.local || ch.recv_posted;
  }

  const Request* first_pending_locked(const std::vector<Request>& requests) {
    for (const Request& q : requests) {
      if (!complete_locked(q)) return &q;
    }
    return nullptr;
  }

  // Buffered: the data leaves at the send and arrives P2P later. Rendezvous: it moves once both
  // ends have posted, and both ends complete on arrival.
  double completion_locked(const Request& q) {
    const Channel& ch = channel_locked(q);
    if (q.local) return q.send ? ch.send_time : std::max(ch.recv_time, ch.send_time);
    if (sends_ == SendMode::kRendezvous) return std::max(ch.send_time, ch.recv_time) + p2p_;
    return q.send ? ch.send_time : std::max(ch.recv_time, ch.send_time + p2p_);
  }

  std::string describe_wait(int rank, const Request& q) const {
    if (!q.send)
      return "rank " + std::to_string(rank) + " waits for " + describe(q.key, q.dest, shape_);
    return "rank " + std::to_string(rank) + " waits for rank " + std::to_string(q.dest) +
           " to receive " + what(q.key) + " (a rendezvous send)";
  }

  void fail_locked(std::exception_ptr error) {
    if (!error_) error_ = error;
    aborted_ = true;
    for (auto& cv : cv_) cv.notify_all();
  }

  // Deadlock: no rank runs and every waiting rank still misses one of its messages.
  void detect_deadlock_locked() {
    std::string waits;
    for (int r = 0; r < P_; ++r) {
      if (state_[r] == State::kRunning) return;
      if (state_[r] != State::kWaiting) continue;
      const Request* pending = first_pending_locked(awaiting_[r]);
      if (!pending) return;  // it is about to wake
      waits += (waits.empty() ? "" : "; ") + describe_wait(r, *pending);
    }
    if (waits.empty()) return;  // every rank is done
    fail_locked(std::make_exception_ptr(SimulationError("deadlock: " + waits)));
  }

  const int P_;
  const PipelineShape shape_;
  const double p2p_;
  const SendMode sends_;
  const WallClock::time_point deadline_;
  std::mutex mutex_;
  std::vector<std::map<MessageKey, Channel>> channels_;  // by receiving rank
  std::vector<std::condition_variable> cv_;
  std::vector<State> state_;
  std::vector<std::vector<Request>> awaiting_;
  std::atomic<bool> aborted_{false};
  std::exception_ptr error_;
};

// One simulated rank: StageOps on a clock, checking the protocol stage_ops.hpp states.
class SimulatedStage final : public StageOps {
 public:
  SimulatedStage(Network& net, const PipelineShape& shape, const OpCosts& costs)
      : net_(net),
        shape_(shape),
        P_(shape.stages),
        V_(shape.virtual_stages),
        M_(shape.microbatches),
        rank_(shape.rank),
        costs_(costs),
        progress_(static_cast<size_t>(M_) * V_) {}

  std::vector<SimEvent> events;
  int peak_grad_receives = 0;  // SimulationResult::peak_grad_receives

  void forward(int mb, int chunk) override {
    Progress& p = at("forward", mb, chunk);
    if (p.forward) bug("forward" + mb_chunk(mb, chunk) + " twice");
    if (!first_virtual(chunk) && p.input != kDone) {
      bug("forward" + mb_chunk(mb, chunk) + " before recv_forward of its input");
    }
    p.forward = true;
    compute(SimOp::kForward, mb, chunk, costs_.forward_on(rank_));
  }

  void backward_input(int mb, int chunk) override {
    Progress& p = at("backward_input", mb, chunk);
    if (p.backward_input) bug("backward_input" + mb_chunk(mb, chunk) + " twice");
    if (!p.forward) bug("backward_input" + mb_chunk(mb, chunk) + " before its forward");
    if (!last_virtual(chunk) && p.grad != kDone) {
      bug("backward_input" + mb_chunk(mb, chunk) + " before recv_backward of its gradient");
    }
    p.backward_input = true;
    if (!last_virtual(chunk)) --grad_receives_;
    compute(SimOp::kBackwardInput, mb, chunk, costs_.backward_input_on(rank_));
  }

  void backward_weight(int mb, int chunk) override {
    Progress& p = at("backward_weight", mb, chunk);
    if (p.backward_weight) bug("backward_weight" + mb_chunk(mb, chunk) + " twice");
    if (!p.backward_input) bug("backward_weight" + mb_chunk(mb, chunk) + " before its B");
    p.backward_weight = true;
    compute(SimOp::kBackwardWeight, mb, chunk, costs_.backward_weight_on(rank_));
  }

  void recv_forward(int mb, int chunk) override { exchange({input_recv(mb, chunk)}); }
  void send_forward(int mb, int chunk) override { exchange({output_send(mb, chunk)}); }
  void recv_backward(int mb, int chunk) override { exchange({grad_recv(mb, chunk)}); }
  void send_backward(int mb, int chunk) override { exchange({grad_send(mb, chunk)}); }

  void send_forward_recv_backward(int send_mb, int send_chunk, int recv_mb,
                                  int recv_chunk) override {
    exchange({output_send(send_mb, send_chunk), grad_recv(recv_mb, recv_chunk)});
  }
  void send_backward_recv_forward(int send_mb, int send_chunk, int recv_mb,
                                  int recv_chunk) override {
    exchange({grad_send(send_mb, send_chunk), input_recv(recv_mb, recv_chunk)});
  }
  void send_forward_recv_forward(int send_mb, int send_chunk, int recv_mb,
                                 int recv_chunk) override {
    exchange({output_send(send_mb, send_chunk), input_recv(recv_mb, recv_chunk)});
  }
  void send_backward_recv_backward(int send_mb, int send_chunk, int recv_mb,
                                   int recv_chunk) override {
    exchange({grad_send(send_mb, send_chunk), grad_recv(recv_mb, recv_chunk)});
  }
  void post_recv_forward(int mb, int chunk) override { post_ahead(input_recv(mb, chunk, true)); }
  void post_recv_backward(int mb, int chunk) override { post_ahead(grad_recv(mb, chunk, true)); }

  // After the loop: a training step forwards and backwards every (mb, chunk).
  void check_complete() const {
    for (int mb = 0; mb < M_; ++mb) {
      for (int c = 0; c < V_; ++c) {
        if (!progress_[static_cast<size_t>(mb) * V_ + c].backward_weight) {
          bug("the schedule ended without the backward of " + mb_chunk(mb, c));
        }
      }
    }
  }

 private:
  // A receive: not yet, posted ahead (post_recv_*), or done.
  enum Receive { kNone, kPosted, kDone };
  struct Progress {
    Receive input = kNone, grad = kNone;
    bool forward = false, sent_forward = false;
    bool backward_input = false, backward_weight = false, sent_backward = false;
  };
  // A request, or none where the verb's half is a no-op (the ends of the pipeline).
  using MaybeRequest = std::pair<bool, Request>;

  int stage(int chunk) const { return virtual_stage(shape_.placement, P_, rank_, chunk); }
  bool first_virtual(int chunk) const { return stage(chunk) == 0; }
  bool last_virtual(int chunk) const { return stage(chunk) == P_ * V_ - 1; }

  [[noreturn]] void bug(const std::string& what) const {
    throw SimulationError("rank " + std::to_string(rank_) + ": " + what);
  }

  Progress& at(const char* verb, int mb, int chunk) {
    net_.check_alive(rank_);
    if (mb < 0 || mb >= M_ || chunk < 0 || chunk >= V_) {
      bug(std::string(verb) + mb_chunk(mb, chunk) + " is outside the " + std::to_string(M_) +
          " microbatches x " + std::to_string(V_) + " chunks");
    }
    return progress_[static_cast<size_t>(mb) * V_ + chunk];
  }

  // The receive of a message from virtual stage `from` into (mb, chunk), as verb `name` asks for
  // it; ahead: a post_recv_*, which must come first.
  MaybeRequest receive(Receive& state, const char* name, int mb, int chunk, Direction dir, int from,
                       bool ahead) {
    if (ahead && state != kNone) bug(std::string(name) + mb_chunk(mb, chunk) + " posted twice");
    if (!ahead && state == kDone) bug(std::string(name) + mb_chunk(mb, chunk) + " twice");
    const bool posted = state == kPosted;
    // A received output gradient holds its buffer from the posting until its B.
    if (dir == Direction::kBackward && state == kNone) {
      peak_grad_receives = std::max(peak_grad_receives, ++grad_receives_);
    }
    state = ahead ? kPosted : kDone;
    const bool local = chunk_site(shape_.placement, P_, from).rank == rank_;
    return {true, {false, rank_, {mb, chunk, dir}, local, posted}};
  }

  MaybeRequest input_recv(int mb, int chunk, bool ahead = false) {
    Progress& p = at("recv_forward", mb, chunk);
    if (first_virtual(chunk)) return {false, {}};  // reads the tokens
    return receive(p.input, "recv_forward", mb, chunk, Direction::kForward, stage(chunk) - 1,
                   ahead);
  }

  MaybeRequest grad_recv(int mb, int chunk, bool ahead = false) {
    Progress& p = at("recv_backward", mb, chunk);
    if (last_virtual(chunk)) return {false, {}};  // starts from the loss
    return receive(p.grad, "recv_backward", mb, chunk, Direction::kBackward, stage(chunk) + 1,
                   ahead);
  }

  // A send to virtual stage `to`, keyed by its receiving chunk.
  Request send_to(int mb, int to, Direction dir) const {
    const ChunkSite site = chunk_site(shape_.placement, P_, to);
    return {true, site.rank, {mb, site.chunk, dir}, site.rank == rank_, false};
  }

  MaybeRequest output_send(int mb, int chunk) {
    Progress& p = at("send_forward", mb, chunk);
    if (last_virtual(chunk)) return {false, {}};  // owns the loss
    if (!p.forward) bug("send_forward" + mb_chunk(mb, chunk) + " before its forward");
    if (p.sent_forward) bug("send_forward" + mb_chunk(mb, chunk) + " twice");
    p.sent_forward = true;
    return {true, send_to(mb, stage(chunk) + 1, Direction::kForward)};
  }

  MaybeRequest grad_send(int mb, int chunk) {
    Progress& p = at("send_backward", mb, chunk);
    if (first_virtual(chunk)) return {false, {}};  // nothing before the embedding
    if (!p.backward_input) bug("send_backward" + mb_chunk(mb, chunk) + " before its B");
    if (p.sent_backward) bug("send_backward" + mb_chunk(mb, chunk) + " twice");
    p.sent_backward = true;
    return {true, send_to(mb, stage(chunk) - 1, Direction::kBackward)};
  }

  // A verb: post its halves together, then wait for all of them.
  void exchange(std::initializer_list<MaybeRequest> halves) {
    std::vector<Request> requests;
    for (const MaybeRequest& h : halves) {
      if (h.first) requests.push_back(h.second);
    }
    if (!requests.empty()) clock_ = net_.exchange(rank_, requests, clock_);
  }

  void post_ahead(const MaybeRequest& receive) {
    if (receive.first) net_.post(receive.second, clock_);
  }

  void compute(SimOp op, int mb, int chunk, double cost) {
    events.push_back({op, mb, chunk, clock_, clock_ + cost});
    clock_ += cost;
  }

  Network& net_;
  const PipelineShape shape_;
  const int P_, V_, M_, rank_;
  const OpCosts costs_;
  std::vector<Progress> progress_;
  double clock_ = 0.0;
  int grad_receives_ = 0;  // posted, their B not run
};

}  // namespace

int peak_before(const std::vector<SimEvent>& events, SimOp until) {
  int now = 0, peak = 0;
  for (const SimEvent& e : events) {
    if (e.op == SimOp::kForward) peak = std::max(peak, ++now);
    if (e.op == until) --now;
  }
  return peak;
}

int peak_grad_sends(const std::vector<SimEvent>& events, const std::vector<HeldBuffer>& sends,
                    const std::function<bool(int)>& first) {
  // The sends held at t are those started by t less those ended before it (a send ends no
  // earlier than it starts): two sorted lists, not a pass over the sends per B (the planner asks
  // this of pipelines with thousands of microbatches).
  std::vector<double> starts, ends;
  std::vector<std::tuple<int, int, size_t>> by_op;  // (mb, chunk, index in sends)
  for (size_t i = 0; i < sends.size(); ++i) {
    starts.push_back(sends[i].start);
    ends.push_back(sends[i].end);
    by_op.emplace_back(sends[i].mb, sends[i].chunk, i);
  }
  std::sort(starts.begin(), starts.end());
  std::sort(ends.begin(), ends.end());
  std::sort(by_op.begin(), by_op.end());
  int peak = 0;
  for (const SimEvent& e : events) {
    if (e.op != SimOp::kBackwardInput || first(e.chunk)) continue;
    const double t = e.start;
    int busy = 1 + int(std::upper_bound(starts.begin(), starts.end(), t) - starts.begin()) -
               int(std::lower_bound(ends.begin(), ends.end(), t) - ends.begin());
    // Its own send is not an earlier one.
    auto own =
        std::lower_bound(by_op.begin(), by_op.end(), std::make_tuple(e.mb, e.chunk, size_t(0)));
    for (; own != by_op.end() && std::get<0>(*own) == e.mb && std::get<1>(*own) == e.chunk; ++own) {
      const HeldBuffer& h = sends[std::get<2>(*own)];
      busy -= h.start <= t && h.end >= t ? 1 : 0;
    }
    peak = std::max(peak, busy);
  }
  return peak;
}

int peak_open(const std::vector<HeldBuffer>& held) {
  std::vector<std::pair<double, int>> edges;
  for (const HeldBuffer& h : held) {
    edges.push_back({h.start, -1});
    edges.push_back({h.end, 1});
  }
  std::sort(edges.begin(), edges.end());
  int open = 0, peak = 0;
  for (const auto& [t, edge] : edges) peak = std::max(peak, open -= edge);
  return peak;
}

SimulationResult simulate(const ScheduleLoop& loop, const PipelineShape& shape,
                          const OpCosts& costs, SendMode sends, std::chrono::milliseconds timeout) {
  const int P = shape.stages;
  if (P < 1) throw SimulationError("simulate: a pipeline needs at least one stage");
  for (const auto* by_rank :
       {&costs.forward_by_rank, &costs.backward_by_rank, &costs.weight_by_rank}) {
    if (!by_rank->empty() && int(by_rank->size()) != P) {
      throw SimulationError("simulate: per-rank costs need one entry per rank");
    }
  }
  Network net(shape, costs, sends, WallClock::now() + timeout);
  std::vector<std::unique_ptr<SimulatedStage>> stages;
  for (int r = 0; r < P; ++r) {
    PipelineShape mine = shape;
    mine.rank = r;
    stages.push_back(std::make_unique<SimulatedStage>(net, mine, costs));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r) {
    auto run_rank = [&, r] {
      PipelineShape mine = shape;
      mine.rank = r;
      try {
        loop(*stages[r], mine);
        stages[r]->check_complete();
        net.finish(r);
      } catch (const Aborted&) {
        net.abandon(r);
      } catch (...) {
        net.fail(r, std::current_exception());
      }
    };
    try {
      threads.emplace_back(run_rank);
    } catch (const std::system_error&) {  // out of threads: stop the ranks already running
      for (int q = r; q < P; ++q) {
        net.fail(q, std::make_exception_ptr(SimulationError("cannot start a thread per rank for " +
                                                            std::to_string(P) + " ranks")));
      }
      break;
    }
  }
  for (std::thread& t : threads) t.join();
  if (net.error()) std::rethrow_exception(net.error());
  const std::string lost = net.undelivered();
  if (!lost.empty()) throw SimulationError(lost);

  const std::vector<Network::RankHeld> held = net.held_buffers();
  SimulationResult res;
  res.shape = shape;
  res.shape.rank = 0;
  res.costs = costs;
  double busy_total = 0.0;
  for (int r = 0; r < P; ++r) {
    double busy = 0.0;
    for (const SimEvent& e : stages[r]->events) {
      busy += e.end - e.start;
      res.makespan = std::max(res.makespan, e.end);
    }
    res.busy.push_back(busy);
    busy_total += busy;
    res.peak_in_flight.push_back(peak_before(stages[r]->events, SimOp::kBackwardWeight));
    res.peak_before_b.push_back(peak_before(stages[r]->events, SimOp::kBackwardInput));
    res.peak_in_flight_overall = std::max(res.peak_in_flight_overall, res.peak_in_flight.back());
    const auto first = [&](int chunk) { return virtual_stage(shape.placement, P, r, chunk) == 0; };
    res.peak_grad_receives.push_back(stages[r]->peak_grad_receives);
    res.peak_grad_sends.push_back(peak_grad_sends(stages[r]->events, held[r].grad_sends, first));
    res.peak_messages.push_back(peak_open(held[r].messages));
    res.events.push_back(std::move(stages[r]->events));
  }
  if (res.makespan > 0) res.bubble_fraction = 1.0 - busy_total / (P * res.makespan);
  return res;
}

SimulationResult simulate(const SchedulePlan& plan, const OpCosts& costs, SendMode sends,
                          std::chrono::milliseconds timeout) {
  return simulate([&plan](StageOps& ops, const PipelineShape& mine) { plan.run(ops, mine.rank); },
                  plan.shape(), costs, sends, timeout);
}

SimulationResult simulate(const ScheduleTable& table, const PipelineShape& shape,
                          const OpCosts& costs, SendMode sends, std::chrono::milliseconds timeout) {
  if (table.size() != size_t(shape.stages)) {
    throw SimulationError("simulate: a table needs one list per rank");
  }
  const std::vector<StageProgram> programs = insert_p2p(table, shape);
  return simulate(
      [&programs](StageOps& ops, const PipelineShape& mine) { execute(programs[mine.rank], ops); },
      shape, costs, sends, timeout);
}

SimulationResult simulate(Schedule s, const PipelineShape& shape, const OpCosts& costs,
                          SendMode sends, std::chrono::milliseconds timeout) {
  return simulate(SchedulePlan(s, shape, costs), costs, sends, timeout);  // InputError first
}

}  // namespace mpf::pipeline
