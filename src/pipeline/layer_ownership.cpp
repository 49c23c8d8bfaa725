#include "pipeline/layer_ownership.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "core/error.hpp"

namespace mpf {

namespace {
std::vector<LayerRange> ranges_from_sizes(const std::vector<int>& sizes) {
  std::vector<LayerRange> out;
  int begin = 0;
  for (int n : sizes) {
    out.push_back({begin, begin + n});
    begin += n;
  }
  return out;
}
}  // namespace

std::vector<LayerRange> distribute_layers(int layers, int chunks) {
  require(chunks > 0, "the number of pipeline chunks must be positive");
  require(layers >= chunks, std::to_string(layers) + (layers == 1 ? " layer" : " layers") +
                                " cannot fill " + std::to_string(chunks) +
                                " pipeline chunks (--pp x --virtual-stages) with at least one "
                                "layer each; use fewer stages or virtual stages");
  std::vector<int> sizes(chunks, layers / chunks);
  for (int c = 0; c < layers % chunks; ++c) sizes[c] += 1;  // the first chunks take the remainder
  return ranges_from_sizes(sizes);
}

std::vector<LayerRange> parse_layer_layout(const std::string& layout, int layers, int chunks) {
  std::vector<int> sizes;
  size_t start = 0;
  while (start <= layout.size()) {
    const size_t comma = layout.find(',', start);
    const std::string item =
        layout.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(item.c_str(), &end, 10);
    require(!item.empty() && *end == '\0' && n > 0,
            "--pp-layout '" + layout + "': '" + item +
                "' is not a positive layer count; every stage needs at least one layer");
    require(errno != ERANGE && n <= layers, "--pp-layout '" + layout + "': '" + item +
                                                "' is more than the model's " +
                                                std::to_string(layers) + " layers");
    sizes.push_back(static_cast<int>(n));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  require(int(sizes.size()) == chunks,
          "--pp-layout '" + layout + "' has " + std::to_string(sizes.size()) + " entries for " +
              std::to_string(chunks) +
              " chunks (--pp x --virtual-stages); give one size per chunk");
  int64_t total = 0;  // each size is at most L, so no overflow
  for (int n : sizes) total += n;
  require(total == layers, "--pp-layout '" + layout + "' sums to " + std::to_string(total) +
                               " layers but the model has " + std::to_string(layers) +
                               "; make the sizes sum to " + std::to_string(layers));
  return ranges_from_sizes(sizes);
}

StageOwnership stage_ownership(const std::vector<LayerRange>& ranges, int rank, int stages,
                               pipeline::ChunkPlacement placement) {
  StageOwnership own;
  const int chunks = int(ranges.size()) / stages;
  for (int c = 0; c < chunks; ++c) {
    const int s = pipeline::virtual_stage(placement, stages, rank, c);
    const LayerRange r = ranges[s];
    ChunkPieces piece;
    piece.first_layer = int(own.layers.size());
    piece.layers = r.size();
    piece.embedding = s == 0;
    piece.head = s == int(ranges.size()) - 1;
    for (int l = r.begin; l < r.end; ++l) own.layers.push_back(l);
    own.chunks.push_back(piece);
    own.embedding |= piece.embedding;
    own.head |= piece.head;
  }
  return own;
}

std::string describe_layout(const std::vector<LayerRange>& ranges, int stages,
                            pipeline::ChunkPlacement placement) {
  std::string out;
  const int chunks = int(ranges.size()) / stages;
  for (int r = 0; r < stages; ++r) {
    out += (r ? " | stage " : "stage ") + std::to_string(r) + ": blocks ";
    for (int c = 0; c < chunks; ++c) {
      const int s = pipeline::virtual_stage(placement, stages, r, c);
      const LayerRange lr = ranges[s];
      out += (c ? "," : "") + std::to_string(lr.begin) +
             (lr.size() > 1 ? "-" + std::to_string(lr.end - 1) : "");
    }
    const StageOwnership own = stage_ownership(ranges, r, stages, placement);
    if (own.embedding) out += " + embedding";
    if (own.head) out += " + head";
  }
  return out;
}

}  // namespace mpf
