// What the schedule tests share: a shape, and the check that a simulated step ran every op of
// every (microbatch, chunk) once and in order.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "pipeline/simulator.hpp"

namespace mpf::pipeline {

inline PipelineShape shape_of(int P, int rank, int V, int M) {
  PipelineShape s;
  s.stages = P;
  s.rank = rank;
  s.virtual_stages = V;
  s.microbatches = M;
  return s;
}

// Every rank ran F, B and W of every (mb, chunk) exactly once, F before B before W.
inline void expect_each_op_once(const SimulationResult& r) {
  const int M = r.shape.microbatches, V = r.shape.virtual_stages;
  for (size_t rank = 0; rank < r.events.size(); ++rank) {
    std::vector<int> count(3 * M * V, 0);
    std::vector<double> end_of(3 * M * V, -1.0);
    for (const SimEvent& e : r.events[rank]) {
      const int op = static_cast<int>(e.op);  // F, B, W
      ASSERT_TRUE(e.mb >= 0 && e.mb < M && e.chunk >= 0 && e.chunk < V);
      const int i = (op * M + e.mb) * V + e.chunk;
      ++count[i];
      end_of[i] = e.end;
      if (op > 0) {  // B after its F, W after its B
        const int before = ((op - 1) * M + e.mb) * V + e.chunk;
        EXPECT_GE(end_of[before], 0.0) << "rank " << rank << " op " << op << " mb " << e.mb;
        EXPECT_LE(end_of[before], e.start + 1e-12);
      }
    }
    for (int c : count) ASSERT_EQ(c, 1) << "rank " << rank;
  }
}

}  // namespace mpf::pipeline
