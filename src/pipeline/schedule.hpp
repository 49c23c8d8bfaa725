// Pipeline schedules, in two styles:
//
// Loops, one per file, each talking to StageOps only (stage_ops.hpp), built from pure counts
// unit-tested without MPI, each to be read beside its paper:
//   afab.cpp          all forwards, then all backwards (GPipe, Huang et al. 2019; Picotron's
//                     train_step_pipeline_afab)
//   one_f_one_b.cpp   warmup / steady 1F1B / cooldown (PipeDream-Flush, Narayanan et al.,
//                     "Memory-Efficient Pipeline-Parallel DNN Training", 2021; Picotron's 1f1b)
//   interleaved.cpp   1F1B over V chunks per rank (Megatron-LM's virtual pipeline, Narayanan et
//                     al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
//                     Megatron-LM", SC 2021), M not necessarily a multiple of P
// The loops are what runs, and their only copy: where one is needed as data (zb-auto's
// candidates), its table is recorded by running the loop against a recording StageOps
// (loop_table, schedule_table.hpp). The tests hold each loop, recorded and in the simulator, to
// its paper: every (mb, chunk) forwarded and backwarded once, after its input, with the formulas'
// peak activations and bubble.
//
// Tables: a function lists each rank's compute nodes, F, B, W or BW (schedule_table.hpp); a pass
// adds the P2P verbs and one executor runs the result (stage_program.hpp). The zero-bubble
// schedules (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024), which move the weight
// gradients W into the bubbles, exist only as tables:
//   zb_h1.cpp         1F1B's memory, bubble (P − 1)(F + B − W)
//   zb_h2.cpp         up to 2P − 1 microbatches in flight, bubble (P − 1)(F + B − 2W) without the
//                     optimizer's synchronisation
//   zb_v.cpp          two chunks per rank in a V (placement.hpp), 1F1B's activation memory
//   zb_auto.cpp       a search under measured F, B, W, P2P costs and a memory limit
//
// Ideal bubble with equal stages and free P2P: (P − 1)/(M + P − 1) for AFAB and 1F1B, and
// (P − 1)/(V·M + P − 1) interleaved (the loops run B and W back to back); zb-h1's is (P − 1)/(3M
// + P − 1) when F = B = W.
#pragma once

#include <string>
#include <vector>

#include "pipeline/placement.hpp"
#include "pipeline/stage_ops.hpp"

namespace mpf::pipeline {

enum class Schedule { kAfab, kOneFOneB, kInterleaved, kZbH1, kZbH2, kZbV, kZbAuto };

// "afab" | "1f1b" | "interleaved" | "zb-h1" | "zb-h2" | "zb-v" | "zb-auto"; anything else is an
// InputError naming the choices.
Schedule parse_schedule(const std::string& name);
const char* schedule_name(Schedule s);
// The zero-bubble schedules: tables only, with a deferred W.
bool is_zero_bubble(Schedule s);
// Where a schedule puts the chunks: in a V for zb-v and for zb-auto with V = 2, else looped.
ChunkPlacement placement_of(Schedule s, int virtual_stages);
// The chunks per rank a schedule runs unless told: 2 for zb-v, else 1.
int default_virtual_stages(Schedule s);

// One rank's view of the pipeline.
struct PipelineShape {
  int stages = 1;                                      // P: pipeline ranks
  int rank = 0;                                        // this rank's stage, 0 <= rank < P
  int virtual_stages = 1;                              // V: model chunks per rank
  int microbatches = 1;                                // M: microbatches per step
  ChunkPlacement placement = ChunkPlacement::kLooped;  // placement_of(schedule, V)
};

// What an op costs, in any time unit: the simulator's model, and what zb-auto plans with. The
// same on every stage unless a measured profile gives each rank its own F, B and W (stages
// differ: the first holds the embedding, the last the LM head).
struct OpCosts {
  double forward = 1.0;          // F
  double backward_input = 2.0;   // B (input gradient)
  double backward_weight = 0.0;  // W (weight gradient); 0: counted inside B
  double p2p = 0.0;              // per message between ranks, from send to arrival
  // Per rank (empty, or one entry per rank): override forward, backward_input, backward_weight.
  std::vector<double> forward_by_rank, backward_by_rank, weight_by_rank;
  double forward_on(int rank) const {
    return forward_by_rank.empty() ? forward : forward_by_rank[rank];
  }
  double backward_input_on(int rank) const {
    return backward_by_rank.empty() ? backward_input : backward_by_rank[rank];
  }
  double backward_weight_on(int rank) const {
    return weight_by_rank.empty() ? backward_weight : weight_by_rank[rank];
  }
};

// InputError for a shape the schedule cannot run: P < 1, rank outside [0, P), V < 1, M < 1,
// M·V overflowing an int, V > 1 outside interleaved, zb-v and zb-auto, zb-v with V ≠ 2, zb-auto
// with V > 2, M < P for the interleaved schedule (its first chunk-0 group must fill the
// pipeline), a placement other than placement_of(s, V).
void validate(const PipelineShape& shape, Schedule s);

// (P − 1)/(V·M + P − 1), V = 1 for AFAB and 1F1B: idle rank-time / (P × makespan) when every
// stage costs the same and P2P is free. zb-h1: (P − 1)/(3M + P − 1) at F = B = W, M >= P. Negative
// where there is no closed form (zb-h2, zb-v and zb-auto: see README).
double ideal_bubble_fraction(const PipelineShape& shape, Schedule s);

// ---- 1F1B ----
// Forwards before the first backward: min(P − rank − 1, M) (Picotron). The last stage starts its
// backwards at once; each earlier stage keeps one more microbatch in flight.
int one_f_one_b_warmup(const PipelineShape& shape);

// ---- interleaved ----
// Micro-step k = 0 .. M·V − 1 is the k-th forward (and the k-th backward) on every rank. Steps go
// in groups of microbatches: a group runs chunk 0 on its microbatches, then chunk 1, ... (Megatron:
// switch chunk every P steps, so a microbatch leaving the last rank finds rank 0 ready for its next
// chunk). Backwards use the same order with chunks reversed (V − 1 first).
//
// M not a multiple of P: with M = q·P + r, groups 0 .. q − 2 hold P microbatches and the LAST
// group holds P + r, i.e. the r extra microbatches run right behind the last full round inside
// each chunk, instead of as a separate short group of r at the end (the paper's arrangement: a
// group of r < P cannot fill the pipeline, so at each of its chunk switches the rank waits for its
// own microbatches to come back round, and the bubble grows). With a group of P + r >= P every
// chunk switch still finds its input ready, and the bubble stays (P − 1)/(V·M + P − 1), the
// uniform case's.
int interleaved_group_size(const PipelineShape& shape);  // of the last group: P + (M mod P)
int interleaved_microbatch(const PipelineShape& shape, int k);
int interleaved_forward_chunk(const PipelineShape& shape, int k);
int interleaved_backward_chunk(const PipelineShape& shape, int k);  // V − 1 − forward chunk

// Forwards before the first backward: min(2(P − rank − 1) + (V − 1)·G, M·V), G the last group's
// size. For M a multiple of P, G = P and this is Megatron-LM's formula. The first backward on the
// last rank is (mb, chunk V − 1) of a microbatch whose V − 1 earlier chunks were forwarded G steps
// apart, hence (V − 1)·G; 2(P − rank − 1) covers the forward's trip down to the last rank and the
// gradient's trip back. In the steady state, forward step k is paired with
// backward step k − warmup, so the warmup must cover the widest group: with G = P the last
// group's backward of chunk V − 1 would come before its own forward. The price of the remainder
// is (V − 1)·r more activations in flight, never a longer step.
int interleaved_warmup(const PipelineShape& shape);

// ---- the loops: each validates the shape, then runs on `ops` ----
void run_afab(StageOps& ops, const PipelineShape& shape);
void run_one_f_one_b(StageOps& ops, const PipelineShape& shape);
// The one-chunk loop both share (one_f_one_b.cpp): `warmup` forwards, then one forward and one
// backward M - warmup times, then the remaining backwards. AFAB is warmup = M.
void run_warmup_steady_cooldown(StageOps& ops, int M, int warmup);
void run_interleaved(StageOps& ops, const PipelineShape& shape);

// The loop of a loop schedule (afab, 1f1b, interleaved); an InputError for the others, which run
// through a SchedulePlan (schedule_plan.hpp).
void run_schedule(Schedule s, StageOps& ops, const PipelineShape& shape);

}  // namespace mpf::pipeline
