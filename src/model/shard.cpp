#include "model/shard.hpp"

#include "core/error.hpp"

namespace mpf {

namespace {
enum class Split { Replicated, Rows, QkvRows, Columns, VocabRows };
// The split of each tensor and the length of one of its rows (serial shape, per layer).
struct Layout {
  Split split;
  int64_t row;  // elements per row of the serial tensor
};

std::array<Layout, kNumParameterTensors> layouts(const GPTConfig& cfg) {
  const int64_t C = cfg.channels;
  return {{{Split::VocabRows, C},
           {Split::Replicated, C},
           {Split::Replicated, C},
           {Split::Replicated, C},
           {Split::QkvRows, C},
           {Split::QkvRows, 1},
           {Split::Columns, C},
           {Split::Replicated, C},
           {Split::Replicated, C},
           {Split::Replicated, C},
           {Split::Rows, C},
           {Split::Rows, 1},
           {Split::Columns, 4 * C},
           {Split::Replicated, C},
           {Split::Replicated, C},
           {Split::Replicated, C}}};
}

}  // namespace

TpShard make_tp_shard(const GPTConfig& cfg, int rank, int size) {
  const std::string layout = " over --tp " + std::to_string(size);
  require(cfg.heads % size == 0, "the model's " + std::to_string(cfg.heads) +
                                     " heads do not split" + layout +
                                     "; choose a --tp that divides the number of heads");
  TpShard s;
  s.rank = rank;
  s.size = size;
  s.cfg = cfg;
  s.heads = cfg.heads / size;
  s.attn = cfg.channels / size;
  s.fc = 4 * cfg.channels / size;
  // Megatron pads the vocabulary to a multiple of 128·T so every shard tiles alike; the padded
  // rows are zero and outside the softmax, so the maths does not depend on the padding.
  s.vocab_padded = size == 1 ? cfg.padded_vocab : pad_vocab(cfg.padded_vocab, 128 * size);
  s.vocab_shard = s.vocab_padded / size;
  s.vocab_begin = rank * s.vocab_shard;
  for (int l = 0; l < cfg.layers; ++l) s.layers.push_back(l);
  return s;
}

TpShard restrict_to_stage(TpShard shard, std::vector<int> layers, bool embedding, bool head) {
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] < 0 || layers[i] >= shard.cfg.layers || (i > 0 && layers[i] <= layers[i - 1]))
      MPF_FATAL("a stage's layers must be distinct, ascending and inside the model");
  }
  shard.layers = std::move(layers);
  shard.has_embedding = embedding;
  shard.has_head = head;
  return shard;
}

bool TpShard::holds(int tensor) const {
  if (tensor == 0) return has_embedding || has_head;        // wte: embedding and LM head
  if (tensor == 1) return has_embedding;                    // wpe
  if (tensor >= kNumParameterTensors - 2) return has_head;  // lnfw, lnfb
  return !layers.empty();
}

std::array<int64_t, kNumParameterTensors> TpShard::sizes() const {
  std::array<int64_t, kNumParameterTensors> out = parameter_sizes(cfg);
  const auto lay = layouts(cfg);
  for (int i = 0; i < kNumParameterTensors; ++i) {
    if (is_per_layer(i)) out[i] = out[i] / cfg.layers * local_layers();
    if (!holds(i)) {
      out[i] = 0;
    } else if (lay[i].split == Split::VocabRows) {
      out[i] = int64_t(vocab_shard) * cfg.channels;
    } else if (lay[i].split != Split::Replicated) {
      out[i] /= size;
    }
  }
  return out;
}

bool TpShard::is_split(int tensor) const {
  return layouts(cfg)[tensor].split != Split::Replicated;
}

int64_t TpShard::global_index(int tensor, int64_t j) const {
  const Layout lay = layouts(cfg)[tensor];
  const int64_t C = cfg.channels;
  if (lay.split == Split::VocabRows) {
    const int64_t row = vocab_begin + j / C;
    return row < cfg.vocab ? row * C + j % C : -1;
  }
  if (!is_per_layer(tensor)) return j;  // wpe, lnfw, lnfb: whole and replicated
  // Per-layer tensors: split the index into (local layer, element within the layer), then map
  // the local layer to the global one.
  const int64_t global_layer = parameter_sizes(cfg)[tensor] / cfg.layers;
  const int64_t local_layer = lay.split == Split::Replicated ? global_layer : global_layer / size;
  const int64_t l = layers[j / local_layer], k = j % local_layer;
  int64_t g = k;
  switch (lay.split) {
    case Split::Rows: {  // local row r of rows_per_rank
      const int64_t rows_per_rank = local_layer / lay.row;
      g = (rank * rows_per_rank + k / lay.row) * lay.row + k % lay.row;
      break;
    }
    case Split::QkvRows: {  // local rows [Q_r | K_r | V_r], each `attn` rows
      const int64_t local_row = k / lay.row, part = local_row / attn, i = local_row % attn;
      g = (part * C + int64_t(rank) * attn + i) * lay.row + k % lay.row;
      break;
    }
    case Split::Columns: {  // every row keeps columns [r·row/T, (r+1)·row/T)
      const int64_t cols = lay.row / size;
      g = (k / cols) * lay.row + int64_t(rank) * cols + k % cols;
      break;
    }
    default:
      break;
  }
  return l * global_layer + g;
}

std::vector<ShardRun> shard_runs(const TpShard& shard, int tensor) {
  // Walk the local tensor in granules, the longest stretches the split never cuts: a row of wte,
  // a row's column slice, a head block of QKV rows, a layer's slice of the other per-layer
  // tensors, the whole of a tensor that is not per layer.
  const Layout lay = layouts(shard.cfg)[tensor];
  const int64_t n = shard.sizes()[tensor];
  int64_t granule = n;
  if (lay.split == Split::VocabRows) {
    granule = shard.cfg.channels;
  } else if (is_per_layer(tensor) && n > 0) {
    granule = n / shard.local_layers();  // one layer's slice
    if (lay.split == Split::QkvRows) granule /= 3;
    if (lay.split == Split::Columns) granule = lay.row / shard.size;
  }
  std::vector<ShardRun> runs;
  for (int64_t j = 0; j < n; j += granule) {
    const int64_t g = shard.global_index(tensor, j);
    if (g < 0) continue;  // a padded vocabulary row
    ShardRun* last = runs.empty() ? nullptr : &runs.back();
    if (last && last->local + last->length == j && last->global + last->length == g) {
      last->length += granule;
    } else {
      runs.push_back({j, g, granule});
    }
  }
  return runs;
}

}  // namespace mpf
