// DeepSeek-V3's multi-head latent attention (MLA; Hugging Face's DeepseekV3Attention) in front of
// the fused attention: its projections form the packed [Q | K | V] every attention path reads,
// with NH query, NH key and NH value heads of qk_nope + qk_rope values each.
//   q  = q_b(RMSNorm(q_a(x)))  (or q_proj(x)), each head [q_nope | q_rope]
//   kva = kv_a(x) = [latent | k_rope];  kv = kv_b(RMSNorm(latent)), each head [k_nope | v]
//   Q_h = [q_nope | rope(q_rope)] · s,  K_h = [k_nope | rope(k_rope)],  V_h = [v | 0]
// The rotary part's key is one vector shared by the heads. V is zero-padded to the QK head size,
// so the attention's output has zeros past v_head in each head, which mla_attention_output drops
// before o_proj (as Hugging Face's flash path pads and slices). s = mscale(mscale_all_dim)² under
// YaRN folds the softmax's extra scale into Q (the kernels scale by 1/√(qk head size)).
// TP: q_b and kv_b are column-parallel by heads, o_proj row-parallel; q_a, kv_a and their norms
// are replicated, each rank adding its heads' part of their gradients, summed over TP in W.
#pragma once

#include <mpi.h>

#include <vector>

#include "model/activations.hpp"
#include "model/parameters.hpp"
#include "model/shard.hpp"

namespace mpf {

// Floats a block's MLA keeps per set of activations (R rows), its W inputs, and B's scratch
// (one block's, BackwardBuffers::mla).
int64_t mla_activation_floats(const TpShard& s, int64_t R);
int64_t mla_weight_input_floats(const TpShard& s, int64_t R);
int64_t mla_backward_scratch_floats(const TpShard& s, int64_t R);

// inv_freq of the rotary part (qk_rope values): theta's, YaRN's (rope_yarn) or Llama 3.1's
// scaling, and the factor the rotary tables are multiplied by (YaRN's attention factor, else 1).
std::vector<float> mla_rope_frequencies(const GPTConfig& cfg);
float mla_rope_table_scale(const GPTConfig& cfg);

// a.qkv (R, 3·NHl·hs) from a.ln1 (R,C): the projections, norms and rotation above; the tables
// (T, qk_rope/2) rotate row n by position pos0 + n % T.
void mla_forward(const LayerActivations& a, const LayerParameters& p, const TpShard& s, int64_t R,
                 Tensor cos, Tensor sin, int T, int pos0);
// The normalised latent RMSNorm(kv_a(x)'s first kv_lora_rank values) (R, kv_lora_rank) of the
// rows mla_forward formed (generation's latent KV cache keeps it).
Tensor mla_latent(const LayerActivations& a, const TpShard& s, int64_t R);
// This rank's heads' V parts of the attention's output a.atty, the o_proj's input (R, NHl·v),
// copied into the block's kept MLA activations.
Tensor mla_attention_output(const LayerActivations& a, const TpShard& s, int64_t R);
// The copy the forward kept (W's o_proj input: under bf16 a.atty is then another block's staging).
Tensor mla_kept_attention_output(const LayerActivations& a, const TpShard& s, int64_t R);
// datty (R, NHl·hs), the attention output's gradient (zero past v in each head), from dres2
// (R,C), o_proj's output gradient (its input gradient formed in B's `scratch`).
void mla_attention_output_backward(Tensor datty, Tensor scratch, Tensor dres2,
                                   const LayerParameters& p, const TpShard& s, int64_t R);
// dln1 (R,C) = this rank's heads' part of ln1's gradient, from dqkv (R, 3·NHl·hs), the gradient
// of the packed [Q | K | V]; what the weights' gradients read goes to `dmla` (the norms' weight
// gradients among it), the rest through B's `scratch`.
void mla_backward_input(Tensor dln1, Tensor dmla, Tensor scratch, Tensor dqkv,
                        const LayerActivations& a, const LayerParameters& p, const TpShard& s,
                        int64_t R, Tensor cos, Tensor sin, int T);
// The MLA weights' gradients (added); with final_microbatch the replicated ones are summed over
// the TP ranks.
void mla_backward_weight(const LayerParameters& g, Tensor dmla, const LayerActivations& a,
                         const TpShard& s, int64_t R, MPI_Comm tp, bool final_microbatch);

}  // namespace mpf
