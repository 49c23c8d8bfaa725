#include "model/tensors.hpp"

#include <algorithm>
#include <cmath>

namespace mpf {

int64_t dim_size(Dim d, const GPTConfig& cfg, bool padded) {
  int64_t n = 1;
  switch (d.of) {
    case Dim::kOne:
      break;
    case Dim::kChannels:
      n = cfg.channels;
      break;
    case Dim::kPaddedVocab:
      n = padded ? cfg.padded_vocab : cfg.vocab;
      break;
    case Dim::kMaxSeqLen:
      n = cfg.max_seq_len;
      break;
    case Dim::kQkvRows:
      n = cfg.qkv_rows();
      break;
    case Dim::kMlpIn:
      n = int64_t(cfg.mlp_in_rows()) * cfg.expert_count();
      break;
    case Dim::kMlpOut:
      n = int64_t(cfg.channels) * cfg.expert_count();
      break;
    case Dim::kExperts:
      n = cfg.experts;
      break;
    case Dim::kSharedIn:
      n = 2 * int64_t(cfg.shared_ffn);
      break;
    case Dim::kSharedFfn:
      n = cfg.shared_ffn;
      break;
    case Dim::kFfn:
      n = cfg.ffn_width();
      break;
    case Dim::kQLora:
      n = cfg.q_lora_rank;
      break;
    case Dim::kQIn:
      n = cfg.q_lora_rank > 0 ? cfg.q_lora_rank : cfg.channels;
      break;
    case Dim::kMlaQ:
      n = int64_t(cfg.heads) * (cfg.qk_nope_dim + cfg.qk_rope_dim);
      break;
    case Dim::kKvA:
      n = cfg.kv_lora_rank + cfg.qk_rope_dim;
      break;
    case Dim::kKvLora:
      n = cfg.kv_lora_rank;
      break;
    case Dim::kMlaKv:
      n = int64_t(cfg.heads) * (cfg.qk_nope_dim + cfg.v_head_dim);
      break;
    case Dim::kAttn:
      n = cfg.attention_width();
      break;
    case Dim::kQNorm:  // replicated over TP either way: a rank reads its heads' slice
      n = cfg.qk_norm_kind() == QkNorm::kWhole ? cfg.attention_width() : cfg.head_size();
      break;
    case Dim::kKNorm:
      n = cfg.head_size() * (cfg.qk_norm_kind() == QkNorm::kWhole ? cfg.kv_head_count() : 1);
      break;
  }
  return d.times * n;
}

bool present(TensorId t, const GPTConfig& cfg) {
  const ModelFeatures f = cfg.features();
  switch (tensor_spec(t).needs) {
    case Needs::kAll:
      return true;
    case Needs::kLearnedPositions:
      return f.positions == PositionKind::kLearned;
    case Needs::kNormShift:
      return f.norm == NormKind::kLayerNorm;
    case Needs::kQkvBias:
      return f.qkv_bias;
    case Needs::kLinearBias:
      return f.linear_bias;
    case Needs::kUntied:
      return !cfg.tied;
    case Needs::kQkNorm:
      return cfg.qk_norm();
    case Needs::kMoe:
      return f.moe;
    case Needs::kSharedExpert:
      return f.shared_expert;
    case Needs::kSharedExpertGate:
      return f.shared_expert && f.shared_expert_gate;
    case Needs::kMoeChoiceBias:
      return f.moe && f.moe_choice_bias;
    case Needs::kQkvProjection:
      return !f.mla;
    case Needs::kMla:
      return f.mla;
    case Needs::kMlaQLora:
      return f.mla && cfg.q_lora_rank > 0;
    case Needs::kDenseBlocks:
      return cfg.mixed();
    case Needs::kMtp:
      return cfg.mtp > 0;
  }
  return false;
}

bool present_in_block(TensorId t, const GPTConfig& cfg, int layer) {
  // A multi-token prediction module's rows are its block's alone; its block is otherwise the
  // last block's kind (GPTConfig::block_config).
  if (tensor_spec(t).needs == Needs::kMtp) return cfg.mtp > 0 && cfg.mtp_block(layer);
  if (!cfg.mixed()) return present(t, cfg);
  const bool dense_mlp = tensor_spec(t).needs == Needs::kDenseBlocks;
  if (!cfg.dense_block(layer)) return !dense_mlp && present(t, cfg);
  if (dense_mlp) return true;
  // The dense MLP is dfcw, dfcprojw here; the experts' tensors are absent from the block's config.
  return t != TensorId::fcw && t != TensorId::fcb && t != TensorId::fcprojw &&
         t != TensorId::fcprojb && present(t, cfg.block_config(layer));
}

TensorPlace place_of(TensorId t, const GPTConfig& cfg) {
  const TensorPlace p = tensor_spec(t).place;
  return p == TensorPlace::kTied && !cfg.wte_with_head() ? TensorPlace::kEmbedding : p;
}

std::vector<int64_t> row_blocks(const TensorSpec& s, const GPTConfig& cfg) {
  const RowBlockSizes b = row_block_sizes(s, cfg);
  std::vector<int64_t> out;
  for (int r = 0; r < b.repeat; ++r) out.insert(out.end(), b.begin(), b.end());
  return out;
}

RowBlockSizes row_block_sizes(const TensorSpec& s, const GPTConfig& cfg) {
  const int64_t hs = cfg.head_size(), kv = cfg.kv_head_count() * hs, F = cfg.ffn_width();
  switch (s.blocks) {
    case RowBlocks::kQkv:
      return {{cfg.heads * hs, kv, kv}, 3};
    case RowBlocks::kMlpIn:
      if (cfg.swiglu()) return {{F, F, 0}, 2, cfg.expert_count()};
      return {{F, 0, 0}, 1, cfg.expert_count()};
    case RowBlocks::kSharedIn:
      return {{cfg.shared_ffn, cfg.shared_ffn, 0}, 2};
    case RowBlocks::kOne:
      break;
  }
  return {{dim_size(s.rows, cfg), 0, 0}, 1};
}

namespace {
// Block `layer`'s elements (a tensor's that is not per layer: all of them).
int64_t one_block(TensorId t, const GPTConfig& cfg, int layer, bool padded) {
  const TensorSpec& s = tensor_spec(t);
  if (!s.per_layer()) {
    if (!present(t, cfg)) return 0;
    return dim_size(s.rows, cfg, padded) * dim_size(s.cols, cfg, padded);
  }
  if (!present_in_block(t, cfg, layer)) return 0;
  const GPTConfig b = cfg.block_config(layer);
  return dim_size(s.rows, b, padded) * dim_size(s.cols, b, padded);
}
int64_t elements(TensorId t, const GPTConfig& cfg, bool padded) {
  if (!tensor_spec(t).per_layer()) return one_block(t, cfg, 0, padded);
  // The multi-token prediction modules' blocks (after the trunk's, all alike) hold each per-layer
  // tensor of their kind and their own rows.
  const int64_t modules = cfg.mtp > 0 ? cfg.mtp * one_block(t, cfg, cfg.layers, padded) : 0;
  if (tensor_spec(t).needs == Needs::kMtp) return modules;
  if (!cfg.mixed()) return cfg.layers * one_block(t, cfg, 0, padded) + modules;
  const int64_t K = cfg.dense_layers;
  return K * one_block(t, cfg, 0, padded) + (cfg.layers - K) * one_block(t, cfg, K, padded) +
         modules;
}
}  // namespace

int64_t block_tensor_size(TensorId t, const GPTConfig& cfg, int layer) {
  return one_block(t, cfg, layer, true);
}

int64_t layer_offset(TensorId t, const GPTConfig& cfg, int layer) {
  if (tensor_spec(t).needs == Needs::kMtp) {
    return cfg.mtp_block(layer) ? (layer - cfg.layers) * one_block(t, cfg, layer, true) : 0;
  }
  // A module's block holds the trunk's tensors as an experts' (or uniform) block does.
  if (!cfg.mixed()) return layer * one_block(t, cfg, 0, true);
  const int64_t K = cfg.dense_layers, dense = std::min<int64_t>(layer, K);
  return dense * one_block(t, cfg, 0, true) + (layer - dense) * one_block(t, cfg, K, true);
}

int64_t tensor_size(TensorId t, const GPTConfig& cfg) {
  return elements(t, cfg, true);
}

int64_t unpadded_size(TensorId t, const GPTConfig& cfg) {
  return elements(t, cfg, false);
}

float init_std(const TensorSpec& s, const GPTConfig& cfg) {
  return s.residual && cfg.features().scaled_residual_init ? 0.02f / std::sqrt(2.0f * cfg.layers)
                                                           : 0.02f;
}

}  // namespace mpf
