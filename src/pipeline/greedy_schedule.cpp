#include "pipeline/greedy_schedule.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <vector>

#include "core/error.hpp"

namespace mpf::pipeline {

namespace {

constexpr double kUnknown = std::numeric_limits<double>::infinity();

// The simulation's state of one rank. Per chunk, forwards, Bs and Ws each go in microbatch
// order, so three counters say what is done.
struct RankState {
  double clock = 0.0;
  std::vector<int> forwards, backwards, weights;       // per chunk: done so far
  std::vector<std::vector<double>> input, grad, fend;  // per chunk, per mb: arrival / F's end
  int left = 0;                                        // nodes still to run
};

struct Choice {
  NodeKind kind;
  int chunk;
  double start;
};

class Greedy {
 public:
  Greedy(const PipelineShape& shape, const OpCosts& costs, int limit, const GreedyOptions& o)
      : shape_(shape),
        costs_(costs),
        limit_(limit),
        options_(o),
        ranks_(shape.stages),
        table_(shape.stages) {
    const int V = shape.virtual_stages, M = shape.microbatches;
    for (RankState& r : ranks_) {
      r.forwards.assign(V, 0);
      r.backwards.assign(V, 0);
      r.weights.assign(V, 0);
      r.input.assign(V, std::vector<double>(M, kUnknown));
      r.grad.assign(V, std::vector<double>(M, kUnknown));
      r.fend.assign(V, std::vector<double>(M, kUnknown));
      r.left = 3 * V * M;
    }
  }

  ScheduleTable run() {
    for (;;) {
      int who = -1;
      Choice best{NodeKind::kF, 0, kUnknown};
      bool unfinished = false;
      for (int r = 0; r < shape_.stages; ++r) {
        if (ranks_[r].left == 0) continue;
        unfinished = true;
        Choice c;
        if (choose(r, c) && c.start < best.start) {
          best = c;
          who = r;
        }
      }
      if (!unfinished) return table_;
      if (who < 0) throw std::logic_error("greedy_schedule: no rank can move (a bug)");
      commit(who, best);
    }
  }

 private:
  int stage_of(int r, int c) const { return virtual_stage(shape_.placement, shape_.stages, r, c); }
  int last_stage() const { return shape_.stages * shape_.virtual_stages - 1; }

  // When the next F of chunk c may start (kUnknown: its input has not been sent yet).
  double forward_ready(int r, int c) const {
    const RankState& s = ranks_[r];
    const int mb = s.forwards[c];
    return stage_of(r, c) == 0 ? 0.0 : s.input[c][mb];
  }
  double backward_ready(int r, int c) const {
    const RankState& s = ranks_[r];
    const int mb = s.backwards[c];
    if (mb >= s.forwards[c]) return kUnknown;
    const double fend = s.fend[c][mb];
    return stage_of(r, c) == last_stage() ? fend : std::max(fend, s.grad[c][mb]);
  }
  int held(int r) const {
    const RankState& s = ranks_[r];
    int n = 0;
    for (size_t c = 0; c < s.forwards.size(); ++c) n += s.forwards[c] - s.weights[c];
    return n;
  }
  // Memory for the next F of chunk c: a new microbatch (chunk 0) must leave room for its later
  // chunks on this rank, and for those of the microbatches already admitted.
  bool admits(int r, int c) const {
    if (c > 0) return true;
    const RankState& s = ranks_[r];
    const int V = shape_.virtual_stages;
    const int owed = (s.forwards[0] - s.forwards[V - 1]) * (V - 1);
    return held(r) + owed + V <= limit_;
  }

  // Rank r's next node and when it would start; false if it must wait for another rank.
  bool choose(int r, Choice& out) const {
    const RankState& s = ranks_[r];
    const int V = shape_.virtual_stages, M = shape_.microbatches;
    const double now = s.clock;
    int b_chunk = -1, f_chunk = -1, w_chunk = -1;
    double b_at = kUnknown, f_at = kUnknown;
    bool memory_blocked = false;
    for (int c = 0; c < V; ++c) {
      const double bt = backward_ready(r, c);
      if (bt < kUnknown) {
        const double at = std::max(bt, now);
        // The latest virtual stage first: the longest chain of Bs still to come.
        if (at < b_at || (at == b_at && stage_of(r, c) > stage_of(r, b_chunk))) {
          b_at = at;
          b_chunk = c;
        }
      }
      if (s.forwards[c] < M) {
        const double ft = forward_ready(r, c);
        if (!admits(r, c)) {
          memory_blocked |= ft <= now;
        } else if (ft < kUnknown) {
          const double at = std::max(ft, now);
          bool better = f_chunk < 0 || at < f_at;
          if (!better && at == f_at) {
            const int older = s.forwards[f_chunk] - s.forwards[c];  // > 0: c's is older
            better = options_.oldest_first
                         ? older > 0 || (older == 0 && stage_of(r, c) > stage_of(r, f_chunk))
                         : stage_of(r, c) < stage_of(r, f_chunk);
          }
          if (better) {
            f_at = at;
            f_chunk = c;
          }
        }
      }
      if (s.weights[c] < s.backwards[c] && (w_chunk < 0 || s.weights[c] < s.weights[w_chunk])) {
        w_chunk = c;
      }
    }
    const double next = std::min(b_at, f_at);  // the first B or admitted F to be ready
    const bool full = held(r) >= limit_;
    if (w_chunk >= 0 && options_.free_memory_first && memory_blocked && f_chunk < 0) {
      out = {NodeKind::kW, w_chunk, now};
      return true;
    }
    if (next <= now) {  // something is ready: a B first, then an F
      out = b_at <= now ? Choice{NodeKind::kB, b_chunk, now} : Choice{NodeKind::kF, f_chunk, now};
      return true;
    }
    if (w_chunk >= 0 && (next == kUnknown || next - now >= costs_.backward_weight_on(r) || full)) {
      out = {NodeKind::kW, w_chunk, now};
      return true;
    }
    if (next < kUnknown) {  // wait for the first arrival
      out =
          b_at <= f_at ? Choice{NodeKind::kB, b_chunk, b_at} : Choice{NodeKind::kF, f_chunk, f_at};
      return true;
    }
    return false;
  }

  void commit(int r, const Choice& c) {
    RankState& s = ranks_[r];
    const int st = stage_of(r, c.chunk);
    int mb = 0;
    double end = c.start;
    auto deliver = [&](int to_stage, bool gradient, double at) {
      const ChunkSite site = chunk_site(shape_.placement, shape_.stages, to_stage);
      const double arrive = at + (site.rank == r ? 0.0 : costs_.p2p);
      auto& slot = gradient ? ranks_[site.rank].grad : ranks_[site.rank].input;
      slot[site.chunk][mb] = arrive;
    };
    switch (c.kind) {
      case NodeKind::kF:
        mb = s.forwards[c.chunk]++;
        end += costs_.forward_on(r);
        s.fend[c.chunk][mb] = end;
        if (st < last_stage()) deliver(st + 1, false, end);
        break;
      case NodeKind::kB:
        mb = s.backwards[c.chunk]++;
        end += costs_.backward_input_on(r);
        if (st > 0) deliver(st - 1, true, end);
        break;
      default:
        mb = s.weights[c.chunk]++;
        end += costs_.backward_weight_on(r);
        break;
    }
    s.clock = end;
    --s.left;
    table_[r].push_back({c.kind, mb, c.chunk});
  }

  const PipelineShape shape_;
  const OpCosts costs_;
  const int limit_;
  const GreedyOptions options_;
  std::vector<RankState> ranks_;
  ScheduleTable table_;
};

}  // namespace

ScheduleTable greedy_schedule(const PipelineShape& shape, const OpCosts& costs, int limit,
                              const GreedyOptions& options) {
  const int V = shape.virtual_stages;
  require(V == 1 || (V == 2 && shape.placement == ChunkPlacement::kV),
          "the zero-bubble search runs one chunk per rank or two in a V");
  require(limit >= V, "the zero-bubble search needs room for at least one microbatch per rank");
  return Greedy(shape, costs, limit, options).run();
}

}  // namespace mpf::pipeline
