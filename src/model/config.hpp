// The shape of a model: llm.c's GPT2Config plus the padded vocabulary, what the Llama family adds
// (Hugging Face's LlamaConfig: grouped-query attention, the SwiGLU width, RMSNorm's eps, rotary
// embeddings with Llama 3.1's frequency scaling, tied or untied embeddings), a sliding attention
// window, and the family's features. The defaults are GPT-2's, so a GPT-2 config never names the
// Llama fields.
//
// A family is a set of features (ModelFeatures), fixed once per family (features_of) from
// config.json's model_type or --arch. Everything past the config (the tensor table, the kernels,
// the checkpoint name maps) reads the features, never the family; the family's name only labels
// files (docs/design.md, "Adding a family").
#pragma once

#include <cstdint>
#include <string>

namespace mpf {

enum class Arch {
  kGpt2,
  kLlama,
  kQwen2,
  kMistral,
  kPhi3,
  kQwen3,
  kOlmo2,
  kMixtral,
  kQwen3Moe,
  kOlmoe,
  kQwen2Moe,
  kDeepseekV3
};

enum class NormKind { kLayerNorm, kRmsNorm };  // LayerNorm with its shift; RMSNorm scale only
enum class MlpKind { kGelu, kSwiGlu };         // GELU (tanh) on F = 4C; SwiGLU's [gate | up]
enum class PositionKind { kLearned, kRope };   // a position table (wpe); rotary Q and K
// Where a block normalises: the input of each sublayer (GPT-2, Llama), or each sublayer's output
// before it joins the residual stream (OLMo-2: x + norm(attn(x)), then h + norm(mlp(h))).
enum class NormPlacement { kPre, kPost };
// RMSNorms of Q and K before the rotation: of each head, one weight vector of the head size for Q
// and one for K shared by the heads (Qwen3's q_norm, k_norm); or of the whole projection, Q's
// NH·hs values and K's KVH·hs with a weight each (OLMo-2's).
enum class QkNorm { kNone, kPerHead, kWhole };

struct ModelFeatures {
  NormKind norm = NormKind::kLayerNorm;
  NormPlacement norm_placement = NormPlacement::kPre;
  MlpKind mlp = MlpKind::kGelu;
  PositionKind positions = PositionKind::kLearned;
  bool linear_bias = true;  // the output projection and the MLP's layers have biases (GPT-2)
  bool qkv_bias = true;     // the Q, K and V projections have biases (GPT-2, Qwen2)
  QkNorm qk_norm = QkNorm::kNone;
  // GPT-2's initialisation: a residual projection's std scaled by 1/sqrt(2L).
  bool scaled_residual_init = true;
  // Hugging Face stores Q, K, V as one qkv_proj and gate, up as one gate_up_proj (Phi-3).
  bool fused_hf_projections = false;
  // The mixture of experts has a shared expert (Qwen2-MoE's; GPTConfig's shared_ffn).
  bool shared_expert = false;
  // The MLP is a mixture of experts (GPTConfig's experts): Mixtral, Qwen3-MoE, OLMoE; Hugging
  // Face names Mixtral's block_sparse_moe.gate and experts.{j}.w1/w3/w2, the others' mlp.gate and
  // mlp.experts.{j}.gate_proj/up_proj/down_proj.
  bool moe = false;
  bool hf_block_sparse_moe = false;
  // The shared expert's output joins ungated (DeepSeekMoE's mlp.shared_experts: no sgatew).
  bool shared_expert_gate = true;
  // DeepSeekMoE's routing (DeepSeek-V3 with routed experts): a per-expert bias added to the scores
  // for choosing only (e_score_correction_bias, a tensor row that AdamW never moves).
  bool moe_choice_bias = false;
  // DeepSeek-V3's multi-head latent attention (MLA) in place of the Q, K, V projections (the
  // latent ranks and head sizes in GPTConfig).
  bool mla = false;
  // The GQA, FFN width, eps and rope fields below are the family's own (all but GPT-2).
  bool llama_fields = false;
};

// The family's features.
ModelFeatures features_of(Arch arch);

struct GPTConfig {
  int max_seq_len = 0;   // maxT: rows of the position table (GPT-2), the longest context
  int vocab = 0;         // V: real vocabulary; softmax and loss run over these columns only
  int padded_vocab = 0;  // Vp >= V: rows of the token table (padded rows are zero, never read)
  int layers = 0;        // L
  int heads = 0;         // NH
  int channels = 0;      // C, divisible by NH
  Arch arch = Arch::kGpt2;
  int kv_heads = 0;  // KVH, dividing NH (grouped-query attention); 0: NH
  int ffn_dim = 0;   // F, the MLP's hidden width; 0: 4C
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  // Llama 3.1's rope_scaling of type "llama3"; factor 0 means none.
  float rope_factor = 0.0f, rope_low_freq_factor = 1.0f, rope_high_freq_factor = 4.0f;
  int rope_original_max_pos = 8192;
  bool tied = true;  // the LM head is wte (GPT-2 always; Llama when --tie-embeddings 1)
  // A query sees the last `sliding_window` positions, itself included (Mistral v0.1, Phi-3);
  // 0: every earlier position.
  int sliding_window = 0;
  // The head size when it is not C / NH (Qwen3's head_dim); 0: C / NH.
  int head_dim = 0;
  // A mixture of experts in every block (the MoE families): E SwiGLU experts of width F each, a
  // router choosing k of them per token, their gates p renormalised over the k (Mixtral,
  // Qwen3-MoE's norm_topk_prob) or p itself (OLMoE), and the balance loss's coefficient. 0
  // experts: a dense MLP.
  int experts = 0, experts_per_token = 0;
  bool moe_renormalize = false;
  float moe_aux_coef = 0.0f;
  // Qwen2-MoE's shared expert: a SwiGLU MLP of this width every token goes through beside its
  // routed experts, its output scaled by sigmoid(x · sgatew); 0: none.
  int shared_ffn = 0;
  // DeepSeekMoE's routing (deepseek_v3 with n_routed_experts; HF's DeepseekV3TopkRouter): scores
  // sigmoid(logits) (or softmax), the k chosen on scores + e_score_correction_bias (noaux_tc;
  // greedy: on the scores alone, no groups) inside the moe_topk_groups of moe_groups groups with
  // the largest sums of their two best biased scores; gates the chosen scores (renormalised over
  // the k under moe_renormalize) times moe_scale (routed_scaling_factor).
  bool moe_sigmoid = false, moe_noaux = false;
  int moe_groups = 1, moe_topk_groups = 1;
  float moe_scale = 1.0f;
  // The family's Q, K, V biases left out (Qwen2-MoE's config.json "qkv_bias": false, as
  // transformers builds the model then).
  bool no_qkv_bias = false;
  // Multi-head latent attention (DeepSeek-V3's, features().mla): queries through a q_lora_rank
  // bottleneck with its RMSNorm (0: one plain projection), keys and values from a kv_lora_rank
  // latent with its RMSNorm, Q and K heads of qk_nope + qk_rope values (the rotary qk_rope part
  // of K one vector shared by the heads), V heads of v_head values. kv_lora_rank 0: not MLA.
  int q_lora_rank = 0, kv_lora_rank = 0, qk_nope_dim = 0, qk_rope_dim = 0, v_head_dim = 0;
  // The rotary part's pairs: (2i, 2i + 1), as DeepSeek-V3's weights are laid out
  // (rope_interleave true), or (i, i + qk_rope/2).
  bool rope_interleave = true;
  // YaRN's rope scaling (rope_scaling.type "yarn"; rope_factor and rope_original_max_pos its
  // factor and original context): the ramp's beta_fast and beta_slow, and mscale and
  // mscale_all_dim (0: absent), which scale the rotary tables and the attention's softmax.
  bool rope_yarn = false;
  float yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f, yarn_mscale = 0.0f,
        yarn_mscale_all_dim = 0.0f;
  // DeepSeek-V3's first_k_dense_replace: with experts, the first dense_layers blocks have a dense
  // SwiGLU MLP of width dense_ffn (intermediate_size) and the rest the mixture of experts (of
  // width ffn_dim, moe_intermediate_size). 0: every block alike.
  int dense_layers = 0, dense_ffn = 0;
  // DeepSeek-V3's multi-token prediction (num_nextn_predict_layers, --mtp): this many modules
  // after the `layers` blocks, each one more block (the last block's kind) with its own rows
  // (enorm, hnorm, eh_proj, shared_head.norm: Needs::kMtp), trained beside the trunk
  // (model/mtp.hpp). 0: none.
  int mtp = 0;

  ModelFeatures features() const {
    ModelFeatures f = features_of(arch);
    if (no_qkv_bias) f.qkv_bias = false;
    if (arch == Arch::kDeepseekV3 && experts > 0) {  // DeepSeekMoE blocks
      f.moe = true;
      f.shared_expert = shared_ffn > 0;
      f.shared_expert_gate = false;
      f.moe_choice_bias = true;
    }
    return f;
  }
  // The families with the Llama fields (GQA, SwiGLU width, RMSNorm eps, rotary embeddings).
  bool llama() const { return features().llama_fields; }
  bool rms_norm() const { return features().norm == NormKind::kRmsNorm; }
  bool swiglu() const { return features().mlp == MlpKind::kSwiGlu; }
  bool rope() const { return features().positions == PositionKind::kRope; }
  bool post_norm() const { return features().norm_placement == NormPlacement::kPost; }
  QkNorm qk_norm_kind() const { return features().qk_norm; }
  bool qk_norm() const { return qk_norm_kind() != QkNorm::kNone; }
  bool mla() const { return kv_lora_rank > 0; }
  // Q's and K's head size (under MLA qk_nope + qk_rope; V's is padded to it, model/mla_block.hpp).
  int head_size() const {
    if (mla()) return qk_nope_dim + qk_rope_dim;
    return head_dim > 0 ? head_dim : channels / heads;
  }
  // The attention's width, the output projection's input: NH·hs (C unless head_dim says not;
  // NH·v_head under MLA).
  int attention_width() const { return heads * (mla() ? v_head_dim : head_size()); }
  int kv_head_count() const { return mla() ? heads : kv_heads > 0 ? kv_heads : heads; }
  int ffn_width() const { return ffn_dim > 0 ? ffn_dim : 4 * channels; }
  bool moe() const { return experts > 0; }
  bool shared_expert() const { return shared_ffn > 0; }
  // Copies of the MLP's tensors a block holds: E experts, or the one dense MLP.
  int expert_count() const { return experts > 0 ? experts : 1; }
  // Rows of the packed [Q | K | V] projection: (NH + 2 KVH) · hs (3C for GPT-2).
  int qkv_rows() const { return (heads + 2 * kv_head_count()) * head_size(); }
  // Rows of the MLP's first layer: [gate | up] (2F) for SwiGLU, F for GPT-2's GELU MLP.
  int mlp_in_rows() const { return swiglu() ? 2 * ffn_width() : ffn_width(); }
  // Dense blocks before mixture-of-experts blocks (first_k_dense_replace): the per-layer tensors
  // then differ by block (block_config).
  bool mixed() const { return experts > 0 && dense_layers > 0; }
  bool dense_block(int layer) const { return mixed() && layer < dense_layers; }
  // The trunk's blocks and the multi-token prediction modules' (blocks layers .. layers + mtp - 1).
  int blocks() const { return layers + mtp; }
  bool mtp_block(int layer) const { return layer >= layers; }
  // wte on the head's stage too: the tied LM head, or the multi-token prediction modules'
  // embedding of t_{i+k} (its gradient then summed over the embedding group, as a tied one).
  bool wte_with_head() const { return tied || mtp > 0; }
  // The model block `layer` is: this config, or for a dense block of a mixed model the same
  // without experts, its MLP of width dense_ffn. Whatever sizes or runs one block reads it.
  GPTConfig block_config(int layer) const {
    if (!dense_block(layer)) return *this;
    GPTConfig b = *this;
    b.experts = b.experts_per_token = b.shared_ffn = 0;
    b.ffn_dim = dense_ffn;
    b.dense_layers = b.dense_ffn = 0;
    return b;
  }
};

const char* arch_name(Arch arch);  // "gpt2", "llama", ..., "olmoe"
// The family named `name` (arch_name's); false if none is.
bool parse_arch(const std::string& name, Arch& arch);
// Every family's name, comma-separated, for messages and --help.
const char* arch_names();

// The balance loss's coefficient a mixture-of-experts family takes when nothing says
// (transformers' defaults of router_aux_loss_coef: Mixtral's and Qwen3-MoE's 0.001, OLMoE's 0.01).
float default_moe_aux_coef(Arch arch);
// Whether a family renormalises the chosen experts' gates when nothing says (--moe-renormalize's
// default): all but OLMoE and Qwen2-MoE, whose norm_topk_prob defaults to false.
bool default_moe_renormalize(Arch arch);

// llm.c pads the vocabulary to a multiple of 128 (50257 -> 50304) so the head GEMM tiles well.
int pad_vocab(int vocab, int multiple = 128);

// Throws InputError naming the offending size unless every size is positive, C % NH == 0,
// NH % KVH == 0, the head size is even for rotary embeddings and Vp >= V. `origin` says where
// the sizes came from ("flags", "checkpoint foo.bin").
void validate(const GPTConfig& cfg, const std::string& origin);

// Whether two configs describe the same model.
bool same_shape(const GPTConfig& a, const GPTConfig& b);

// Number of parameters, with the padded token table and the position table.
int64_t parameter_count(const GPTConfig& cfg);

// "L12 H12 C768 V50257 (padded 50304) maxT 1024"; a Llama adds its arch and kv heads, F, eps,
// theta, its rope scaling and whether it is tied.
std::string describe(const GPTConfig& cfg);

}  // namespace mpf
