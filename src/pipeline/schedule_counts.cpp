// The pure functions behind the schedule loops: names, shape checks, warmup counts and the
// interleaved schedule's (microbatch, chunk) of each micro-step.
#include <algorithm>
#include <climits>
#include <string>

#include "core/error.hpp"
#include "pipeline/schedule.hpp"

namespace mpf::pipeline {

Schedule parse_schedule(const std::string& name) {
  if (name == "afab") return Schedule::kAfab;
  if (name == "1f1b") return Schedule::kOneFOneB;
  if (name == "interleaved") return Schedule::kInterleaved;
  throw InputError("unknown --schedule '" + name + "': choose afab, 1f1b or interleaved");
}

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::kAfab:
      return "afab";
    case Schedule::kOneFOneB:
      return "1f1b";
    case Schedule::kInterleaved:
      return "interleaved";
  }
  return "?";
}

void validate(const PipelineShape& shape, Schedule s) {
  const int P = shape.stages, V = shape.virtual_stages, M = shape.microbatches;
  require(P >= 1, "--pp must be >= 1, got " + std::to_string(P));
  require(shape.rank >= 0 && shape.rank < P, "pipeline rank " + std::to_string(shape.rank) +
                                                 " is outside [0, " + std::to_string(P) + ")");
  require(V >= 1, "--virtual-stages must be >= 1, got " + std::to_string(V));
  require(M >= 1, "--microbatches must be >= 1, got " + std::to_string(M));
  require(M <= INT_MAX / V, "--microbatches x --virtual-stages is too large");
  require(s == Schedule::kInterleaved || V == 1,
          std::string("--virtual-stages ") + std::to_string(V) + " needs --schedule interleaved (" +
              schedule_name(s) + " runs one chunk per rank)");
  require(s != Schedule::kInterleaved || M >= P,
          "--schedule interleaved needs --microbatches >= --pp (got " + std::to_string(M) + " < " +
              std::to_string(P) + "): raise --microbatches or use --schedule 1f1b");
}

double ideal_bubble_fraction(const PipelineShape& shape, Schedule s) {
  const double P = shape.stages, M = shape.microbatches;
  const double V = s == Schedule::kInterleaved ? shape.virtual_stages : 1;
  return (P - 1) / (V * M + P - 1);
}

int one_f_one_b_warmup(const PipelineShape& shape) {
  return std::min(shape.stages - shape.rank - 1, shape.microbatches);
}

int interleaved_group_size(const PipelineShape& shape) {
  return shape.stages + shape.microbatches % shape.stages;
}

namespace {

// Micro-step k -> (group's first microbatch, group size, position among the group's size·V steps).
// Groups 0 .. q − 2 hold P microbatches, the last one P + r (M = q·P + r).
struct GroupStep {
  int first_mb, size, pos;
};

GroupStep group_step(const PipelineShape& shape, int k) {
  const int P = shape.stages, V = shape.virtual_stages;
  const int full_groups = shape.microbatches / P - 1;  // groups of exactly P before the last
  const int last_start = full_groups * P * V;          // micro-step where the last group starts
  if (k < last_start) return {k / (P * V) * P, P, k % (P * V)};
  return {full_groups * P, interleaved_group_size(shape), k - last_start};
}

}  // namespace

int interleaved_microbatch(const PipelineShape& shape, int k) {
  const GroupStep g = group_step(shape, k);
  return g.first_mb + g.pos % g.size;
}

// Megatron: (k mod P·V) div P, with the group's size in place of P.
int interleaved_forward_chunk(const PipelineShape& shape, int k) {
  const GroupStep g = group_step(shape, k);
  return g.pos / g.size;
}

int interleaved_backward_chunk(const PipelineShape& shape, int k) {
  return shape.virtual_stages - 1 - interleaved_forward_chunk(shape, k);
}

int interleaved_warmup(const PipelineShape& shape) {
  const long long P = shape.stages, V = shape.virtual_stages;
  const long long warmup = 2 * (P - shape.rank - 1) + (V - 1) * interleaved_group_size(shape);
  return static_cast<int>(std::min(warmup, shape.microbatches * V));
}

}  // namespace mpf::pipeline
