#include "pipeline/replay.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "pipeline/placement.hpp"
#include "pipeline/stage_ops.hpp"
#include "pipeline/stage_program.hpp"

namespace mpf::pipeline {

namespace {

enum Kind : uint8_t { kF = 0, kB = 1, kW = 2, kExchange = 3, kPostAhead = 4 };

}  // namespace

// Records one rank's verbs as the simulator's SimulatedStage would post them: the halves that
// are no-ops at the pipeline's ends are dropped. Under buffered sends a receive completes at its
// message's arrival or the verb's clock, whichever is later, whenever it was posted: a receive
// posted ahead only says from when it holds a buffer.
class Recorder final : public StageOps {
 public:
  Recorder(const PipelineShape& shape, int rank, std::vector<PipelineReplay::Verb>& out)
      : s_(shape), rank_(rank), out_(out) {}

  void forward(int mb, int chunk) override { out_.push_back({kF, mb, chunk}); }
  void backward_input(int mb, int chunk) override { out_.push_back({kB, mb, chunk}); }
  void backward_weight(int mb, int chunk) override { out_.push_back({kW, mb, chunk}); }
  void recv_forward(int mb, int chunk) override { exchange(input_recv(mb, chunk), -1); }
  void send_forward(int mb, int chunk) override { exchange(output_send(mb, chunk), -1); }
  void recv_backward(int mb, int chunk) override { exchange(grad_recv(mb, chunk), -1); }
  void send_backward(int mb, int chunk) override { exchange(grad_send(mb, chunk), -1); }
  void send_forward_recv_backward(int smb, int sc, int rmb, int rc) override {
    exchange(output_send(smb, sc), grad_recv(rmb, rc));
  }
  void send_backward_recv_forward(int smb, int sc, int rmb, int rc) override {
    exchange(grad_send(smb, sc), input_recv(rmb, rc));
  }
  void send_forward_recv_forward(int smb, int sc, int rmb, int rc) override {
    exchange(output_send(smb, sc), input_recv(rmb, rc));
  }
  void send_backward_recv_backward(int smb, int sc, int rmb, int rc) override {
    exchange(grad_send(smb, sc), grad_recv(rmb, rc));
  }
  void post_recv_forward(int mb, int chunk) override { post_ahead(input_recv(mb, chunk)); }
  void post_recv_backward(int mb, int chunk) override { post_ahead(grad_recv(mb, chunk)); }

 private:
  int stage(int chunk) const { return virtual_stage(s_.placement, s_.stages, rank_, chunk); }
  int last() const { return s_.stages * s_.virtual_stages - 1; }
  int64_t channel(int dest, int mb, int chunk, Direction dir) const {
    return ((int64_t(dest) * s_.microbatches + mb) * s_.virtual_stages + chunk) * 2 +
           (dir == Direction::kBackward);
  }
  int32_t half(int64_t ch, bool send, bool local) const {
    return int32_t(ch * 4 + (send ? 2 : 0) + (local ? 1 : 0));
  }
  int32_t input_recv(int mb, int chunk) const {
    if (stage(chunk) == 0) return -1;
    const bool local = chunk_site(s_.placement, s_.stages, stage(chunk) - 1).rank == rank_;
    return half(channel(rank_, mb, chunk, Direction::kForward), false, local);
  }
  int32_t grad_recv(int mb, int chunk) const {
    if (stage(chunk) == last()) return -1;
    const bool local = chunk_site(s_.placement, s_.stages, stage(chunk) + 1).rank == rank_;
    return half(channel(rank_, mb, chunk, Direction::kBackward), false, local);
  }
  int32_t send_to(int mb, int to, Direction dir) const {
    const ChunkSite site = chunk_site(s_.placement, s_.stages, to);
    return half(channel(site.rank, mb, site.chunk, dir), true, site.rank == rank_);
  }
  int32_t output_send(int mb, int chunk) const {
    return stage(chunk) == last() ? -1 : send_to(mb, stage(chunk) + 1, Direction::kForward);
  }
  int32_t grad_send(int mb, int chunk) const {
    return stage(chunk) == 0 ? -1 : send_to(mb, stage(chunk) - 1, Direction::kBackward);
  }
  void post_ahead(int32_t half) {
    if (half >= 0) out_.push_back({kPostAhead, half, -1});
  }
  void exchange(int32_t a, int32_t b) {
    if (a < 0) std::swap(a, b);
    if (a >= 0) out_.push_back({kExchange, a, b});
  }

  const PipelineShape s_;
  const int rank_;
  std::vector<PipelineReplay::Verb>& out_;
};

PipelineReplay::PipelineReplay(const SchedulePlan& plan) : shape_(plan.shape()) {
  record([&](StageOps& ops, int r) { plan.run(ops, r); });
}

PipelineReplay::PipelineReplay(const ScheduleTable& table, const PipelineShape& shape)
    : shape_(shape) {
  shape_.rank = 0;
  const std::vector<StageProgram> programs = insert_p2p(table, shape_);
  record([&](StageOps& ops, int r) { execute(programs[size_t(r)], ops); });
}

template <class Run>
void PipelineReplay::record(Run&& run) {
  const int P = shape_.stages;
  // Channels are numbered in 32 bits (4 per message): a shape past that is no plan's.
  const double channels = 2.0 * P * shape_.microbatches * shape_.virtual_stages;
  if (channels * 4 >= double(std::numeric_limits<int32_t>::max())) {
    throw SimulationError("a pipeline of " + std::to_string(P) + " stages x " +
                          std::to_string(shape_.microbatches) +
                          " microbatches is too large to simulate");
  }
  verbs_.resize(size_t(P));
  for (int r = 0; r < P; ++r) {
    Recorder rec(shape_, r, verbs_[size_t(r)]);
    run(rec, r);
  }
}

SimulationResult PipelineReplay::order() const {
  SimulationResult out;
  out.shape = shape_;
  out.shape.rank = 0;
  for (const std::vector<Verb>& verbs : verbs_) {
    std::vector<SimEvent> events;
    for (const Verb& v : verbs) {
      if (v.kind < kExchange) events.push_back({SimOp(v.kind), v.a, v.b, 0.0, 0.0});
    }
    out.events.push_back(std::move(events));
  }
  return out;
}

size_t PipelineReplay::size() const {
  size_t n = 0;
  for (const auto& v : verbs_) n += v.size();
  return n;
}

SimulationResult PipelineReplay::run(const OpCosts& costs) const {
  const int P = shape_.stages;
  const size_t channels = size_t(2) * P * shape_.microbatches * shape_.virtual_stages;
  const double never = -1.0;  // a send not yet posted (clocks are never negative)
  std::vector<double> sent(channels, never);
  // A message's buffers (SimulationResult::peak_grad_sends and peak_messages): when its receive
  // was posted, and its sender; the received gradients posted whose B has not run, per rank.
  std::vector<double> received(channels, never);
  std::vector<int> sender(channels, -1);
  std::vector<char> local(channels, 0);
  std::vector<int> open_grads(size_t(P), 0), peak_grads(size_t(P), 0);
  const int V = shape_.virtual_stages, M = shape_.microbatches;
  auto last_chunk = [&](int r, int chunk) {
    return virtual_stage(shape_.placement, P, r, chunk) == P * V - 1;
  };
  auto post_receive = [&](int r, int32_t h, double t) {
    const size_t ch = size_t(h >> 2);
    if (received[ch] != never) return;  // posted ahead
    received[ch] = t;
    if (ch & 1) peak_grads[size_t(r)] = std::max(peak_grads[size_t(r)], ++open_grads[size_t(r)]);
  };
  std::vector<size_t> pc(size_t(P), 0);
  std::vector<double> clock(size_t(P), 0.0);
  std::vector<char> posted(size_t(P), 0);
  SimulationResult res;
  res.shape = shape_;
  res.shape.rank = 0;
  res.costs = costs;
  res.events.resize(size_t(P));
  for (int r = 0; r < P; ++r) res.events[size_t(r)].reserve(verbs_[size_t(r)].size());
  // Each rank runs until a receive's message has not been sent; passes repeat while any moved.
  // A rank's clock depends only on the messages it receives, so the order of the passes does
  // not change a time.
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < P; ++r) {
      const std::vector<Verb>& verbs = verbs_[size_t(r)];
      size_t& at = pc[size_t(r)];
      double& t = clock[size_t(r)];
      while (at < verbs.size()) {
        const Verb& v = verbs[at];
        if (v.kind == kPostAhead) {
          post_receive(r, v.a, t);
          ++at;
          moved = true;
          continue;
        }
        if (v.kind != kExchange) {
          if (v.kind == kB && !last_chunk(r, v.b)) --open_grads[size_t(r)];
          const double cost = v.kind == kF   ? costs.forward_on(r)
                              : v.kind == kB ? costs.backward_input_on(r)
                                             : costs.backward_weight_on(r);
          res.events[size_t(r)].push_back({SimOp(v.kind), v.a, v.b, t, t + cost});
          t += cost;
          ++at;
          moved = true;
          continue;
        }
        const int32_t halves[2] = {v.a, v.b};
        if (!posted[size_t(r)]) {  // a verb posts its sends before it waits
          for (int32_t h : halves) {
            if (h < 0) continue;
            if (!(h & 2)) {
              post_receive(r, h, t);
              continue;
            }
            sent[size_t(h >> 2)] = t;
            sender[size_t(h >> 2)] = r;
            local[size_t(h >> 2)] = char(h & 1);
          }
          posted[size_t(r)] = 1;
          moved = true;
        }
        bool ready = true;
        double done = t;
        for (int32_t h : halves) {
          if (h < 0 || (h & 2)) continue;
          const double s = sent[size_t(h >> 2)];
          if (s == never) {
            ready = false;
            break;
          }
          done = std::max(done, (h & 1) ? s : s + costs.p2p);
        }
        if (!ready) break;
        t = done;
        posted[size_t(r)] = 0;
        ++at;
        moved = true;
      }
    }
  }
  for (int r = 0; r < P; ++r) {
    if (pc[size_t(r)] < verbs_[size_t(r)].size()) {
      throw SimulationError("deadlock: rank " + std::to_string(r) +
                            " waits for a message no rank sends");
    }
  }
  // Each message holds its sender's buffer until the receive is posted and the data has moved,
  // its receiver's from the posting until the data has arrived (as simulate counts).
  std::vector<std::vector<HeldBuffer>> grad_sends(static_cast<size_t>(P)),
      messages(static_cast<size_t>(P));
  for (size_t ch = 0; ch < channels; ++ch) {
    if (sent[ch] == never) continue;
    const double done = std::max(received[ch], sent[ch] + (local[ch] ? 0.0 : costs.p2p));
    const bool backward = ch & 1;
    const int chunk = int((ch >> 1) % size_t(V)), mb = int((ch >> 1) / size_t(V) % size_t(M));
    const int dest = int((ch >> 1) / size_t(V) / size_t(M));
    const int to = virtual_stage(shape_.placement, P, dest, chunk);
    const int from_chunk = chunk_site(shape_.placement, P, backward ? to + 1 : to - 1).chunk;
    const HeldBuffer send{sent[ch], done, mb, from_chunk};
    messages[size_t(sender[ch])].push_back(send);
    if (backward) grad_sends[size_t(sender[ch])].push_back(send);
    messages[size_t(dest)].push_back({received[ch], done, mb, chunk});
  }
  double busy_total = 0.0;
  for (int r = 0; r < P; ++r) {
    const auto first = [&](int chunk) { return virtual_stage(shape_.placement, P, r, chunk) == 0; };
    res.peak_grad_receives.push_back(peak_grads[size_t(r)]);
    res.peak_grad_sends.push_back(
        peak_grad_sends(res.events[size_t(r)], grad_sends[size_t(r)], first));
    res.peak_messages.push_back(peak_open(messages[size_t(r)]));
    double busy = 0.0;
    for (const SimEvent& e : res.events[size_t(r)]) {
      busy += e.end - e.start;
      res.makespan = std::max(res.makespan, e.end);
    }
    res.busy.push_back(busy);
    busy_total += busy;
    res.peak_in_flight.push_back(peak_before(res.events[size_t(r)], SimOp::kBackwardWeight));
    res.peak_before_b.push_back(peak_before(res.events[size_t(r)], SimOp::kBackwardInput));
    res.peak_in_flight_overall = std::max(res.peak_in_flight_overall, res.peak_in_flight.back());
  }
  if (res.makespan > 0) res.bubble_fraction = 1.0 - busy_total / (P * res.makespan);
  return res;
}

}  // namespace mpf::pipeline
