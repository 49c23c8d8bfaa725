// Pipeline schedules without MPI: the pure counts against their formulas, then every schedule run
// by the simulator (the same loop code the trainer runs) against the textbook bubble, its
// activation memory, and the protocol (every (mb, chunk) forwarded and backwarded once, no
// deadlock).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/simulator.hpp"
#include "unit/schedule_checks.hpp"

namespace mpf::pipeline {

// ---- the pure counts -------------------------------------------------------------------------

TEST(ScheduleCounts, OneFOneBWarmupIsPicotrons) {
  for (int P = 1; P <= 8; ++P) {
    for (int rank = 0; rank < P; ++rank) {
      for (int M = 1; M <= 20; ++M) {
        EXPECT_EQ(one_f_one_b_warmup(shape_of(P, rank, 1, M)), std::min(P - rank - 1, M));
      }
    }
  }
}

TEST(ScheduleCounts, InterleavedWarmupIsMegatronsWithTheLastGroupsSize) {
  for (int P = 1; P <= 8; ++P) {
    for (int rank = 0; rank < P; ++rank) {
      for (int V = 1; V <= 4; ++V) {
        for (int M = P; M <= 4 * P + 3; ++M) {
          const PipelineShape s = shape_of(P, rank, V, M);
          const int G = P + M % P;
          EXPECT_EQ(interleaved_group_size(s), G);
          EXPECT_EQ(interleaved_warmup(s), std::min(2 * (P - rank - 1) + (V - 1) * G, M * V));
          if (M % P == 0) {  // Megatron-LM's formula, unchanged when P divides M
            EXPECT_EQ(interleaved_warmup(s), std::min(2 * (P - rank - 1) + (V - 1) * P, M * V));
          }
        }
      }
    }
  }
  // Worked by hand: P = 4, V = 2, M = 4 (rank 0: 3 + 3 + 4 = 10, capped at M·V = 8); P = 3,
  // V = 3, M = 3 (rank 2: 0 + 6 = 6; rank 0: 4 + 6 = 10, capped at 9).
  EXPECT_EQ(interleaved_warmup(shape_of(4, 0, 2, 4)), 8);
  EXPECT_EQ(interleaved_warmup(shape_of(3, 2, 3, 3)), 6);
  EXPECT_EQ(interleaved_warmup(shape_of(3, 0, 3, 3)), 9);
  // M = 9, P = 4: the last group has 5 microbatches, so rank 0 warms up with 3 + 3 + 5.
  EXPECT_EQ(interleaved_warmup(shape_of(4, 0, 2, 9)), 11);
}

TEST(ScheduleCounts, InterleavedChunkMapIsMegatronsWhenPDividesM) {
  for (int P = 1; P <= 6; ++P) {
    for (int V = 1; V <= 4; ++V) {
      for (int M = P; M <= 4 * P; M += P) {
        const PipelineShape s = shape_of(P, 0, V, M);
        for (int k = 0; k < M * V; ++k) {
          EXPECT_EQ(interleaved_forward_chunk(s, k), k % (P * V) / P);
          EXPECT_EQ(interleaved_backward_chunk(s, k), V - 1 - k % (P * V) / P);
          EXPECT_EQ(interleaved_microbatch(s, k), k / (P * V) * P + k % P);
        }
      }
    }
  }
}

TEST(ScheduleCounts, InterleavedRemainderRunsBehindTheLastFullRound) {
  // P = 4, V = 2, M = 9: groups {0..3} and {4..8} (the remainder runs behind the last full round).
  const PipelineShape s = shape_of(4, 0, 2, 9);
  const std::vector<int> mb = {0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 8, 4, 5, 6, 7, 8};
  const std::vector<int> chunk = {0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1};
  for (int k = 0; k < 18; ++k) {
    EXPECT_EQ(interleaved_microbatch(s, k), mb[k]) << "k " << k;
    EXPECT_EQ(interleaved_forward_chunk(s, k), chunk[k]) << "k " << k;
    EXPECT_EQ(interleaved_backward_chunk(s, k), 1 - chunk[k]) << "k " << k;
  }
}

TEST(ScheduleCounts, InterleavedOrderVisitsEveryMicrobatchChunkOnceInOrder) {
  for (int P = 1; P <= 6; ++P) {
    for (int V = 1; V <= 4; ++V) {
      for (int M = P; M <= 3 * P + 2; ++M) {
        const PipelineShape s = shape_of(P, 0, V, M);
        std::vector<int> next_chunk(M, 0);  // per microbatch: chunks go up, one at a time
        std::vector<int> next_mb(V, 0);     // per chunk: microbatches go up, one at a time
        for (int k = 0; k < M * V; ++k) {
          const int m = interleaved_microbatch(s, k), c = interleaved_forward_chunk(s, k);
          ASSERT_TRUE(m >= 0 && m < M && c >= 0 && c < V);
          EXPECT_EQ(c, next_chunk[m]++);
          EXPECT_EQ(m, next_mb[c]++);
        }
      }
    }
  }
}

TEST(ScheduleCounts, BadShapesAndNamesAreInputErrors) {
  EXPECT_EQ(parse_schedule("afab"), Schedule::kAfab);
  EXPECT_EQ(parse_schedule("1f1b"), Schedule::kOneFOneB);
  EXPECT_EQ(parse_schedule("interleaved"), Schedule::kInterleaved);
  for (Schedule s : {Schedule::kZbH1, Schedule::kZbH2, Schedule::kZbV, Schedule::kZbAuto}) {
    EXPECT_EQ(parse_schedule(schedule_name(s)), s);
  }
  try {
    parse_schedule("gpipe");
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("afab, 1f1b, interleaved, zb-h1, zb-h2, zb-v or zb-auto"),
              std::string::npos);
  }
  for (Schedule s : {Schedule::kAfab, Schedule::kOneFOneB, Schedule::kInterleaved}) {
    EXPECT_THROW(validate(shape_of(0, 0, 1, 4), s), InputError);              // no stage
    EXPECT_THROW(validate(shape_of(4, 4, 1, 4), s), InputError);              // rank out of range
    EXPECT_THROW(validate(shape_of(4, -1, 1, 4), s), InputError);             // rank out of range
    EXPECT_THROW(validate(shape_of(4, 0, 0, 4), s), InputError);              // V < 1
    EXPECT_THROW(validate(shape_of(4, 0, 1, 0), s), InputError);              // M < 1
    EXPECT_THROW(validate(shape_of(4, 0, 1 << 20, 1 << 12), s), InputError);  // M·V overflows
    EXPECT_NO_THROW(validate(shape_of(4, 3, 1, 4), s));
  }
  EXPECT_THROW(validate(shape_of(4, 0, 2, 8), Schedule::kOneFOneB), InputError);     // V needs
  EXPECT_THROW(validate(shape_of(4, 0, 2, 8), Schedule::kAfab), InputError);         // interleaved
  EXPECT_THROW(validate(shape_of(4, 0, 2, 3), Schedule::kInterleaved), InputError);  // M < P
  EXPECT_NO_THROW(validate(shape_of(4, 0, 1, 3), Schedule::kOneFOneB));  // fine without chunks
  // The zero-bubble schedules: zb-v needs exactly two chunks in a V, zb-auto one or two.
  auto v_shape = [](int P, int V, int M) {
    PipelineShape s = shape_of(P, 0, V, M);
    s.placement = ChunkPlacement::kV;
    return s;
  };
  EXPECT_NO_THROW(validate(v_shape(4, 2, 3), Schedule::kZbV));  // any M: no M >= P needed
  EXPECT_THROW(validate(v_shape(4, 3, 8), Schedule::kZbV), InputError);
  EXPECT_THROW(validate(v_shape(4, 1, 8), Schedule::kZbV), InputError);
  EXPECT_THROW(validate(shape_of(4, 0, 2, 8), Schedule::kZbV), InputError);  // not in a V
  EXPECT_NO_THROW(validate(v_shape(4, 2, 8), Schedule::kZbAuto));
  EXPECT_NO_THROW(validate(shape_of(4, 0, 1, 2), Schedule::kZbAuto));
  EXPECT_THROW(validate(shape_of(4, 0, 3, 8), Schedule::kZbAuto), InputError);
  EXPECT_THROW(validate(shape_of(4, 0, 2, 8), Schedule::kZbH1), InputError);
  EXPECT_THROW(validate(shape_of(4, 0, 2, 8), Schedule::kZbH2), InputError);
  EXPECT_EQ(placement_of(Schedule::kZbV, 2), ChunkPlacement::kV);
  EXPECT_EQ(placement_of(Schedule::kZbAuto, 2), ChunkPlacement::kV);
  EXPECT_EQ(placement_of(Schedule::kZbAuto, 1), ChunkPlacement::kLooped);
  EXPECT_EQ(placement_of(Schedule::kInterleaved, 2), ChunkPlacement::kLooped);
  // The loops and the simulator check too.
  EXPECT_THROW(simulate(Schedule::kInterleaved, shape_of(4, 0, 2, 3)), InputError);
}

// ---- the schedules in the simulator ----------------------------------------------------------

TEST(Schedules, AfabAndOneFOneBHaveTheTextbookBubble) {
  for (Schedule s : {Schedule::kAfab, Schedule::kOneFOneB}) {
    for (int P = 1; P <= 8; ++P) {
      for (int M = 1; M <= 20; ++M) {
        const SimulationResult r = simulate(s, shape_of(P, 0, 1, M));
        EXPECT_NEAR(r.bubble_fraction, double(P - 1) / (M + P - 1), 1e-9)
            << schedule_name(s) << " P " << P << " M " << M;
        EXPECT_DOUBLE_EQ(r.makespan, 3.0 * (M + P - 1));  // F = 1, B = 2
        expect_each_op_once(r);
      }
    }
  }
}

TEST(Schedules, InterleavedHasTheTextbookBubbleAlsoWhenPDoesNotDivideM) {
  for (int P = 1; P <= 8; ++P) {
    for (int V = 1; V <= 4; ++V) {
      for (int M = P; M <= 3 * P + 1; ++M) {  // includes M = P + 1, 2P + 1, and P = 2
        const SimulationResult r = simulate(Schedule::kInterleaved, shape_of(P, 0, V, M));
        EXPECT_NEAR(r.bubble_fraction, double(P - 1) / (V * M + P - 1), 1e-9)
            << "P " << P << " V " << V << " M " << M;
        EXPECT_NEAR(r.bubble_fraction, ideal_bubble_fraction(r.shape, Schedule::kInterleaved),
                    1e-9);
        expect_each_op_once(r);
      }
    }
  }
}

TEST(Schedules, ActivationsInFlight) {
  for (int P = 1; P <= 8; ++P) {
    for (int M = 1; M <= 16; ++M) {
      const SimulationResult afab = simulate(Schedule::kAfab, shape_of(P, 0, 1, M));
      EXPECT_EQ(afab.peak_in_flight[0], M);  // everything is alive before the first backward
      const SimulationResult f1b1 = simulate(Schedule::kOneFOneB, shape_of(P, 0, 1, M));
      for (int rank = 0; rank < P; ++rank) {
        EXPECT_LE(f1b1.peak_in_flight[rank], P - rank) << "P " << P << " M " << M;
        EXPECT_EQ(f1b1.peak_in_flight[rank], std::min(P - rank, M));
      }
      EXPECT_EQ(f1b1.peak_in_flight_overall, std::min(P, M));
    }
  }
}

// The message buffers a rank needs at once are what the schedule has in flight, not one per
// (microbatch, chunk) held: AFAB holds M sets but receives each gradient right before its B. A
// sent gradient is received before the sender's next B under 1F1B, whose F comes between; AFAB's
// next B starts as the send is posted, and the tie counts the send busy.
TEST(Schedules, MessageBuffersInFlight) {
  for (Schedule s : {Schedule::kAfab, Schedule::kOneFOneB}) {
    for (int P = 2; P <= 6; ++P) {
      for (int M : {P, 2 * P + 1}) {
        const SimulationResult r = simulate(s, shape_of(P, 0, 1, M));
        for (int rank = 0; rank < P; ++rank) {
          const std::string what = std::string(schedule_name(s)) + " P " + std::to_string(P) +
                                   " M " + std::to_string(M) + " rank " + std::to_string(rank);
          EXPECT_EQ(r.peak_grad_receives[rank], rank < P - 1 ? 1 : 0) << what;
          EXPECT_EQ(r.peak_grad_sends[rank], rank == 0 ? 0 : s == Schedule::kAfab ? 2 : 1) << what;
          EXPECT_LE(r.peak_messages[rank], 2) << what;
        }
      }
    }
  }
}

// What PipelineP2P's blocking verbs do with large messages: a send waits for its receiver. AFAB
// and 1F1B are unaffected; the interleaved schedule's ring of chunks then deadlocks, which is
// why its runtime must leave sends in flight (stage_ops.hpp).
TEST(Schedules, RendezvousSends) {
  for (Schedule s : {Schedule::kAfab, Schedule::kOneFOneB}) {
    for (int P = 1; P <= 6; ++P) {
      for (int M = 1; M <= 12; ++M) {
        const SimulationResult r = simulate(s, shape_of(P, 0, 1, M), {}, SendMode::kRendezvous);
        EXPECT_NEAR(r.bubble_fraction, double(P - 1) / (M + P - 1), 1e-9);
        expect_each_op_once(r);
      }
    }
  }
  try {
    simulate(Schedule::kInterleaved, shape_of(4, 0, 2, 8), {}, SendMode::kRendezvous);
    FAIL() << "no deadlock";
  } catch (const SimulationError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 3 waits for rank 0 to receive the activation of "
                                         "(mb 0, chunk 1)"),
              std::string::npos)
        << e.what();
  }
}

// Random layouts and costs: no deadlock, every op once, and the step's length within bounds:
// at least one rank's work, at most every op and message one after another.
TEST(Schedules, RandomLayoutsAndCostsNeverDeadlock) {
  std::mt19937 rng(20240520);
  auto pick = [&](std::vector<double> v) { return v[rng() % v.size()]; };
  for (int trial = 0; trial < 300; ++trial) {
    const Schedule s = static_cast<Schedule>(rng() % 3);
    const int P = 1 + rng() % 8;
    const int V = s == Schedule::kInterleaved ? 1 + rng() % 4 : 1;
    const int M = s == Schedule::kInterleaved ? P + rng() % (17 - P) : 1 + rng() % 16;
    OpCosts c;
    c.forward = pick({0.5, 1, 1.5, 2});
    c.backward_input = pick({0.5, 1, 2, 3});
    c.backward_weight = pick({0, 0.5, 1});
    c.p2p = pick({0, 0.25, 1});
    const PipelineShape shape = shape_of(P, 0, V, M);
    SimulationResult r;
    ASSERT_NO_THROW(r = simulate(s, shape, c, SendMode::kBuffered, std::chrono::seconds(20)))
        << schedule_name(s) << " P " << P << " V " << V << " M " << M;
    expect_each_op_once(r);
    const double work = M * V * (c.forward + c.backward_input + c.backward_weight);
    EXPECT_GE(r.makespan, work - 1e-9);
    EXPECT_LE(r.makespan, P * work + 2.0 * P * M * V * c.p2p + 1e-9);
    if (c.p2p == 0 && c.backward_weight == 0 && c.backward_input == 2 * c.forward) {
      const double V_eff = s == Schedule::kInterleaved ? V : 1;
      EXPECT_NEAR(r.bubble_fraction, (P - 1) / (V_eff * M + P - 1), 1e-9);
    }
  }
}

// ---- the simulator's own checks --------------------------------------------------------------

TEST(Simulator, NamesTheRanksOfADeadlock) {
  auto broken = [](StageOps& ops, const PipelineShape& shape) {
    if (shape.rank == 0) ops.recv_backward(0, 0);  // before anything was forwarded
    if (shape.rank == 1) ops.recv_forward(1, 0);   // rank 0 never sends microbatch 1
  };
  try {
    simulate(broken, shape_of(2, 0, 1, 2));
    FAIL() << "no deadlock reported";
  } catch (const SimulationError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("deadlock"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 0 waits for the gradient of (mb 0, chunk 0) from rank 1"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("rank 1 waits for the activation of (mb 1, chunk 0) from rank 0"),
              std::string::npos)
        << m;
  }
}

TEST(Simulator, ReportsProtocolErrors) {
  auto backward_first = [](StageOps& ops, const PipelineShape&) { ops.backward_input(0, 0); };
  EXPECT_THROW(simulate(backward_first, shape_of(1, 0, 1, 1)), SimulationError);
  auto forget_one = [](StageOps& ops, const PipelineShape&) {
    ops.forward(0, 0);
    ops.backward_input(0, 0);
    ops.backward_weight(0, 0);
  };
  try {
    simulate(forget_one, shape_of(1, 0, 1, 2));
    FAIL() << "no error";
  } catch (const SimulationError& e) {
    EXPECT_NE(std::string(e.what()).find("without the backward of (mb 1, chunk 0)"),
              std::string::npos)
        << e.what();
  }
}

TEST(Simulator, WallClockTimeoutStopsALoopThatNeverEnds) {
  auto spin = [](StageOps& ops, const PipelineShape& shape) {
    if (shape.rank == 0) {
      for (;;) ops.recv_forward(0, 0);  // a no-op on the first stage, forever
    }
    ops.recv_forward(0, 0);  // rank 1 waits for rank 0, which is busy: no deadlock
  };
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(
      simulate(spin, shape_of(2, 0, 1, 1), {}, SendMode::kBuffered, std::chrono::milliseconds(300)),
      SimulationError);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(Simulator, TimelinesAndTrace) {
  const SimulationResult r = simulate(Schedule::kAfab, shape_of(2, 0, 1, 2));
  const Timelines t = render_timelines(r);
  EXPECT_TRUE(t.exact);
  EXPECT_EQ(t.cell, 1.0);
  ASSERT_EQ(t.ranks.size(), 2u);
  EXPECT_EQ(t.ranks[0], "F0 F1 .  .  .  B0 -- B1 --");
  EXPECT_EQ(t.ranks[1], ".  F0 F1 B0 -- B1 -- .  .");

  std::ostringstream trace;
  write_chrome_trace(r, trace);
  const std::string json = trace.str();
  size_t complete = 0;
  for (size_t at = json.find("\"ph\": \"X\""); at != std::string::npos;
       at = json.find("\"ph\": \"X\"", at + 1)) {
    ++complete;
  }
  EXPECT_EQ(complete, 8u);  // F and B of 2 microbatches on 2 ranks; W costs nothing here
  EXPECT_NE(json.find("\"name\": \"B1.c0\""), std::string::npos);
  EXPECT_NE(json.find("\"tid\": 1, \"ts\": 5, \"dur\": 2"), std::string::npos) << json;
}

}  // namespace mpf::pipeline
