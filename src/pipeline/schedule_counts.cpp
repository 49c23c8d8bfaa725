// The pure functions behind the schedule loops: names, shape checks, warmup counts and the
// interleaved schedule's (microbatch, chunk) of each micro-step.
#include <algorithm>
#include <climits>
#include <string>

#include "core/error.hpp"
#include "pipeline/schedule.hpp"

namespace mpf::pipeline {

Schedule parse_schedule(const std::string& name) {
  for (Schedule s : {Schedule::kAfab, Schedule::kOneFOneB, Schedule::kInterleaved, Schedule::kZbH1,
                     Schedule::kZbH2, Schedule::kZbV, Schedule::kZbAuto}) {
    if (name == schedule_name(s)) return s;
  }
  throw InputError("unknown --schedule '" + name +
                   "': choose afab, 1f1b, interleaved, zb-h1, zb-h2, zb-v or zb-auto");
}

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::kAfab:
      return "afab";
    case Schedule::kOneFOneB:
      return "1f1b";
    case Schedule::kInterleaved:
      return "interleaved";
    case Schedule::kZbH1:
      return "zb-h1";
    case Schedule::kZbH2:
      return "zb-h2";
    case Schedule::kZbV:
      return "zb-v";
    case Schedule::kZbAuto:
      return "zb-auto";
  }
  return "?";
}

bool is_zero_bubble(Schedule s) {
  return s == Schedule::kZbH1 || s == Schedule::kZbH2 || s == Schedule::kZbV ||
         s == Schedule::kZbAuto;
}

ChunkPlacement placement_of(Schedule s, int virtual_stages) {
  const bool v = s == Schedule::kZbV || (s == Schedule::kZbAuto && virtual_stages == 2);
  return v ? ChunkPlacement::kV : ChunkPlacement::kLooped;
}

int default_virtual_stages(Schedule s) {
  return s == Schedule::kZbV ? 2 : 1;
}

void validate(const PipelineShape& shape, Schedule s) {
  const int P = shape.stages, V = shape.virtual_stages, M = shape.microbatches;
  const std::string name = schedule_name(s);
  require(P >= 1, "--pp must be >= 1, got " + std::to_string(P));
  require(shape.rank >= 0 && shape.rank < P, "pipeline rank " + std::to_string(shape.rank) +
                                                 " is outside [0, " + std::to_string(P) + ")");
  require(V >= 1, "--virtual-stages must be >= 1, got " + std::to_string(V));
  require(M >= 1, "--microbatches must be >= 1, got " + std::to_string(M));
  require(M <= INT_MAX / V, "--microbatches x --virtual-stages is too large");
  require(s != Schedule::kZbV || V == 2,
          "--schedule zb-v places two chunks per rank in a V; use --virtual-stages 2 (got " +
              std::to_string(V) + ")");
  require(s != Schedule::kZbAuto || V <= 2,
          "--schedule zb-auto searches one chunk per rank or two in a V; use --virtual-stages 1 "
          "or 2 (got " +
              std::to_string(V) + ")");
  require(s == Schedule::kInterleaved || s == Schedule::kZbV || s == Schedule::kZbAuto || V == 1,
          "--virtual-stages " + std::to_string(V) +
              " needs --schedule interleaved, zb-v or zb-auto (" + name +
              " runs one chunk per rank)");
  require(s != Schedule::kInterleaved || M >= P,
          "--schedule interleaved needs --microbatches >= --pp (got " + std::to_string(M) + " < " +
              std::to_string(P) + "): raise --microbatches or use --schedule 1f1b");
  require(shape.placement == placement_of(s, V), name + " with " + std::to_string(V) +
                                                     " chunk(s) per rank is given the wrong chunk "
                                                     "placement (a bug)");
}

double ideal_bubble_fraction(const PipelineShape& shape, Schedule s) {
  const double P = shape.stages, M = shape.microbatches;
  switch (s) {
    case Schedule::kAfab:
    case Schedule::kOneFOneB:
      return (P - 1) / (M + P - 1);
    case Schedule::kInterleaved:
      return (P - 1) / (shape.virtual_stages * M + P - 1);
    case Schedule::kZbH1:
      return M >= P ? (P - 1) / (3 * M + P - 1) : -1.0;
    default:
      return -1.0;
  }
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
