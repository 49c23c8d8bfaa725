// Where the P·V chunks of the model (its virtual stages, in model order) run. A rank owns V of
// them, its local chunks 0 .. V − 1 in model order.
//   looped (Megatron's interleaved assignment; every schedule with V = 1): chunk c of rank r is
//          virtual stage c·P + r, so a microbatch visits ranks 0 .. P − 1 once per chunk and the
//          last rank feeds rank 0: with V > 1 the chunks form a ring over the ranks.
//   V      (zb-v, Qi et al. 2024 §6; V = 2): rank r holds virtual stages r and 2P − 1 − r. A
//          microbatch goes down the ranks and back up, so rank 0 holds both the embedding and the
//          head, ranks only ever talk to their neighbours, and rank P − 1 hands its chunk 0's
//          output to its own chunk 1.
#pragma once

namespace mpf::pipeline {

enum class ChunkPlacement { kLooped, kV };

struct ChunkSite {
  int rank, chunk;
};

// The virtual stage of (rank, chunk) on P = stages ranks.
inline int virtual_stage(ChunkPlacement p, int stages, int rank, int chunk) {
  if (p == ChunkPlacement::kV) return chunk == 0 ? rank : 2 * stages - 1 - rank;
  return chunk * stages + rank;
}

// The (rank, chunk) running virtual stage s.
inline ChunkSite chunk_site(ChunkPlacement p, int stages, int s) {
  if (p == ChunkPlacement::kV)
    return s < stages ? ChunkSite{s, 0} : ChunkSite{2 * stages - 1 - s, 1};
  return {s % stages, s / stages};
}

}  // namespace mpf::pipeline
