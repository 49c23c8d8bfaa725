#include "plan/search.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "core/error.hpp"

namespace mpf::plan {

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

// The schedules (with their chunks per rank) a pipeline of pp stages may run: interleaving with
// every V from 2 to the blocks a stage holds (Megatron ran 3 chunks of 5 blocks at 76B).
std::vector<std::pair<pipeline::Schedule, int>> schedules(int pp, int layers) {
  using pipeline::Schedule;
  if (pp == 1) return {{Schedule::kOneFOneB, 1}};
  std::vector<std::pair<Schedule, int>> out{{Schedule::kOneFOneB, 1}, {Schedule::kAfab, 1}};
  for (int v = 2; v * pp <= layers; ++v) out.push_back({Schedule::kInterleaved, v});
  out.insert(out.end(), {{Schedule::kZbH1, 1}, {Schedule::kZbH2, 1}, {Schedule::kZbV, 2}});
  return out;
}

using ShapeKey = std::tuple<int, int, int, int, int>;
ShapeKey shape_key(const Layout& l) {
  return {l.tp, l.cp, l.ep, l.pp, l.dp};
}

// The layouts a report shows: the best `top` that fit, and the best of each of the five best
// shapes (#1's and the four it is compared with).
class Shown {
 public:
  explicit Shown(int top) : top_(size_t(std::max(2, top))) {}

  void add(const Layout& l, double step) {
    best_.insert(std::upper_bound(best_.begin(), best_.end(), step), step);
    if (best_.size() > top_) best_.pop_back();
    auto [it, fresh] = shapes_.emplace(shape_key(l), step);
    if (!fresh && step < it->second) it->second = step;
    std::vector<double> firsts;
    for (const auto& s : shapes_) firsts.push_back(s.second);
    std::sort(firsts.begin(), firsts.end());
    fifth_shape_ = firsts.size() >= 5 ? firsts[4] : -1;
  }
  // Whether a layout whose step is at least `bound` could change what is shown.
  bool needs(const Layout& l, double bound) const {
    if (best_.size() < top_ || bound < best_.back()) return true;
    const auto it = shapes_.find(shape_key(l));
    if (it != shapes_.end() && bound >= it->second) return false;
    return fifth_shape_ < 0 || bound < fifth_shape_;
  }

 private:
  size_t top_;
  std::vector<double> best_;  // ascending
  std::map<ShapeKey, double> shapes_;
  double fifth_shape_ = -1;
};

}  // namespace

Candidate evaluate(const Job& job, const Machine& m, const Layout& l) {
  Candidate c;
  c.layout = l;
  c.problem = layout_problem(job, l);
  if (c.problem.empty()) c.predicted = predict(job, m, l);
  return c;
}

std::vector<Candidate> search(const Job& job, const Machine& m, const SearchOptions& o) {
  std::vector<Candidate> out;
  std::map<std::string, size_t> reasons;  // a problem's reason -> its entry in out
  Predictor predictor(job, m);
  size_t weighed = 0, predicted = 0;
  size_t across = size_t(-1);  // the entry of layouts whose TP group spans nodes
  const int world = job.world();
  for (int tp : divisors(world)) {
    for (int cp : divisors(world / tp)) {
      for (int pp : divisors(world / tp / cp)) {
        const int dp = world / tp / cp / pp;
        for (int ep : divisors(dp)) {
          if (ep > 1 && !job.cfg.moe()) continue;
          for (const auto& [schedule, V] : schedules(pp, job.cfg.layers)) {
            const int local = job.batch % dp == 0 ? job.batch / dp : 1;
            for (int M : divisors(local)) {
              // A pipeline with fewer microbatches than stages idles most of its ranks.
              if (pp > 1 && M < pp) continue;
              for (int flags = 0; flags < 8; ++flags) {
                Layout l;
                l.tp = tp, l.cp = cp, l.pp = pp, l.dp = dp, l.ep = ep;
                l.schedule = schedule, l.virtual_stages = V, l.microbatches = M;
                l.recompute = flags & 1;
                l.sequence_parallel = flags & 2;
                l.zero = flags & 4 ? 1 : 0;
                // Switches that change nothing are not separate layouts.
                if (l.sequence_parallel && tp == 1) continue;
                if (l.zero && dp * cp == 1) continue;
                require(++weighed <= kMaxLayouts,
                        "the search over " + std::to_string(world) + " ranks has more than " +
                            std::to_string(kMaxLayouts) +
                            " layouts to weigh, more than a plan holds; plan fewer --nodes, or "
                            "predict chosen layouts with --evaluate");
                if (o.progress && weighed % 4096 == 0) o.progress(weighed, predicted);
                // Most layouts of a large world put a TP group across nodes: counted without
                // the checks' messages, each the first one's.
                if (job.ranks_per_node % tp != 0 && across != size_t(-1)) {
                  ++out[across].count;
                  continue;
                }
                Candidate c;
                c.layout = l;
                c.problem = layout_problem(job, l);
                if (job.ranks_per_node % tp != 0) across = out.size();
                if (!c.problem.empty()) {
                  const auto [at, fresh] =
                      reasons.emplace(c.problem.substr(0, c.problem.find(':')), out.size());
                  if (!fresh) {
                    ++out[at->second].count;
                    continue;
                  }
                } else {
                  c.bound_ms = predictor.step_bound(l);
                }
                out.push_back(std::move(c));
              }
            }
          }
        }
      }
    }
  }
  if (o.progress) o.progress(weighed, predicted);
  // Those that run, by bound; each predicted until nothing left could be shown.
  std::vector<size_t> order;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].problem.empty()) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return out[a].bound_ms < out[b].bound_ms; });
  Shown shown(o.top);
  const int64_t limit = predictor.memory_limit();
  std::vector<size_t> heavy;
  bool any_fit = false;
  for (size_t i : order) {
    Candidate& c = out[i];
    // The bound is the step's terms summed another way: allow for rounding.
    if (!shown.needs(c.layout, c.bound_ms * (1 - 1e-9))) {
      c.pruned = true;
      continue;
    }
    // Over the limit by its memory floor, or its peak in full (its program's held sets, cached),
    // before its step is timed.
    auto too_large = [&](Candidate& k) {
      k.predicted.memory = predictor.memory_bound(k.layout);
      k.memory_bound_only = k.predicted.memory.total() > limit;
      if (k.memory_bound_only) return true;
      if (k.layout.schedule == pipeline::Schedule::kZbAuto) return false;
      k.predicted.memory = predictor.memory(k.layout);
      return k.predicted.memory.total() > limit;
    };
    bool heavy_one = too_large(c);
    // Keeping every activation does not fit: the layout is weighed with selective recomputation
    // instead, whose few element-wise passes in W leave its time bound a bound.
    if (heavy_one && !c.layout.recompute && !c.layout.selective) {
      Candidate selective = c;
      selective.layout.selective = true;
      if (!too_large(selective)) c = selective, heavy_one = false;
    }
    // Nor under ZeRO-1: weighed with ZeRO-2, else ZeRO-3 (the trainer's block-sharded stages),
    // which fit more for more communication, so only where ZeRO-1 does not fit.
    for (int stage = 2; heavy_one && c.layout.zero == 1 && !job.muon && stage <= 3; ++stage) {
      Candidate sharded = c;
      sharded.layout.zero = stage;
      bool heavy = too_large(sharded);
      if (heavy && !sharded.layout.recompute && !sharded.layout.selective) {
        Candidate both = sharded;
        both.layout.selective = true;
        if (!too_large(both)) sharded = both, heavy = false;
      }
      if (!heavy) c = sharded, heavy_one = false;
    }
    if (heavy_one) {
      c.predicted.memory_limit = limit;
      c.predicted.fits = false;
      heavy.push_back(i);
      continue;
    }
    c.predicted = predictor.predict(c.layout);
    if (o.progress && ++predicted % 64 == 0) o.progress(weighed, predicted);
    // A ZeRO layout whose DP x CP groups span nodes, weighed under HSDP too (--zero-group node:
    // the shards within each node, less traffic between nodes for more memory): the faster of
    // the two that fit is the layout.
    Candidate hsdp = c;
    hsdp.layout.zero_node = true;
    if (c.predicted.fits && c.layout.zero && !c.layout.zero_node && c.layout.ep == 1 && !job.muon &&
        zero_node_ranks(job, c.layout) > 0 && !too_large(hsdp)) {
      hsdp.predicted = predictor.predict(hsdp.layout);
      if (hsdp.predicted.fits && hsdp.predicted.ms.step() < c.predicted.ms.step()) c = hsdp;
    }
    if (c.predicted.fits) {
      shown.add(c.layout, c.predicted.ms.step());
      any_fit = true;
    } else {
      heavy.push_back(i);
    }
  }
  // When none fits, the report names the smallest: the peaks of the smallest bounds, in full.
  if (!any_fit) {
    std::sort(heavy.begin(), heavy.end(), [&](size_t a, size_t b) {
      return out[a].predicted.memory.total() < out[b].predicted.memory.total();
    });
    for (size_t k = 0; k < heavy.size() && k < 20; ++k) {
      Candidate& c = out[heavy[k]];
      if (!c.memory_bound_only) continue;
      c.predicted = predictor.predict(c.layout);
      c.memory_bound_only = false;
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    auto rank = [](const Candidate& c) {
      return c.ok() ? 0 : !c.problem.empty() ? 3 : c.pruned ? 2 : 1;
    };
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    if (rank(a) == 0) return a.predicted.ms.step() < b.predicted.ms.step();
    if (rank(a) == 1) return a.predicted.memory.total() < b.predicted.memory.total();
    if (rank(a) == 2) return a.bound_ms < b.bound_ms;
    return false;
  });
  return out;
}

}  // namespace mpf::plan
