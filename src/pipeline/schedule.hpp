// Pipeline schedules: one loop per file, each talking to StageOps only (stage_ops.hpp), and the
// pure counts they are built from, unit-tested without MPI.
//
//   afab.cpp          all forwards, then all backwards (GPipe; Picotron's train_step_pipeline_afab)
//   one_f_one_b.cpp   warmup / steady 1F1B / cooldown (PipeDream-Flush; Picotron's 1f1b)
//   interleaved.cpp   1F1B over V chunks per rank (Megatron's virtual pipeline, Narayanan et al.
//                     2021), M not necessarily a multiple of P
//
// Ideal bubble with equal stages and free P2P: (P − 1)/(M + P − 1) for AFAB and 1F1B, and
// (P − 1)/(V·M + P − 1) interleaved. Backward is backward_input then backward_weight everywhere
// for now (W inside B); the zero-bubble schedules will defer W.
#pragma once

#include <string>

#include "pipeline/stage_ops.hpp"

namespace mpf::pipeline {

enum class Schedule { kAfab, kOneFOneB, kInterleaved };

// "afab" | "1f1b" | "interleaved"; anything else is an InputError naming the choices.
Schedule parse_schedule(const std::string& name);
const char* schedule_name(Schedule s);

// One rank's view of the pipeline.
struct PipelineShape {
  int stages = 1;          // P: pipeline ranks
  int rank = 0;            // this rank's stage, 0 <= rank < P
  int virtual_stages = 1;  // V: model chunks per rank (> 1 only for the interleaved schedule)
  int microbatches = 1;    // M: microbatches per step
};

// InputError for a shape the schedule cannot run: P < 1, rank outside [0, P), V < 1, M < 1,
// V > 1 outside the interleaved schedule, M < P for the interleaved one (its first chunk-0 group
// must fill the pipeline), M·V overflowing an int.
void validate(const PipelineShape& shape, Schedule s);

// (P − 1)/(V·M + P − 1), V = 1 for AFAB and 1F1B: idle rank-time / (P × makespan) when every
// stage costs the same and P2P is free.
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
// M not a multiple of P (seed 001, "arrangement 2"): with M = q·P + r, groups 0 .. q − 2 hold P
// microbatches and the LAST group holds P + r, i.e. the r extra microbatches run right behind the
// last full round inside each chunk, instead of as a separate short group of r at the end (the
// paper's arrangement: a group of r < P cannot fill the pipeline, so at each of its chunk
// switches the rank waits for its own microbatches to come back round, and the bubble grows). With
// a group of P + r >= P every chunk switch still finds its input ready, and the bubble stays (P −
// 1)/(V·M + P − 1), the uniform case's.
int interleaved_group_size(const PipelineShape& shape);  // of the last group: P + (M mod P)
int interleaved_microbatch(const PipelineShape& shape, int k);
int interleaved_forward_chunk(const PipelineShape& shape, int k);
int interleaved_backward_chunk(const PipelineShape& shape, int k);  // V − 1 − forward chunk

// Forwards before the first backward: min(2(P − rank − 1) + (V − 1)·G, M·V), G the last group's
// size. For M a multiple of P, G = P and this is Megatron's and seed 001's formula. The first
// backward on the last rank is (mb, chunk V − 1) of a microbatch whose V − 1 earlier chunks were
// forwarded G steps apart, hence (V − 1)·G; 2(P − rank − 1) covers the forward's trip down to the
// last rank and the gradient's trip back. In the steady state, forward step k is paired with
// backward step k − warmup, so the warmup must cover the widest group: with G = P the last
// group's backward of chunk V − 1 would come before its own forward. The price of the remainder
// is (V − 1)·r more activations in flight, never a longer step.
int interleaved_warmup(const PipelineShape& shape);

// ---- the schedules: each validates the shape, then runs its loop on `ops` ----
void run_afab(StageOps& ops, const PipelineShape& shape);
void run_one_f_one_b(StageOps& ops, const PipelineShape& shape);
void run_interleaved(StageOps& ops, const PipelineShape& shape);

inline void run_schedule(Schedule s, StageOps& ops, const PipelineShape& shape) {
  switch (s) {
    case Schedule::kAfab:
      return run_afab(ops, shape);
    case Schedule::kOneFOneB:
      return run_one_f_one_b(ops, shape);
    case Schedule::kInterleaved:
      return run_interleaved(ops, shape);
  }
}

}  // namespace mpf::pipeline
