// Schedules as data: the loop schedules recorded as tables (complete, with their papers' peak
// activations, and placed by the P2P pass back into each loop's exact op sequence), the
// zero-bubble schedules against their formulas and memory bounds, zb-auto against the handcrafted
// schedules, and every table under rendezvous sends.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "pipeline/schedule_plan.hpp"
#include "pipeline/simulator.hpp"
#include "unit/schedule_checks.hpp"

namespace mpf::pipeline {

namespace {

PipelineShape shape_for(Schedule s, int P, int V, int M) {
  PipelineShape shape = shape_of(P, 0, V, M);
  shape.placement = placement_of(s, V);
  return shape;
}

OpCosts equal_costs() {
  OpCosts c;
  c.forward = c.backward_input = c.backward_weight = 1.0;
  return c;
}

// Rank r's op sequence as the loop runs it.
StageProgram loop_program(Schedule s, const PipelineShape& shape, int r) {
  OpRecorder rec;
  PipelineShape mine = shape;
  mine.rank = r;
  run_schedule(s, rec, mine);
  return rec.program;
}

std::string show(const StageProgram& p) {
  std::string out;
  for (const StageOp& op : p) out += describe(op) + " ";
  return out;
}

// The most (mb, chunk)s a rank's row holds, forwarded and not yet through their W.
int peak_in_flight(const std::vector<ComputeNode>& row) {
  int held = 0, peak = 0;
  for (const ComputeNode& n : row) {
    if (n.kind == NodeKind::kF) peak = std::max(peak, ++held);
    if (n.kind == NodeKind::kW || n.kind == NodeKind::kBW) --held;
  }
  return peak;
}

}  // namespace

// ---- the loops recorded as tables ------------------------------------------------------------

// Each loop, recorded: every (mb, chunk)'s F, B and W once and in order, every input arriving
// (check_table), and on each rank the activations its paper keeps: AFAB all M (GPipe); 1F1B
// min(P − rank, M) (PipeDream-Flush); interleaved its warmup plus the steady state's one,
// min(2(P − rank − 1) + (V − 1)·G + 1, M·V) with G = P + (M mod P) (Megatron-LM's warmup).
TEST(ScheduleTables, TheLoopsRecordedAreCompleteAndKeepThePapersActivations) {
  for (int P = 1; P <= 6; ++P) {
    for (int M = 1; M <= 3 * P + 2; ++M) {
      for (Schedule s : {Schedule::kAfab, Schedule::kOneFOneB}) {
        const PipelineShape shape = shape_for(s, P, 1, M);
        const ScheduleTable t = loop_table(s, shape);
        ASSERT_EQ(check_table(t, shape), "") << schedule_name(s) << " P " << P << " M " << M;
        for (int r = 0; r < P; ++r) {
          EXPECT_EQ(peak_in_flight(t[r]), s == Schedule::kAfab ? M : std::min(P - r, M))
              << schedule_name(s) << " P " << P << " M " << M << " rank " << r;
        }
      }
      for (int V = 1; V <= 4 && M >= P; ++V) {
        const PipelineShape shape = shape_for(Schedule::kInterleaved, P, V, M);
        const ScheduleTable t = loop_table(Schedule::kInterleaved, shape);
        ASSERT_EQ(check_table(t, shape), "") << "interleaved P " << P << " V " << V << " M " << M;
        for (int r = 0; r < P; ++r) {
          EXPECT_EQ(peak_in_flight(t[r]),
                    std::min(2 * (P - r - 1) + (V - 1) * (P + M % P) + 1, M * V))
              << "interleaved P " << P << " V " << V << " M " << M << " rank " << r;
        }
      }
    }
  }
  EXPECT_THROW(loop_table(Schedule::kZbH1, shape_for(Schedule::kZbH1, 2, 1, 2)), InputError);
}

// The pass, given a loop's recorded compute order, places the verbs where the loop does: so a
// zero-bubble table talks as the loops do, and 1F1B's recording runs as 1F1B among zb-auto's
// candidates.
TEST(ScheduleTables, ThePassPlacesTheVerbsOfARecordedLoopAsTheLoopDoes) {
  int shapes = 0;
  for (int P = 1; P <= 6; ++P) {
    for (int M = 1; M <= 3 * P + 2; ++M) {
      for (Schedule s : {Schedule::kAfab, Schedule::kOneFOneB}) {
        const PipelineShape shape = shape_for(s, P, 1, M);
        const std::vector<StageProgram> programs = insert_p2p(schedule_table(s, shape), shape);
        for (int r = 0; r < P; ++r) {
          const StageProgram loop = loop_program(s, shape, r);
          ASSERT_EQ(programs[r], loop)
              << schedule_name(s) << " P " << P << " M " << M << " rank " << r
              << "\n pass: " << show(programs[r]) << "\n loop: " << show(loop);
        }
        ++shapes;
      }
      for (int V = 1; V <= 4 && M >= P; ++V) {  // M not a multiple of P included
        const PipelineShape shape = shape_for(Schedule::kInterleaved, P, V, M);
        const std::vector<StageProgram> programs =
            insert_p2p(loop_table(Schedule::kInterleaved, shape), shape);
        for (int r = 0; r < P; ++r) {
          const StageProgram loop = loop_program(Schedule::kInterleaved, shape, r);
          ASSERT_EQ(programs[r], loop)
              << "interleaved P " << P << " V " << V << " M " << M << " rank " << r
              << "\n pass: " << show(programs[r]) << "\n loop: " << show(loop);
        }
        ++shapes;
      }
    }
  }
  EXPECT_GT(shapes, 300);
}

TEST(ScheduleTables, EveryTableIsComplete) {
  for (Schedule s : {Schedule::kAfab, Schedule::kOneFOneB, Schedule::kInterleaved, Schedule::kZbH1,
                     Schedule::kZbH2, Schedule::kZbV, Schedule::kZbAuto}) {
    for (int P = 1; P <= 6; ++P) {
      for (int M = 1; M <= 2 * P + 3; ++M) {
        const int V = s == Schedule::kInterleaved || s == Schedule::kZbV ? 2 : 1;
        if (s == Schedule::kInterleaved && M < P) continue;
        const PipelineShape shape = shape_for(s, P, V, M);
        EXPECT_EQ(check_table(schedule_table(s, shape), shape), "")
            << schedule_name(s) << " P " << P << " M " << M;
      }
    }
  }
}

TEST(ScheduleTables, CheckTableNamesWhatIsWrong) {
  const PipelineShape shape = shape_for(Schedule::kZbH1, 2, 1, 2);
  ScheduleTable t = zb_h1_table(shape);
  ScheduleTable twice = t;
  twice[0].push_back(twice[0].front());
  EXPECT_NE(check_table(twice, shape).find("runs twice"), std::string::npos);
  ScheduleTable early = t;
  std::swap(early[1][0], early[1][1]);  // rank 1's B0 before its F0
  EXPECT_NE(check_table(early, shape).find("before its predecessor"), std::string::npos);
  // Rank 0 runs F1 only after B0, which needs rank 1's B0, which rank 1 runs after its F1: a
  // cycle through the messages.
  ScheduleTable cycle(2);
  cycle[0] = {{NodeKind::kF, 0, 0},
              {NodeKind::kB, 0, 0},
              {NodeKind::kF, 1, 0},
              {NodeKind::kBW, 1, 0},
              {NodeKind::kW, 0, 0}};
  cycle[1] = {
      {NodeKind::kF, 0, 0}, {NodeKind::kF, 1, 0}, {NodeKind::kBW, 0, 0}, {NodeKind::kBW, 1, 0}};
  EXPECT_NE(check_table(cycle, shape).find("waits forever"), std::string::npos)
      << check_table(cycle, shape);
}

// ---- the zero-bubble schedules against their formulas ----------------------------------------

TEST(ZeroBubble, ZbH1HasTheFormulasBubbleAndOneFOneBsMemory) {
  for (int P = 1; P <= 8; ++P) {
    for (int M = P; M <= 3 * P + 1; ++M) {
      const PipelineShape shape = shape_for(Schedule::kZbH1, P, 1, M);
      const SimulationResult r = simulate(Schedule::kZbH1, shape, equal_costs());
      expect_each_op_once(r);
      // F = B = W = 1, free P2P: a step of 3M + P − 1, P − 1 idle on every rank.
      EXPECT_NEAR(r.bubble_fraction, double(P - 1) / (3 * M + P - 1), 1e-9)
          << "P " << P << " M " << M;
      EXPECT_NEAR(r.bubble_fraction, ideal_bubble_fraction(shape, Schedule::kZbH1), 1e-9);
      const SimulationResult f1b1 = simulate(Schedule::kOneFOneB, shape, equal_costs());
      EXPECT_EQ(r.peak_in_flight_overall, P);  // rank 0's, as 1F1B
      EXPECT_EQ(r.peak_in_flight_overall, f1b1.peak_in_flight_overall);
      for (int rank = 0; rank < P; ++rank) {
        EXPECT_EQ(r.peak_before_b[rank], P - rank) << "P " << P << " M " << M;  // 1F1B's
        EXPECT_EQ(r.peak_before_b[rank], f1b1.peak_before_b[rank]);
      }
    }
  }
  // The example: P = 4, M = 8, 11.11% against 1F1B's 27.27% (each with B and W
  // costing one unit, 1F1B running them back to back).
  const PipelineShape shape = shape_for(Schedule::kZbH1, 4, 1, 8);
  EXPECT_NEAR(simulate(Schedule::kZbH1, shape, equal_costs()).bubble_fraction, 3.0 / 27, 1e-9);
  EXPECT_NEAR(simulate(Schedule::kOneFOneB, shape, equal_costs()).bubble_fraction, 9.0 / 33, 1e-9);
}

TEST(ZeroBubble, ZbH2AndZbVAreNoWorseThanZbH1WithinTheirMemory) {
  for (int P = 1; P <= 8; ++P) {
    for (int M = 1; M <= 3 * P + 1; ++M) {
      const SimulationResult h1 =
          simulate(Schedule::kZbH1, shape_for(Schedule::kZbH1, P, 1, M), equal_costs());
      const SimulationResult h2 =
          simulate(Schedule::kZbH2, shape_for(Schedule::kZbH2, P, 1, M), equal_costs());
      // zb-v's chunks are half stages: half the cost each, the same work per microbatch.
      OpCosts half = equal_costs();
      half.forward = half.backward_input = half.backward_weight = 0.5;
      const SimulationResult v = simulate(Schedule::kZbV, shape_for(Schedule::kZbV, P, 2, M), half);
      const SimulationResult f1b1 =
          simulate(Schedule::kOneFOneB, shape_for(Schedule::kOneFOneB, P, 1, M), equal_costs());
      expect_each_op_once(h2);
      expect_each_op_once(v);
      EXPECT_LE(h2.bubble_fraction, h1.bubble_fraction + 1e-9) << "zb-h2 P " << P << " M " << M;
      EXPECT_LE(v.bubble_fraction, h1.bubble_fraction + 1e-9) << "zb-v P " << P << " M " << M;
      EXPECT_LE(h2.peak_in_flight_overall, 2 * P - 1) << "zb-h2 P " << P << " M " << M;
      for (int rank = 0; rank < P; ++rank) {
        EXPECT_LE(h2.peak_before_b[rank], 2 * (P - rank) - 1);
      }
      // zb-v holds (mb, chunk)s of half a stage each: within 1F1B's activation bytes.
      EXPECT_LE(v.peak_in_flight_overall, 2 * f1b1.peak_in_flight_overall)
          << "zb-v P " << P << " M " << M;
    }
  }
  // ZB-H2's parallelogram: at F = B = W every rank computes without a break from its first
  // forward to its last W, so each is idle only before its first and after its last op.
  const SimulationResult h2 =
      simulate(Schedule::kZbH2, shape_for(Schedule::kZbH2, 4, 1, 12), equal_costs());
  for (const auto& events : h2.events) {
    for (size_t i = 1; i < events.size(); ++i) EXPECT_EQ(events[i].start, events[i - 1].end);
  }
}

TEST(ZeroBubble, ZbH1sBubbleIsPMinusOneTimesFPlusBMinusW) {
  // The paper's setting, W no longer than F or B: a step of M(F + B + W) + (P − 1)(F + B − W),
  // where 1F1B's is (M + P − 1)(F + B + W). W no longer delays the chain of Bs.
  for (int P = 2; P <= 6; ++P) {
    for (int M : {P, P + 1, 2 * P + 1}) {
      for (double F : {1.0, 2.0}) {
        for (double B : {1.0, 1.5}) {
          for (double W : {0.25, 0.5, 1.0}) {
            OpCosts c;
            c.forward = F;
            c.backward_input = B;
            c.backward_weight = W;
            const double h1 =
                simulate(Schedule::kZbH1, shape_for(Schedule::kZbH1, P, 1, M), c).makespan;
            const double f1b1 =
                simulate(Schedule::kOneFOneB, shape_for(Schedule::kOneFOneB, P, 1, M), c).makespan;
            EXPECT_NEAR(h1, M * (F + B + W) + (P - 1) * (F + B - W), 1e-9)
                << "P " << P << " M " << M << " F " << F << " B " << B << " W " << W;
            EXPECT_NEAR(f1b1, (M + P - 1) * (F + B + W), 1e-9);
          }
        }
      }
    }
  }
}

// ---- zb-auto ---------------------------------------------------------------------------------

TEST(ZeroBubble, ZbAutoIsNeverWorseThanTheHandcraftedSchedulesUnderItsLimit) {
  std::mt19937 rng(20240601);
  auto pick = [&](std::vector<double> v) { return v[rng() % v.size()]; };
  for (int trial = 0; trial < 60; ++trial) {
    const int P = 1 + rng() % 6, M = 1 + rng() % 12, V = rng() % 2 ? 2 : 1;
    const int limit = 1 + rng() % (2 * P);
    OpCosts c;
    for (int r = 0; r < P; ++r) {  // a measured profile: every stage its own
      c.forward_by_rank.push_back(pick({0.5, 1, 1.5}));
      c.backward_by_rank.push_back(pick({0.5, 1, 2}));
      c.weight_by_rank.push_back(pick({0.25, 0.5, 1}));
    }
    c.p2p = pick({0, 0.1, 0.5});
    const PipelineShape shape = shape_for(Schedule::kZbAuto, P, V, M);
    const SchedulePlan plan(Schedule::kZbAuto, shape, c, limit);
    const SimulationResult a = simulate(plan, c);
    expect_each_op_once(a);
    EXPECT_LE(a.peak_in_flight_overall, limit * V) << "P " << P << " V " << V << " M " << M;
    std::vector<Schedule> handcrafted = {Schedule::kZbV};
    if (V == 1) handcrafted = {Schedule::kOneFOneB, Schedule::kZbH1, Schedule::kZbH2};
    for (Schedule s : handcrafted) {
      const SimulationResult h = simulate(s, shape_for(s, P, V, M), c);
      if (h.peak_in_flight_overall > limit * V) continue;  // over the limit: not a candidate
      EXPECT_LE(a.makespan, h.makespan + 1e-9)
          << schedule_name(s) << " P " << P << " V " << V << " M " << M << " limit " << limit;
    }
  }
  EXPECT_THROW(SchedulePlan(Schedule::kZbAuto, shape_for(Schedule::kZbAuto, 4, 1, 8), {}, -1),
               InputError);
}

TEST(ZeroBubble, MemoryLimitsAreInputErrors) {
  // zb-h2 holds 2P − 1 = 7 microbatches on 4 stages: a limit of 4 refuses it, naming the need.
  const SchedulePlan h2(Schedule::kZbH2, shape_for(Schedule::kZbH2, 4, 1, 8));
  try {
    require_within_memory(h2, 4);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("holds 7 microbatches"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(require_within_memory(h2, 7));
  const SchedulePlan h1(Schedule::kZbH1, shape_for(Schedule::kZbH1, 4, 1, 8));
  EXPECT_THROW(require_within_memory(h1, 3), InputError);
  EXPECT_NO_THROW(require_within_memory(h1, 4));
}

// ---- rendezvous sends -------------------------------------------------------------------------

// 300 random shapes and costs per zero-bubble schedule, every send waiting for its receiver: no
// deadlock (the pass posts receives ahead where two neighbours would wait for each other), every
// op once, and the step no longer than all ops and messages one after another.
TEST(ZeroBubble, RandomShapesNeverDeadlockUnderRendezvousSends) {
  std::mt19937 rng(20240602);
  auto pick = [&](std::vector<double> v) { return v[rng() % v.size()]; };
  for (Schedule s : {Schedule::kZbH1, Schedule::kZbH2, Schedule::kZbV, Schedule::kZbAuto}) {
    for (int trial = 0; trial < 300; ++trial) {
      const int P = 1 + rng() % 8, M = 1 + rng() % 16;
      const int V = s == Schedule::kZbV || (s == Schedule::kZbAuto && rng() % 2) ? 2 : 1;
      OpCosts c;
      c.forward = pick({0.5, 1, 1.5, 2});
      c.backward_input = pick({0.5, 1, 2, 3});
      c.backward_weight = pick({0.25, 0.5, 1});
      c.p2p = pick({0, 0.25, 1});
      const PipelineShape shape = shape_for(s, P, V, M);
      const SchedulePlan plan(s, shape, c);
      SimulationResult r;
      ASSERT_NO_THROW(r = simulate(plan, c, SendMode::kRendezvous, std::chrono::seconds(20)))
          << schedule_name(s) << " P " << P << " V " << V << " M " << M;
      expect_each_op_once(r);
      const double work = M * V * (c.forward + c.backward_input + c.backward_weight);
      EXPECT_GE(r.makespan, work - 1e-9);
      EXPECT_LE(r.makespan, P * work + 2.0 * P * M * V * c.p2p + 1e-9);
      // Posting receives ahead adds no wait: with sends that never wait the step is the same.
      const SimulationResult buffered = simulate(plan, c);
      EXPECT_LE(buffered.makespan, r.makespan + 1e-9);
    }
  }
}

TEST(ZeroBubble, ThePassPostsAheadOnlyWhereNeighboursWouldBlock) {
  // 1F1B pairs every exchange itself (its recording's program is the loop's, above): nothing
  // ahead.
  // zb-h2's deferred Ws leave sends unpaired; some receives must be posted ahead.
  auto posts = [](const std::vector<StageProgram>& programs) {
    int n = 0;
    for (const StageProgram& p : programs) {
      for (const StageOp& op : p) {
        n += op.kind == OpKind::kPostRecvForward || op.kind == OpKind::kPostRecvBackward;
      }
    }
    return n;
  };
  const PipelineShape f = shape_for(Schedule::kOneFOneB, 4, 1, 8);
  EXPECT_EQ(posts(insert_p2p(loop_table(Schedule::kOneFOneB, f), f)), 0);
  const PipelineShape h2 = shape_for(Schedule::kZbH2, 4, 1, 8);
  const ScheduleTable t = zb_h2_table(h2);
  EXPECT_GT(posts(insert_p2p(t, h2)), 0);
  // Without them, sends that wait for their receivers deadlock zb-h2.
  std::vector<StageProgram> stripped = insert_p2p(t, h2);
  for (StageProgram& p : stripped) {
    p.erase(std::remove_if(p.begin(), p.end(),
                           [](const StageOp& op) {
                             return op.kind == OpKind::kPostRecvForward ||
                                    op.kind == OpKind::kPostRecvBackward;
                           }),
            p.end());
  }
  EXPECT_THROW(
      simulate([&](StageOps& ops, const PipelineShape& mine) { execute(stripped[mine.rank], ops); },
               h2, equal_costs(), SendMode::kRendezvous),
      SimulationError);
}

}  // namespace mpf::pipeline
