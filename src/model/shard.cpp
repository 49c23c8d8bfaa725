#include "model/shard.hpp"

#include "core/error.hpp"

namespace mpf {

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

bool TpShard::holds(TensorId tensor) const {
  const TensorSpec& s = tensor_spec(tensor);
  if (s.per_layer()) return !layers.empty();
  return (s.in_embedding() && has_embedding) || (s.in_head() && has_head);
}

bool TpShard::is_tied_copy(TensorId tensor) const {
  return tensor_spec(tensor).tied() && !has_embedding;
}

PerTensor<int64_t> TpShard::sizes() const {
  PerTensor<int64_t> out;
  for (const TensorSpec& s : kTensors) {
    int64_t& n = out[s.id];
    if (!holds(s.id)) continue;
    const int64_t cols = dim_size(s.cols, cfg);
    if (s.split == TpSplit::kVocab) {
      n = int64_t(vocab_shard) * cols;
    } else {
      n = dim_size(s.rows, cfg) * cols;
      if (s.split != TpSplit::kNone) n /= size;
    }
    if (s.per_layer()) n *= local_layers();
  }
  return out;
}

bool TpShard::is_split(TensorId tensor) const {
  return tensor_spec(tensor).split != TpSplit::kNone;
}

int64_t TpShard::global_index(TensorId tensor, int64_t j) const {
  const TensorSpec& s = tensor_spec(tensor);
  const int64_t row = dim_size(s.cols, cfg);  // elements per row of the serial tensor
  if (s.split == TpSplit::kVocab) {
    const int64_t r = vocab_begin + j / row;
    return r < cfg.vocab ? r * row + j % row : -1;
  }
  // Split the index into (local layer, element within the layer), map the local layer to the
  // global one; a tensor that is not per layer is one layer.
  const int64_t global_layer = dim_size(s.rows, cfg) * row;
  const int64_t local_layer = s.split == TpSplit::kNone ? global_layer : global_layer / size;
  const int64_t l = s.per_layer() ? layers[j / local_layer] : 0, k = j % local_layer;
  int64_t g = k;
  switch (s.split) {
    case TpSplit::kColumn: {  // each of the row blocks keeps its rows [r·n/T, (r+1)·n/T)
      const int64_t block_rows = dim_size(s.rows, cfg) / s.parts, local_rows = block_rows / size;
      const int64_t local_row = k / row, part = local_row / local_rows, i = local_row % local_rows;
      g = (part * block_rows + rank * local_rows + i) * row + k % row;
      break;
    }
    case TpSplit::kRow: {  // every row keeps columns [r·row/T, (r+1)·row/T)
      const int64_t cols = row / size;
      g = (k / cols) * row + int64_t(rank) * cols + k % cols;
      break;
    }
    default:
      break;
  }
  return l * global_layer + g;
}

std::vector<ShardRun> shard_runs(const TpShard& shard, TensorId tensor) {
  // Walk the local tensor in granules, the longest stretches the split never cuts: a row of wte,
  // a row's column slice, a block of column-split rows, a layer's slice of the other per-layer
  // tensors, the whole of a tensor that is not per layer.
  const TensorSpec& s = tensor_spec(tensor);
  const int64_t n = shard.sizes()[tensor], row = dim_size(s.cols, shard.cfg);
  int64_t granule = n;
  if (s.split == TpSplit::kVocab) {
    granule = row;
  } else if (n > 0) {
    if (s.per_layer()) granule /= shard.local_layers();  // one layer's slice
    if (s.split == TpSplit::kColumn) granule /= s.parts;
    if (s.split == TpSplit::kRow) granule = row / shard.size;
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
