// Which transformer blocks each pipeline stage owns. With P stages and V virtual stages (model
// chunks) per rank there are P·V chunks, placed on the ranks as placement.hpp says: looped, chunk
// c of rank r is virtual stage c·P + r (Megatron's interleaved assignment), so rank r runs chunks
// r, P + r, 2P + r, ...; in a V (zb-v), rank r runs r and 2P − 1 − r. Only the first virtual
// stage holds the embeddings and only the last the final LayerNorm and the head.
#pragma once

#include <string>
#include <vector>

#include "model/activations.hpp"
#include "pipeline/placement.hpp"

namespace mpf {

struct LayerRange {
  int begin = 0, end = 0;  // blocks [begin, end)
  int size() const { return end - begin; }
};

// Picotron's distribute_layers: L blocks over n chunks as evenly as possible, the first L mod n
// chunks taking one block more. Throws InputError if a chunk would be empty (n > L).
std::vector<LayerRange> distribute_layers(int layers, int chunks);

// An explicit layout "3,3,2,..." of n chunk sizes. Throws InputError unless it has n positive
// integers summing to L (the message says which).
std::vector<LayerRange> parse_layer_layout(const std::string& layout, int layers, int chunks);

// One rank's part of the model under the chunk ranges of all P·V virtual stages.
struct StageOwnership {
  std::vector<int> layers;          // the global blocks it holds, ascending
  std::vector<ChunkPieces> chunks;  // its V chunks: local block ranges and edge pieces
  bool embedding = false, head = false;
};
StageOwnership stage_ownership(
    const std::vector<LayerRange>& ranges, int rank, int stages,
    pipeline::ChunkPlacement placement = pipeline::ChunkPlacement::kLooped);

// "stage 0: blocks 0-2 + embedding | stage 1: blocks 3-5 + head" (chunks joined by ","), for the
// banner; in a V, "stage 0: blocks 0-1,6-7 + embedding + head | ...".
std::string describe_layout(const std::vector<LayerRange>& ranges, int stages,
                            pipeline::ChunkPlacement placement = pipeline::ChunkPlacement::kLooped);

}  // namespace mpf
