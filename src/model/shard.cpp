#include "model/shard.hpp"

#include <algorithm>

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
  const int KVH = cfg.kv_head_count();
  require(KVH % size == 0 || size % KVH == 0,
          "the model's " + std::to_string(KVH) + " kv heads neither split" + layout +
              " nor are shared by whole groups of its ranks; choose a --tp that divides the kv "
              "heads or that they divide");
  require(cfg.ffn_width() % size == 0, "the MLP width " + std::to_string(cfg.ffn_width()) +
                                           " does not split" + layout +
                                           "; choose a --tp that divides --ffn-dim");
  s.heads = cfg.heads / size;
  s.head_size = cfg.head_size();
  s.kv_replicas = KVH < size ? size / KVH : 1;
  s.kv_heads = KVH < size ? 1 : KVH / size;
  s.kv_begin = KVH < size ? rank / s.kv_replicas : rank * s.kv_heads;
  s.attn = s.heads * s.head_size;
  s.kv = s.kv_heads * s.head_size;
  s.qkv = s.attn + 2 * s.kv;
  require(cfg.shared_ffn % size == 0, "the shared expert's width " +
                                          std::to_string(cfg.shared_ffn) + " does not split" +
                                          layout + "; choose a --tp that divides it");
  require(cfg.dense_ffn % size == 0, "the dense blocks' MLP width " +
                                         std::to_string(cfg.dense_ffn) + " does not split" +
                                         layout + "; choose a --tp that divides it");
  s.fc = cfg.ffn_width() / size;
  s.shared_fc = cfg.shared_ffn / size;
  s.mlp_in = cfg.swiglu() ? 2 * s.fc : s.fc;
  // Megatron pads the vocabulary to a multiple of 128·T so every shard tiles alike; the padded
  // rows are zero and outside the softmax, so the maths does not depend on the padding.
  s.vocab_padded = size == 1 ? cfg.padded_vocab : pad_vocab(cfg.padded_vocab, 128 * size);
  s.vocab_shard = s.vocab_padded / size;
  s.vocab_begin = rank * s.vocab_shard;
  s.experts = cfg.experts;
  for (int l = 0; l < cfg.blocks(); ++l) s.layers.push_back(l);
  if (cfg.mixed()) s.dense_blocks = std::make_shared<const TpShard>(s.block_shard(0));
  return s;
}

TpShard split_experts(TpShard shard, int rank, int size) {
  if (size == 1) return shard;
  const int E = shard.cfg.experts;
  require(E > 0, "--ep " + std::to_string(size) +
                     " splits a mixture of experts' experts, and this model has none; use --dp "
                     "for data parallelism, or a family with experts (--arch mixtral, qwen3_moe, "
                     "olmoe)");
  require(E % size == 0, "the model's " + std::to_string(E) + " experts do not split over --ep " +
                             std::to_string(size) + "; choose an --ep that divides them");
  shard.ep_rank = rank;
  shard.ep_size = size;
  shard.experts = E / size;
  shard.expert_begin = rank * shard.experts;
  return shard;
}

TpShard restrict_to_stage(TpShard shard, std::vector<int> layers, bool embedding, bool head) {
  // The multi-token prediction modules live with the head (model/mtp.hpp), after its blocks.
  if (head) {
    for (int l = shard.cfg.layers; l < shard.cfg.blocks(); ++l) {
      if (layers.empty() || layers.back() < l) layers.push_back(l);
    }
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] < 0 || layers[i] >= shard.cfg.blocks() || (i > 0 && layers[i] <= layers[i - 1]))
      MPF_FATAL("a stage's layers must be distinct, ascending and inside the model");
  }
  shard.layers = std::move(layers);
  shard.has_embedding = embedding;
  shard.has_head = head;
  return shard;
}

TpShard TpShard::block_shard(int layer) const {
  if (!cfg.dense_block(layer)) return *this;
  TpShard b = *this;
  b.dense_blocks = nullptr;
  b.cfg = cfg.block_config(layer);
  b.fc = b.cfg.ffn_width() / size;
  b.mlp_in = 2 * b.fc;
  b.shared_fc = 0;
  b.experts = b.expert_begin = 0;
  return b;
}

int64_t TpShard::block_size(TensorId tensor, int layer) const {
  if (!present_in_block(tensor, cfg, layer)) return 0;
  return cfg.dense_block(layer) ? block_shard(layer).one_block_size(tensor)
                                : one_block_size(tensor);
}

bool TpShard::holds(TensorId tensor) const {
  if (!present(tensor, cfg)) return false;
  const TensorPlace p = place_of(tensor, cfg);
  if (p == TensorPlace::kBlocks) {
    for (int l : layers) {
      if (present_in_block(tensor, cfg, l)) return true;
    }
    return false;
  }
  const bool embedding = p == TensorPlace::kEmbedding || p == TensorPlace::kTied;
  const bool head = p == TensorPlace::kHead || p == TensorPlace::kTied;
  return (embedding && has_embedding) || (head && has_head);
}

bool TpShard::is_expert(TensorId tensor) const {
  return cfg.moe() &&
         (tensor == TensorId::fcw || tensor == TensorId::fcb || tensor == TensorId::fcprojw);
}

bool TpShard::is_tied(TensorId tensor) const {
  return place_of(tensor, cfg) == TensorPlace::kTied;
}

bool TpShard::is_tied_copy(TensorId tensor) const {
  return is_tied(tensor) && !has_embedding;
}

bool TpShard::is_kv_replica(TensorId tensor, int64_t j) const {
  const TensorSpec& s = tensor_spec(tensor);
  if (kv_owner() || s.blocks != RowBlocks::kQkv) return false;
  const int64_t row = dim_size(s.cols, cfg), per_layer = int64_t(qkv) * row;
  return (j % per_layer) / row >= attn;  // past the Q rows: K or V
}

RowBlockSplits row_block_splits(const TpShard& shard, const TensorSpec& spec) {
  RowBlockSplits out;
  const RowBlockSizes rows = row_block_sizes(spec, shard.cfg);
  for (int b = 0; b < rows.count; ++b) {
    RowBlockSplit& x = out.blocks[size_t(b)];
    x.rows = rows.rows[size_t(b)];
    if (spec.blocks == RowBlocks::kQkv && b > 0) {  // K or V: this rank's kv heads
      x.local = shard.kv;
      x.first = int64_t(shard.kv_begin) * shard.head_size;
    } else {
      x.local = x.rows / shard.size;
      x.first = shard.rank * x.local;
    }
  }
  out.count = rows.count;
  out.repeat = shard.is_expert(spec.id) ? shard.experts : rows.repeat;  // the experts held here
  return out;
}

int64_t RowBlockSplits::pattern_rows() const {
  int64_t n = 0;
  for (const RowBlockSplit& b : *this) n += b.rows;
  return n;
}

int64_t RowBlockSplits::pattern_local() const {
  int64_t n = 0;
  for (const RowBlockSplit& b : *this) n += b.local;
  return n;
}

int64_t TpShard::one_block_size(TensorId tensor) const {
  const TensorSpec& s = tensor_spec(tensor);
  const int64_t cols = dim_size(s.cols, cfg);
  if (s.split == TpSplit::kVocab) return int64_t(vocab_shard) * cols;
  if (s.split == TpSplit::kColumn) {
    const RowBlockSplits b = row_block_splits(*this, s);
    return b.pattern_local() * b.repeat * cols;
  }
  int64_t n = dim_size(s.rows, cfg) * cols;
  if (s.split != TpSplit::kNone) n /= size;
  if (is_expert(s.id)) n = n / cfg.experts * experts;
  return n;
}

PerTensor<int64_t> TpShard::sizes() const {
  PerTensor<int64_t> out;
  for (const TensorSpec& s : kTensors) {
    int64_t& n = out[s.id];
    if (!holds(s.id)) continue;
    if (!s.per_layer()) {
      n = one_block_size(s.id);
    } else if (cfg.mixed() || cfg.mtp > 0) {  // the blocks differ
      for (int l : layers) n += block_size(s.id, l);
    } else {
      n = one_block_size(s.id) * local_layers();
    }
  }
  return out;
}

bool TpShard::is_split(TensorId tensor) const {
  return tensor_spec(tensor).split != TpSplit::kNone;
}

int64_t TpShard::global_index(TensorId tensor, int64_t j) const {
  if (tensor_spec(tensor).needs == Needs::kMtp) {  // the modules' blocks, the last local ones
    const int64_t n = one_block_size(tensor);
    const int64_t first =
        std::lower_bound(layers.begin(), layers.end(), cfg.layers) - layers.begin();
    const int l = layers[size_t(first + j / n)];
    return layer_offset(tensor, cfg, l) + index_in_block(tensor, j % n);
  }
  if (!tensor_spec(tensor).per_layer() || !cfg.mixed()) return uniform_global_index(tensor, j);
  // The local blocks' slices one after the other: the dense blocks' (the first local ones), then
  // the experts' blocks'.
  TpShard made;
  const TpShard& dense = dense_blocks ? *dense_blocks : (made = block_shard(0));
  const int dense_here =
      int(std::lower_bound(layers.begin(), layers.end(), cfg.dense_layers) - layers.begin());
  const int64_t n_dense = present_in_block(tensor, cfg, 0) ? dense.one_block_size(tensor) : 0;
  const int64_t in_dense = dense_here * n_dense;
  if (j < in_dense) {
    const int l = layers[size_t(j / n_dense)];
    return layer_offset(tensor, cfg, l) + dense.index_in_block(tensor, j % n_dense);
  }
  const int64_t n = one_block_size(tensor);  // an experts' block's
  const int64_t i = dense_here + (j - in_dense) / n;
  if (i >= local_layers()) MPF_FATAL("a local element past the shard's blocks");
  const int l = layers[size_t(i)];
  return layer_offset(tensor, cfg, l) + index_in_block(tensor, (j - in_dense) % n);
}

int64_t TpShard::index_in_block(TensorId tensor, int64_t k) const {
  return uniform_global_index(tensor, k, /*within_block=*/true);
}

int64_t TpShard::uniform_global_index(TensorId tensor, int64_t j, bool within_block) const {
  const TensorSpec& s = tensor_spec(tensor);
  const int64_t row = dim_size(s.cols, cfg);  // elements per row of the serial tensor
  if (s.split == TpSplit::kVocab) {
    const int64_t r = vocab_begin + j / row;
    return r < cfg.vocab ? r * row + j % row : -1;
  }
  // Split the index into (local layer, element within the layer), map the local layer to the
  // global one; a tensor that is not per layer is one layer.
  const int64_t global_layer = dim_size(s.rows, cfg) * row;
  RowBlockSplits blocks;
  int64_t local_layer = s.split == TpSplit::kNone ? global_layer : global_layer / size;
  // The experts held here start at expert_begin's rows.
  const bool expert = is_expert(tensor);
  if (expert) local_layer = local_layer / cfg.experts * experts;
  const int64_t expert_rows = expert ? dim_size(s.rows, cfg) / cfg.experts * expert_begin : 0;
  if (s.split == TpSplit::kColumn) {
    blocks = row_block_splits(*this, s);
    local_layer = blocks.pattern_local() * blocks.repeat * row;
  }
  // within_block: j lies in one block, whose slice the index is counted from.
  const int64_t l = s.per_layer() && !within_block ? layers[j / local_layer] : 0,
                k = j % local_layer;
  int64_t g = k;
  switch (s.split) {
    case TpSplit::kColumn: {  // each row block keeps its local rows from its first
      int64_t local_row = k / row;
      // Which repeat of the pattern (an expert's [gate | up]), then which block within it.
      int64_t block_start =
          expert_rows + local_row / blocks.pattern_local() * blocks.pattern_rows();
      local_row %= blocks.pattern_local();
      for (const RowBlockSplit& b : blocks) {
        if (local_row < b.local) {
          g = (block_start + b.first + local_row) * row + k % row;
          break;
        }
        local_row -= b.local;
        block_start += b.rows;
      }
      break;
    }
    case TpSplit::kRow: {  // every row keeps columns [r·row/T, (r+1)·row/T)
      const int64_t cols = row / size;
      g = (expert_rows + k / cols) * row + int64_t(rank) * cols + k % cols;
      break;
    }
    default:
      break;
  }
  return l * global_layer + g;
}

namespace {
// The granule of `n` local elements of the tensor under `shard` (one block's slice of a per-layer
// tensor when per_block).
int64_t granule_of(const TpShard& shard, const TensorSpec& s, int64_t n, bool per_block) {
  const int64_t row = dim_size(s.cols, shard.cfg);
  int64_t granule = n;
  if (s.split == TpSplit::kVocab) {
    granule = row;
  } else if (n > 0) {
    if (s.per_layer() && !per_block) granule /= shard.local_layers();  // one layer's slice
    if (s.split == TpSplit::kColumn) {  // the smallest of the local row blocks
      int64_t least = granule;
      for (const RowBlockSplit& b : row_block_splits(shard, s))
        least = std::min(least, b.local * row);
      granule = least;
    }
    if (s.split == TpSplit::kRow) granule = row / shard.size;
  }
  return granule;
}
}  // namespace

std::vector<ShardRun> shard_runs(const TpShard& shard, TensorId tensor) {
  // Walk the local tensor in granules, the longest stretches the split never cuts: a row of wte,
  // a row's column slice, a block of column-split rows, a layer's slice of the other per-layer
  // tensors, the whole of a tensor that is not per layer. Blocks that differ (a mixed model's
  // dense and experts' blocks) are walked each with its own granule.
  const TensorSpec& s = tensor_spec(tensor);
  struct Stretch {
    int64_t begin, end, granule;
  };
  std::vector<Stretch> stretches;
  const int64_t n = shard.sizes()[tensor];
  if (s.per_layer() && (shard.cfg.mixed() || shard.cfg.mtp > 0)) {
    int64_t at = 0;
    for (int l : shard.layers) {
      const int64_t k = shard.block_size(tensor, l);
      if (k > 0) stretches.push_back({at, at + k, granule_of(shard.block_shard(l), s, k, true)});
      at += k;
    }
  } else {
    stretches.push_back({0, n, granule_of(shard, s, n, false)});
  }
  std::vector<ShardRun> runs;
  for (const Stretch& x : stretches) {
    const int64_t granule = x.granule;
    for (int64_t j = x.begin; j < x.end; j += granule) {
      const int64_t g = shard.global_index(tensor, j);
      if (g < 0) continue;  // a padded vocabulary row
      const bool replica = shard.is_kv_replica(tensor, j);
      ShardRun* last = runs.empty() ? nullptr : &runs.back();
      if (last && last->local + last->length == j && last->global + last->length == g &&
          last->replica == replica) {
        last->length += granule;
      } else {
        runs.push_back({j, g, granule, replica});
      }
    }
  }
  return runs;
}

}  // namespace mpf
