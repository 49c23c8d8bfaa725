#include "model/config.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>

#include "core/error.hpp"
#include "model/tensors.hpp"

namespace mpf {

namespace {
struct Family {
  Arch arch;
  const char* name;
};
constexpr Family kFamilies[] = {{Arch::kGpt2, "gpt2"},          {Arch::kLlama, "llama"},
                                {Arch::kQwen2, "qwen2"},        {Arch::kMistral, "mistral"},
                                {Arch::kPhi3, "phi3"},          {Arch::kQwen3, "qwen3"},
                                {Arch::kOlmo2, "olmo2"},        {Arch::kMixtral, "mixtral"},
                                {Arch::kQwen3Moe, "qwen3_moe"}, {Arch::kOlmoe, "olmoe"},
                                {Arch::kQwen2Moe, "qwen2_moe"}, {Arch::kDeepseekV3, "deepseek_v3"}};
}  // namespace

ModelFeatures features_of(Arch arch) {
  ModelFeatures f;  // GPT-2's
  if (arch == Arch::kGpt2) return f;
  // The Llama blocks: RMSNorm, rotary embeddings, SwiGLU, no biases, Hugging Face's init.
  f.norm = NormKind::kRmsNorm;
  f.mlp = MlpKind::kSwiGlu;
  f.positions = PositionKind::kRope;
  f.linear_bias = f.qkv_bias = false;
  f.scaled_residual_init = false;
  f.llama_fields = true;
  if (arch == Arch::kQwen2 || arch == Arch::kQwen2Moe) f.qkv_bias = true;
  if (arch == Arch::kPhi3) f.fused_hf_projections = true;
  if (arch == Arch::kQwen3 || arch == Arch::kQwen3Moe) f.qk_norm = QkNorm::kPerHead;
  if (arch == Arch::kOlmo2) {
    f.norm_placement = NormPlacement::kPost;
    f.qk_norm = QkNorm::kWhole;
  }
  if (arch == Arch::kOlmoe) f.qk_norm = QkNorm::kWhole;
  f.moe = arch == Arch::kMixtral || arch == Arch::kQwen3Moe || arch == Arch::kOlmoe ||
          arch == Arch::kQwen2Moe;
  f.shared_expert = arch == Arch::kQwen2Moe;
  f.hf_block_sparse_moe = arch == Arch::kMixtral;
  f.mla = arch == Arch::kDeepseekV3;
  return f;
}

const char* arch_name(Arch arch) {
  for (const Family& f : kFamilies) {
    if (f.arch == arch) return f.name;
  }
  return "?";
}

bool parse_arch(const std::string& name, Arch& arch) {
  for (const Family& f : kFamilies) {
    if (name == f.name) {
      arch = f.arch;
      return true;
    }
  }
  return false;
}

const char* arch_names() {
  return "gpt2,llama,qwen2,mistral,phi3,qwen3,olmo2,mixtral,qwen3_moe,olmoe,qwen2_moe,deepseek_v3";
}

float default_moe_aux_coef(Arch arch) {
  if (arch == Arch::kDeepseekV3) return 0.0f;  // aux-loss-free balancing (the routing's bias)
  return arch == Arch::kOlmoe ? 0.01f : 0.001f;
}

bool default_moe_renormalize(Arch arch) {
  return arch != Arch::kOlmoe && arch != Arch::kQwen2Moe;
}

int pad_vocab(int vocab, int multiple) {
  // In 64 bits: a vocabulary near 2^31 (a corrupt config.json) must reach validate(), not overflow.
  const int64_t padded = (int64_t(vocab) + multiple - 1) / multiple * multiple;
  return int(std::min<int64_t>(padded, INT_MAX));
}

namespace {
// Multi-head latent attention's sizes: all or none (the family decides), each plausible, the
// rotary part even; YaRN's factors finite.
void validate_mla(const GPTConfig& cfg, const std::string& origin) {
  const std::string from = " (from " + origin + ")";
  if (!cfg.features().mla) {
    require(!cfg.mla() && cfg.q_lora_rank == 0 && !cfg.rope_yarn,
            std::string("the ") + arch_name(cfg.arch) +
                " family has no latent attention or YaRN rope scaling" + from);
    return;
  }
  // The flags' model (mpiformer-train checks --init-from's config.json against it) has none of
  // the latent attention's sizes: they come from the config alone.
  if (!cfg.mla()) return;
  for (const auto& [value, key] : {std::pair<int, const char*>{cfg.kv_lora_rank, "kv_lora_rank"},
                                   {cfg.qk_nope_dim, "qk_nope_head_dim"},
                                   {cfg.qk_rope_dim, "qk_rope_head_dim"},
                                   {cfg.v_head_dim, "v_head_dim"}}) {
    require(value > 0 && value <= (1 << 16),
            std::string(key) + " " + std::to_string(value) + " is not 1 to 65536" + from);
  }
  require(cfg.q_lora_rank >= 0 && cfg.q_lora_rank <= (1 << 16),
          "q_lora_rank " + std::to_string(cfg.q_lora_rank) + " is not 0 (none) to 65536" + from);
  require(cfg.qk_rope_dim % 2 == 0, "qk_rope_head_dim " + std::to_string(cfg.qk_rope_dim) +
                                        " is odd; rotary embeddings rotate pairs" + from);
  // V is padded to the QK head size for the fused attention (model/mla_block.hpp).
  require(cfg.v_head_dim <= cfg.qk_nope_dim + cfg.qk_rope_dim,
          "v_head_dim " + std::to_string(cfg.v_head_dim) + " exceeds qk_nope_head_dim + " +
              "qk_rope_head_dim (" + std::to_string(cfg.qk_nope_dim + cfg.qk_rope_dim) + ")" +
              from + "; this trainer pads V to the query/key head size and cannot narrow it");
  require(std::isfinite(cfg.yarn_beta_fast) && std::isfinite(cfg.yarn_beta_slow) &&
              std::isfinite(cfg.yarn_mscale) && std::isfinite(cfg.yarn_mscale_all_dim),
          "rope_scaling's beta_fast, beta_slow, mscale and mscale_all_dim must be finite" + from);
}
}  // namespace

void validate(const GPTConfig& cfg, const std::string& origin) {
  auto positive = [&](int value, const char* what, const char* flag) {
    require(value > 0, std::string(what) + " must be positive, got " + std::to_string(value) +
                           " (from " + origin + "); set " + flag + " to a positive value");
  };
  positive(cfg.layers, "the number of layers", "--layers");
  positive(cfg.heads, "the number of heads", "--heads");
  positive(cfg.channels, "the channel count", "--dim");
  positive(cfg.vocab, "the vocabulary size", "--vocab");
  positive(cfg.max_seq_len, "max_seq_len", "--max-seq-len");
  // Far above any trained model's, and low enough that no size computed from them overflows
  // (4C, (NH + 2 KVH) hs, L x F x C elements): a corrupt config.json stops here, not in malloc.
  auto plausible = [&](int64_t value, int64_t most, const char* what, const char* flag) {
    require(value <= most, std::string(what) + " " + std::to_string(value) +
                               " is implausibly large (from " + origin + "; at most " +
                               std::to_string(most) + "); set " + flag + " to a smaller value");
  };
  plausible(cfg.layers, 1 << 16, "the number of layers", "--layers");
  plausible(cfg.heads, 1 << 16, "the number of heads", "--heads");
  plausible(cfg.channels, 1 << 20, "the channel count", "--dim");
  plausible(cfg.vocab, 1 << 24, "the vocabulary size", "--vocab");
  plausible(cfg.max_seq_len, 1 << 24, "max_seq_len", "--max-seq-len");
  plausible(cfg.ffn_dim, 1 << 22, "the MLP width", "--ffn-dim");
  plausible(cfg.head_dim, 1 << 16, "the head size", "--head-dim");
  require(cfg.head_dim > 0 || cfg.channels % cfg.heads == 0,
          "channels " + std::to_string(cfg.channels) + " do not divide into " +
              std::to_string(cfg.heads) + " heads (from " + origin +
              "); choose --dim a multiple of --heads");
  require(cfg.padded_vocab >= cfg.vocab, "padded vocabulary " + std::to_string(cfg.padded_vocab) +
                                             " is smaller than vocabulary " +
                                             std::to_string(cfg.vocab) + " (from " + origin + ")");
  require(cfg.sliding_window >= 0, "the sliding window " + std::to_string(cfg.sliding_window) +
                                       " is negative (from " + origin +
                                       "); pass --sliding-window 0 (none) or a positive size");
  if (!cfg.llama()) {
    require(cfg.kv_head_count() == cfg.heads && cfg.ffn_width() == 4 * cfg.channels && cfg.tied &&
                cfg.sliding_window == 0 && cfg.head_dim == 0,
            "GPT-2 has as many kv heads as heads, an MLP of 4C, tied embeddings and no sliding "
            "window (from " +
                origin +
                "); drop --kv-heads/--ffn-dim/--tie-embeddings/--sliding-window or pass --arch "
                "llama");
    require(cfg.experts == 0 && cfg.experts_per_token == 0,
            "GPT-2 has a dense MLP (from " + origin +
                "); drop --experts/--experts-per-token or pass --arch mixtral, qwen3_moe or olmoe");
    return;
  }
  positive(cfg.kv_head_count(), "the number of kv heads", "--kv-heads");
  if (cfg.features().moe) {
    positive(cfg.experts, "the number of experts", "--experts");
    plausible(cfg.experts, 1 << 12, "the number of experts", "--experts");
    // The router picks a token's experts one by one (k passes over E): real models take 1 to 8.
    plausible(cfg.experts_per_token, 64, "the experts per token", "--experts-per-token");
    require(cfg.experts_per_token >= 1 && cfg.experts_per_token <= cfg.experts,
            "each token's " + std::to_string(cfg.experts_per_token) + " experts are not 1 to the " +
                std::to_string(cfg.experts) + " experts (from " + origin +
                "); choose --experts-per-token between 1 and --experts");
    require(cfg.moe_aux_coef >= 0 && std::isfinite(cfg.moe_aux_coef),
            "the balance loss's coefficient must be finite and not negative (from " + origin +
                "); fix --moe-aux-coef");
    plausible(cfg.shared_ffn, 1 << 22, "the shared expert's width", "--shared-expert-dim");
    if (cfg.features().moe_choice_bias) {  // DeepSeekMoE's routing, from a file's header too
      const int G = cfg.moe_groups, kg = cfg.moe_topk_groups;
      require(G >= 1 && G <= 64 && cfg.experts % G == 0 && (G == 1 || cfg.experts / G >= 2) &&
                  kg >= 1 && kg <= G && cfg.experts_per_token <= kg * (cfg.experts / G) &&
                  cfg.moe_scale > 0 && std::isfinite(cfg.moe_scale),
              "DeepSeekMoE's routing (n_group " + std::to_string(G) + ", topk_group " +
                  std::to_string(kg) + ", routed_scaling_factor " + std::to_string(cfg.moe_scale) +
                  " over " + std::to_string(cfg.experts) + " experts, " +
                  std::to_string(cfg.experts_per_token) + " per token) cannot route (from " +
                  origin + "); the file is corrupt");
    }
    require(cfg.features().shared_expert ? cfg.shared_ffn > 0 : cfg.shared_ffn == 0,
            cfg.features().shared_expert
                ? "the " + std::string(arch_name(cfg.arch)) +
                      " family has a shared expert, of width 0 here (from " + origin +
                      "); pass --shared-expert-dim N"
                : "the " + std::string(arch_name(cfg.arch)) +
                      " family has no shared expert (from " + origin +
                      "); drop --shared-expert-dim or pass --arch qwen2_moe");
  } else {
    require(cfg.shared_ffn == 0, std::string("the ") + arch_name(cfg.arch) +
                                     " family has no shared expert (from " + origin +
                                     "); drop --shared-expert-dim or pass --arch qwen2_moe");
    require(cfg.experts == 0 && cfg.experts_per_token == 0,
            std::string("the ") + arch_name(cfg.arch) + " family has a dense MLP (from " + origin +
                "); drop --experts/--experts-per-token or pass --arch mixtral, qwen3_moe or olmoe");
  }
  positive(cfg.ffn_width(), "the MLP width", "--ffn-dim");
  require(cfg.dense_layers == 0 ||
              (cfg.moe() && cfg.dense_layers > 0 && cfg.dense_layers < cfg.layers &&
               cfg.dense_ffn > 0 && cfg.dense_ffn <= (1 << 22)),
          "the first " + std::to_string(cfg.dense_layers) + " of " + std::to_string(cfg.layers) +
              " blocks dense (MLP width " + std::to_string(cfg.dense_ffn) + ") before " +
              std::to_string(cfg.experts) + " experts' blocks is no model (from " + origin +
              "); the file is corrupt");
  validate_mla(cfg, origin);
  require(cfg.mtp >= 0 && cfg.mtp <= 64,
          "the model's " + std::to_string(cfg.mtp) +
              " multi-token prediction modules are not a depth from 0 to 64 (from " + origin +
              "); the file is corrupt");
  require(cfg.heads % cfg.kv_head_count() == 0,
          "the " + std::to_string(cfg.heads) + " heads do not share " +
              std::to_string(cfg.kv_head_count()) + " kv heads evenly (from " + origin +
              "); choose --kv-heads dividing --heads");
  require(cfg.mla() || cfg.head_size() % 2 == 0,
          "the head size " + std::to_string(cfg.head_size()) +
              " is odd; rotary embeddings rotate pairs (from " + origin +
              "); choose --dim / --heads even");
  // A float32 of a config.json's 1e39 is infinite; so may be --rope-scaling's "inf".
  require(cfg.norm_eps > 0 && std::isfinite(cfg.norm_eps),
          "--norm-eps must be positive and finite (from " + origin + ")");
  require(cfg.rope_theta > 0 && std::isfinite(cfg.rope_theta),
          "--rope-theta must be positive and finite (from " + origin + ")");
  require(std::isfinite(cfg.rope_factor) && std::isfinite(cfg.rope_high_freq_factor),
          "rope scaling's factors must be finite (from " + origin + "); fix --rope-scaling");
  require(cfg.rope_factor == 0 ||
              (cfg.rope_factor >= 1 && cfg.rope_high_freq_factor > cfg.rope_low_freq_factor &&
               cfg.rope_low_freq_factor > 0 && cfg.rope_original_max_pos > 0),
          "rope scaling needs factor >= 1 (0: none), 0 < low_freq_factor < high_freq_factor and "
          "a positive original context (from " +
              origin + "); fix --rope-scaling");
}

int64_t parameter_count(const GPTConfig& cfg) {
  int64_t n = 0;
  for (const TensorSpec& s : kTensors) n += tensor_size(s.id, cfg);
  return n;
}

std::string describe(const GPTConfig& cfg) {
  char buf[320];
  int n = std::snprintf(buf, sizeof buf, "L%d H%d C%d V%d (padded %d) maxT %d", cfg.layers,
                        cfg.heads, cfg.channels, cfg.vocab, cfg.padded_vocab, cfg.max_seq_len);
  if (cfg.llama() && n > 0 && n < int(sizeof buf)) {
    n += std::snprintf(buf + n, sizeof buf - size_t(n), " %s KVH%d F%d eps %g theta %g",
                       arch_name(cfg.arch), cfg.kv_head_count(), cfg.ffn_width(),
                       double(cfg.norm_eps), double(cfg.rope_theta));
    if (cfg.head_dim > 0 && n < int(sizeof buf)) {
      n += std::snprintf(buf + n, sizeof buf - size_t(n), " head_dim %d", cfg.head_dim);
    }
    if (cfg.moe() && n < int(sizeof buf)) {
      n += std::snprintf(buf + n, sizeof buf - size_t(n), " experts %d top-%d%s", cfg.experts,
                         cfg.experts_per_token, cfg.moe_renormalize ? " renormalised" : "");
    }
    if (cfg.shared_expert() && n < int(sizeof buf)) {
      n += std::snprintf(buf + n, sizeof buf - size_t(n), " shared %d", cfg.shared_ffn);
    }
    if (cfg.mixed() && n < int(sizeof buf)) {
      n += std::snprintf(buf + n, sizeof buf - size_t(n), " first %d dense F%d", cfg.dense_layers,
                         cfg.dense_ffn);
    }
    if (cfg.mla() && n < int(sizeof buf)) {
      n += std::snprintf(buf + n, sizeof buf - size_t(n), " mla q%d kv%d qk %d+%d v%d",
                         cfg.q_lora_rank, cfg.kv_lora_rank, cfg.qk_nope_dim, cfg.qk_rope_dim,
                         cfg.v_head_dim);
    }
    if (cfg.no_qkv_bias && n < int(sizeof buf)) {
      n += std::snprintf(buf + n, sizeof buf - size_t(n), " no-qkv-bias");
    }
    if (cfg.mtp > 0 && n < int(sizeof buf)) {
      n += std::snprintf(buf + n, sizeof buf - size_t(n), " mtp %d", cfg.mtp);
    }
    if (cfg.sliding_window > 0 && n < int(sizeof buf)) {
      n += std::snprintf(buf + n, sizeof buf - size_t(n), " window %d", cfg.sliding_window);
    }
    if (cfg.rope_yarn && n < int(sizeof buf)) {
      n += std::snprintf(buf + n, sizeof buf - size_t(n), " yarn %g,%d,%g,%g,%g,%g",
                         double(cfg.rope_factor), cfg.rope_original_max_pos,
                         double(cfg.yarn_beta_fast), double(cfg.yarn_beta_slow),
                         double(cfg.yarn_mscale), double(cfg.yarn_mscale_all_dim));
    } else if (cfg.rope_factor > 0 && n < int(sizeof buf)) {
      n += std::snprintf(buf + n, sizeof buf - size_t(n), " rope-scaling %g,%g,%g,%d",
                         double(cfg.rope_factor), double(cfg.rope_low_freq_factor),
                         double(cfg.rope_high_freq_factor), cfg.rope_original_max_pos);
    }
    if (n < int(sizeof buf))
      std::snprintf(buf + n, sizeof buf - size_t(n), cfg.tied ? " tied" : " untied");
  }
  return buf;
}

bool same_shape(const GPTConfig& a, const GPTConfig& b) {
  return a.max_seq_len == b.max_seq_len && a.vocab == b.vocab && a.padded_vocab == b.padded_vocab &&
         a.layers == b.layers && a.heads == b.heads && a.channels == b.channels &&
         a.arch == b.arch && a.kv_head_count() == b.kv_head_count() &&
         a.ffn_width() == b.ffn_width() && a.norm_eps == b.norm_eps &&
         a.rope_theta == b.rope_theta && a.rope_factor == b.rope_factor &&
         a.rope_low_freq_factor == b.rope_low_freq_factor &&
         a.rope_high_freq_factor == b.rope_high_freq_factor &&
         a.rope_original_max_pos == b.rope_original_max_pos && a.tied == b.tied &&
         a.sliding_window == b.sliding_window && a.head_size() == b.head_size() &&
         a.experts == b.experts && a.experts_per_token == b.experts_per_token &&
         (!a.moe() || a.moe_renormalize == b.moe_renormalize) && a.shared_ffn == b.shared_ffn &&
         a.moe_sigmoid == b.moe_sigmoid && a.moe_noaux == b.moe_noaux &&
         a.moe_groups == b.moe_groups && a.moe_topk_groups == b.moe_topk_groups &&
         a.moe_scale == b.moe_scale && a.dense_layers == b.dense_layers &&
         a.dense_ffn == b.dense_ffn && a.mtp == b.mtp &&
         a.features().qkv_bias == b.features().qkv_bias && a.q_lora_rank == b.q_lora_rank &&
         a.kv_lora_rank == b.kv_lora_rank && a.qk_nope_dim == b.qk_nope_dim &&
         a.qk_rope_dim == b.qk_rope_dim && a.v_head_dim == b.v_head_dim &&
         (!a.mla() || a.rope_interleave == b.rope_interleave) && a.rope_yarn == b.rope_yarn &&
         (!a.rope_yarn ||
          (a.yarn_beta_fast == b.yarn_beta_fast && a.yarn_beta_slow == b.yarn_beta_slow &&
           a.yarn_mscale == b.yarn_mscale && a.yarn_mscale_all_dim == b.yarn_mscale_all_dim));
}

}  // namespace mpf
