#include "plan/search.hpp"

#include <algorithm>

namespace mpf::plan {

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

// The schedules (with their chunks per rank) a pipeline of pp stages may run.
std::vector<std::pair<pipeline::Schedule, int>> schedules(int pp) {
  using pipeline::Schedule;
  if (pp == 1) return {{Schedule::kOneFOneB, 1}};
  return {{Schedule::kOneFOneB, 1}, {Schedule::kAfab, 1}, {Schedule::kInterleaved, 2},
          {Schedule::kZbH1, 1},     {Schedule::kZbH2, 1}, {Schedule::kZbV, 2}};
}

}  // namespace

Candidate evaluate(const Job& job, const Machine& m, const Layout& l) {
  Candidate c;
  c.layout = l;
  c.problem = layout_problem(job, l);
  if (c.problem.empty()) c.predicted = predict(job, m, l);
  return c;
}

std::vector<Candidate> search(const Job& job, const Machine& m) {
  std::vector<Candidate> out;
  const int world = job.world();
  for (int tp : divisors(world)) {
    for (int cp : divisors(world / tp)) {
      for (int pp : divisors(world / tp / cp)) {
        const int dp = world / tp / cp / pp;
        for (int ep : divisors(dp)) {
          if (ep > 1 && !job.cfg.moe()) continue;
          for (const auto& [schedule, V] : schedules(pp)) {
            const int local = job.batch % dp == 0 ? job.batch / dp : 1;
            for (int M : divisors(local)) {
              // A pipeline with fewer microbatches than stages idles most of its ranks, and past
              // 8 per stage its bubble is small against the cost of smaller products.
              if (pp > 1 && (M < pp || M > 8 * pp)) continue;
              for (int flags = 0; flags < 8; ++flags) {
                Layout l;
                l.tp = tp, l.cp = cp, l.pp = pp, l.dp = dp, l.ep = ep;
                l.schedule = schedule, l.virtual_stages = V, l.microbatches = M;
                l.recompute = flags & 1;
                l.sequence_parallel = flags & 2;
                l.zero = flags & 4;
                // Switches that change nothing are not separate layouts.
                if (l.sequence_parallel && tp == 1) continue;
                if (l.zero && dp * cp == 1) continue;
                out.push_back(evaluate(job, m, l));
              }
            }
          }
        }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    auto rank = [](const Candidate& c) { return c.ok() ? 0 : c.problem.empty() ? 1 : 2; };
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    if (rank(a) == 0) return a.predicted.ms.step() < b.predicted.ms.step();
    if (rank(a) == 1) return a.predicted.memory.total() < b.predicted.memory.total();
    return false;
  });
  return out;
}

}  // namespace mpf::plan
