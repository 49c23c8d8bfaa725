// The parameter tensors as data: one row per tensor, GPT-2's in llm.c's order, with what sharding,
// initialisation, the optimizer, the gradient buckets and the checkpoint files need to know of
// it. They read the row's columns rather than asking which tensor they have, so another model
// family adds rows, not branches. A Llama-family model reuses GPT-2's rows where the meaning
// matches (wte = embed_tokens, ln1w = input_layernorm, qkvw = q_proj, k_proj, v_proj stacked,
// attprojw = o_proj, ln2w = post_attention_layernorm, fcw = gate_proj, up_proj stacked, fcprojw =
// down_proj, lnfw = model.norm) and adds lmhead (lm_head, untied models only); the rows a model's
// features lack (wpe and the biases for Llama, lmhead for GPT-2 and tied Llama) have size 0.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/config.hpp"

namespace mpf {

// llm.c's ParameterTensors in its order, which is the order of the model file (and of the
// optimizer file's m and v), of the state file's checksums and of the rows below.
enum class TensorId : int {
  wte,
  wpe,
  ln1w,
  ln1b,
  qkvw,
  qkvb,
  attprojw,
  attprojb,
  ln2w,
  ln2b,
  fcw,
  fcb,
  fcprojw,
  fcprojb,
  lnfw,
  lnfb,
  lmhead,   // after GPT-2's, so its file order is llm.c's
  q_normw,  // then the features' own tensors: the q and k norms (Qwen3's, OLMo-2's)
  k_normw,
  routerw,   // a mixture of experts' router
  sfcw,      // Qwen2-MoE's shared expert: [gate | up]
  sfcprojw,  // its down projection
  sgatew,    // its gate (a row: sigmoid(x · sgatew) scales its output)
  qaw,       // multi-head latent attention (DeepSeek-V3's): q_a_proj
  qanw,      // q_a_layernorm
  qbw,       // q_b_proj (q_proj without a query rank)
  kvaw,      // kv_a_proj_with_mqa: [latent | shared rotary key]
  kvanw,     // kv_a_layernorm
  kvbw,      // kv_b_proj: each head's [K without rotation | V]
  moebias,   // DeepSeekMoE's e_score_correction_bias: added to the scores for choosing only
  dfcw,      // a mixed model's dense blocks' MLP (first_k_dense_replace): [gate | up]
  dfcprojw,  // its down projection
  mtpenw,    // a multi-token prediction module's enorm (the embedding's RMSNorm)
  mtphnw,    // its hnorm (the previous depth's hidden state's RMSNorm)
  mtpehw,    // its eh_proj: C x [enorm | hnorm] (2C)
  mtpshw     // its shared_head.norm (before the shared LM head)
};
inline constexpr int kNumParameterTensors = 36;

// One dimension of a tensor: `times` times one of the config's sizes.
struct Dim {
  int times;
  enum Of {
    kOne,
    kChannels,
    kPaddedVocab,
    kMaxSeqLen,
    kQkvRows,    // (NH + 2 KVH)·hs: [Q | K | V] (3C for GPT-2)
    kMlpIn,      // the MLP's first layer: [gate | up] 2F (Llama), F = 4C (GPT-2), for each expert
    kMlpOut,     // the MLP's projection: C for each expert
    kExperts,    // E
    kFfn,        // F: the MLP's hidden width
    kAttn,       // NH·hs: the attention's width (C unless the head size is not C/NH)
    kQNorm,      // Q's norm weight: hs (one per head, shared) or NH·hs (the whole projection)
    kKNorm,      // K's: hs or KVH·hs
    kSharedIn,   // the shared expert's [gate | up]: 2 Fs
    kSharedFfn,  // its hidden width Fs
    kQLora,      // MLA: the query rank
    kQIn,        // MLA: q_b_proj's input, the query rank (or C without one)
    kMlaQ,       // MLA: NH·(qk_nope + qk_rope)
    kKvA,        // MLA: the latent and the shared rotary key, kv_lora_rank + qk_rope
    kKvLora,     // MLA: the latent rank
    kMlaKv,      // MLA: NH·(qk_nope + v_head)
  } of;
};

// The feature a model needs to hold a tensor (model/config.hpp); without it the tensor has size 0.
enum class Needs {
  kAll,
  kLearnedPositions,  // a position table: wpe
  kNormShift,         // LayerNorm: its shift (bias)
  kQkvBias,           // biases on Q, K and V
  kLinearBias,        // biases on the output projection and the MLP's layers
  kUntied,            // an LM head that is not wte: lmhead
  kQkNorm,            // q/k norms: q_normw, k_normw
  kMoe,               // a mixture of experts: routerw
  kSharedExpert,      // a shared expert: sfcw, sfcprojw
  kSharedExpertGate,  // its gate: sgatew (Qwen2-MoE's; DeepSeekMoE's shared experts have none)
  kMoeChoiceBias,     // DeepSeekMoE's routing bias: moebias
  kQkvProjection,     // Q, K and V projections: qkvw (all but multi-head latent attention)
  kMla,               // multi-head latent attention: qbw, kvaw, kvanw, kvbw
  kMlaQLora,          // its query rank: qaw, qanw
  kDenseBlocks,       // dense blocks before mixture-of-experts blocks: dfcw, dfcprojw
  kMtp,               // multi-token prediction modules (GPTConfig::mtp): their blocks only
};

// The row blocks of a column-split tensor, each split over TP alike.
enum class RowBlocks {
  kOne,
  kQkv,       // Q (NH·hs), K (KVH·hs), V (KVH·hs)
  kMlpIn,     // [gate | up] (F each) for a gated MLP, else one block; for each expert
  kSharedIn,  // the shared expert's [gate | up] (Fs each)
};

// Which parts of the model use a tensor: which pipeline stages hold it, and which parts of the
// backward write its gradient.
enum class TensorPlace {
  kEmbedding,  // the encoder (first stage)
  kBlocks,     // a slice per transformer block (llm.c's leading L)
  kHead,       // the final LayerNorm (last stage)
  kTied,       // the encoder and the LM head both (the tied token table)
};

// Megatron's tensor-parallel splits of a (rows, cols) = (out, in) tensor.
enum class TpSplit {
  kNone,    // replicated: LayerNorms, wpe, and row-parallel biases (added once, after the sum)
  kColumn,  // output rows split (each of the row blocks, `blocks`)
  kRow,     // input columns split
  kVocab,   // rows of the vocabulary, padded to a multiple of 128·T
};

enum class TensorInit { kNormal, kZero, kOne };

struct TensorSpec {
  TensorId id;
  const char* name;  // llm.c's; also the RNG stream and the state file's checksum key
  TensorPlace place;
  Dim rows, cols;  // one block's slice for kBlocks; a vector is one column
  TpSplit split;
  RowBlocks blocks;  // kColumn: the row blocks, each split alike
  TensorInit init;
  bool residual;      // kNormal: a residual projection, its std scaled by 1/sqrt(2L) (GPT-2)
  bool weight_decay;  // AdamW decays the matrices only
  Needs needs;

  constexpr bool per_layer() const { return place == TensorPlace::kBlocks; }
  constexpr bool in_embedding() const {
    return place == TensorPlace::kEmbedding || place == TensorPlace::kTied;
  }
  constexpr bool in_head() const {
    return place == TensorPlace::kHead || place == TensorPlace::kTied;
  }
  constexpr bool tied() const { return place == TensorPlace::kTied; }
};

namespace tensor_table {  // short names for the table
using P = TensorPlace;
using S = TpSplit;
using I = TensorInit;
using T = TensorId;
using N = Needs;
using B = RowBlocks;
inline constexpr Dim one{1, Dim::kOne}, C{1, Dim::kChannels}, QKV{1, Dim::kQkvRows},
    MLP{1, Dim::kMlpIn}, FFN{1, Dim::kFfn}, Vp{1, Dim::kPaddedVocab}, maxT{1, Dim::kMaxSeqLen},
    ATT{1, Dim::kAttn}, QN{1, Dim::kQNorm}, KN{1, Dim::kKNorm}, MLPO{1, Dim::kMlpOut},
    E{1, Dim::kExperts}, SIN{1, Dim::kSharedIn}, SF{1, Dim::kSharedFfn}, QLR{1, Dim::kQLora},
    QIN{1, Dim::kQIn}, MQ{1, Dim::kMlaQ}, KVA{1, Dim::kKvA}, KVR{1, Dim::kKvLora},
    MKV{1, Dim::kMlaKv}, C2{2, Dim::kChannels};
// Every tensor's row, in llm.c's order.
// clang-format off
inline constexpr std::array<TensorSpec, kNumParameterTensors> kTensors{{
// id           name        place          rows  cols split       blocks     init        residual decay  needs
  {T::wte,      "wte",      P::kTied,      Vp,   C,   S::kVocab,  B::kOne,   I::kNormal, false,   true,  N::kAll},
  {T::wpe,      "wpe",      P::kEmbedding, maxT, C,   S::kNone,   B::kOne,   I::kNormal, false,   true,  N::kLearnedPositions},
  {T::ln1w,     "ln1w",     P::kBlocks,    C,    one, S::kNone,   B::kOne,   I::kOne,    false,   false, N::kAll},
  {T::ln1b,     "ln1b",     P::kBlocks,    C,    one, S::kNone,   B::kOne,   I::kZero,   false,   false, N::kNormShift},
  {T::qkvw,     "qkvw",     P::kBlocks,    QKV,  C,   S::kColumn, B::kQkv,   I::kNormal, false,   true,  N::kQkvProjection},
  {T::qkvb,     "qkvb",     P::kBlocks,    QKV,  one, S::kColumn, B::kQkv,   I::kZero,   false,   false, N::kQkvBias},
  {T::attprojw, "attprojw", P::kBlocks,    C,    ATT, S::kRow,    B::kOne,   I::kNormal, true,    true,  N::kAll},
  {T::attprojb, "attprojb", P::kBlocks,    C,    one, S::kNone,   B::kOne,   I::kZero,   false,   false, N::kLinearBias},
  {T::ln2w,     "ln2w",     P::kBlocks,    C,    one, S::kNone,   B::kOne,   I::kOne,    false,   false, N::kAll},
  {T::ln2b,     "ln2b",     P::kBlocks,    C,    one, S::kNone,   B::kOne,   I::kZero,   false,   false, N::kNormShift},
  {T::fcw,      "fcw",      P::kBlocks,    MLP,  C,   S::kColumn, B::kMlpIn, I::kNormal, false,   true,  N::kAll},
  {T::fcb,      "fcb",      P::kBlocks,    MLP,  one, S::kColumn, B::kMlpIn, I::kZero,   false,   false, N::kLinearBias},
  {T::fcprojw,  "fcprojw",  P::kBlocks,    MLPO, FFN, S::kRow,    B::kOne,   I::kNormal, true,    true,  N::kAll},
  {T::fcprojb,  "fcprojb",  P::kBlocks,    C,    one, S::kNone,   B::kOne,   I::kZero,   false,   false, N::kLinearBias},
  {T::lnfw,     "lnfw",     P::kHead,      C,    one, S::kNone,   B::kOne,   I::kOne,    false,   false, N::kAll},
  {T::lnfb,     "lnfb",     P::kHead,      C,    one, S::kNone,   B::kOne,   I::kZero,   false,   false, N::kNormShift},
  {T::lmhead,   "lmhead",   P::kHead,      Vp,   C,   S::kVocab,  B::kOne,   I::kNormal, false,   true,  N::kUntied},
  {T::q_normw,  "q_normw",  P::kBlocks,    QN,   one, S::kNone,   B::kOne,   I::kOne,    false,   false, N::kQkNorm},
  {T::k_normw,  "k_normw",  P::kBlocks,    KN,   one, S::kNone,   B::kOne,   I::kOne,    false,   false, N::kQkNorm},
  {T::routerw,  "routerw",  P::kBlocks,    E,    C,   S::kNone,   B::kOne,   I::kNormal, false,   true,  N::kMoe},
  {T::sfcw,     "sfcw",     P::kBlocks,    SIN,  C,   S::kColumn, B::kSharedIn, I::kNormal, false, true, N::kSharedExpert},
  {T::sfcprojw, "sfcprojw", P::kBlocks,    C,    SF,  S::kRow,    B::kOne,   I::kNormal, true,    true,  N::kSharedExpert},
  {T::sgatew,   "sgatew",   P::kBlocks,    one,  C,   S::kNone,   B::kOne,   I::kNormal, false,   true,  N::kSharedExpertGate},
  {T::qaw,      "qaw",      P::kBlocks,    QLR,  C,   S::kNone,   B::kOne,   I::kNormal, false,   true,  N::kMlaQLora},
  {T::qanw,     "qanw",     P::kBlocks,    QLR,  one, S::kNone,   B::kOne,   I::kOne,    false,   false, N::kMlaQLora},
  {T::qbw,      "qbw",      P::kBlocks,    MQ,   QIN, S::kColumn, B::kOne,   I::kNormal, false,   true,  N::kMla},
  {T::kvaw,     "kvaw",     P::kBlocks,    KVA,  C,   S::kNone,   B::kOne,   I::kNormal, false,   true,  N::kMla},
  {T::kvanw,    "kvanw",    P::kBlocks,    KVR,  one, S::kNone,   B::kOne,   I::kOne,    false,   false, N::kMla},
  {T::kvbw,     "kvbw",     P::kBlocks,    MKV,  KVR, S::kColumn, B::kOne,   I::kNormal, false,   true,  N::kMla},
  // A buffer, not a weight: nothing writes its gradient and it is not decayed, so AdamW leaves it
  // (m = v = 0); the balancing's bias update alone moves it.
  {T::moebias,  "moebias",  P::kBlocks,    E,    one, S::kNone,   B::kOne,   I::kZero,   false,   false, N::kMoeChoiceBias},
  // A mixed model's dense blocks hold these in place of fcw and fcprojw (which only its
  // mixture-of-experts blocks hold), with fcw's and fcprojw's shapes in a dense block
  // (GPTConfig::block_config): so fcw is always the experts', and the blocks' views call them
  // fcw and fcprojw (model/parameters.cpp).
  {T::dfcw,     "dfcw",     P::kBlocks,    MLP,  C,   S::kColumn, B::kMlpIn, I::kNormal, false,   true,  N::kDenseBlocks},
  {T::dfcprojw, "dfcprojw", P::kBlocks,    MLPO, FFN, S::kRow,    B::kOne,   I::kNormal, true,    true,  N::kDenseBlocks},
  // The multi-token prediction modules' own rows, held by their blocks only (present_in_block);
  // replicated over TP.
  {T::mtpenw,   "mtpenw",   P::kBlocks,    C,    one, S::kNone,   B::kOne,   I::kOne,    false,   false, N::kMtp},
  {T::mtphnw,   "mtphnw",   P::kBlocks,    C,    one, S::kNone,   B::kOne,   I::kOne,    false,   false, N::kMtp},
  {T::mtpehw,   "mtpehw",   P::kBlocks,    C,    C2,  S::kNone,   B::kOne,   I::kNormal, false,   true,  N::kMtp},
  {T::mtpshw,   "mtpshw",   P::kBlocks,    C,    one, S::kNone,   B::kOne,   I::kOne,    false,   false, N::kMtp},
}};
// clang-format on

constexpr bool rows_in_id_order() {
  for (int i = 0; i < kNumParameterTensors; ++i) {
    if (int(kTensors[size_t(i)].id) != i) return false;
  }
  return true;
}
static_assert(rows_in_id_order(), "the table's rows are in TensorId (file) order");
}  // namespace tensor_table

using tensor_table::kTensors;

constexpr const TensorSpec& tensor_spec(TensorId t) {
  return kTensors[size_t(t)];
}

// A value per tensor, indexed by TensorId.
template <class T>
struct PerTensor {
  std::array<T, kNumParameterTensors> values{};
  T& operator[](TensorId t) { return values[size_t(t)]; }
  const T& operator[](TensorId t) const { return values[size_t(t)]; }
};

// Does a model of `cfg` hold tensor t at all (in any block)?
bool present(TensorId t, const GPTConfig& cfg);
// Does block `layer` of it hold per-layer tensor t? Every block of a model that does not mix dense
// and mixture-of-experts blocks; else a dense block the dense tensors and dfcw, dfcprojw, and an
// experts' block the others.
bool present_in_block(TensorId t, const GPTConfig& cfg, int layer);
// Where tensor t lives in a model of `cfg`: wte is kTied only when the model ties its head or
// has multi-token prediction modules (which embed on the head's stage).
TensorPlace place_of(TensorId t, const GPTConfig& cfg);
// The row counts of a column-split tensor's blocks, in the serial tensor (one block's slice for
// a per-layer tensor): at most three ([Q | K | V]), kept in place (the shard asks for them per
// element), the pattern repeated `repeat` times (an MLP's [gate | up] once per expert); the sum
// of all is its rows.
struct RowBlockSizes {
  std::array<int64_t, 3> rows{};
  int count = 0;
  int repeat = 1;
  const int64_t* begin() const { return rows.data(); }
  const int64_t* end() const { return rows.data() + count; }
};
RowBlockSizes row_block_sizes(const TensorSpec& s, const GPTConfig& cfg);
// The same as a vector, the repeats written out.
std::vector<int64_t> row_blocks(const TensorSpec& s, const GPTConfig& cfg);

// `d` for `cfg`; with padded = false the vocabulary rows without the padding.
int64_t dim_size(Dim d, const GPTConfig& cfg, bool padded = true);
// Elements of tensor t in the serial model (every block; the padded vocabulary rows included).
int64_t tensor_size(TensorId t, const GPTConfig& cfg);
// The same without the padded vocabulary rows, which hold no parameter.
int64_t unpadded_size(TensorId t, const GPTConfig& cfg);
// A per-layer tensor's elements in block `layer` of the serial model: the same in every block
// unless the model mixes dense and mixture-of-experts blocks (GPTConfig::block_config), where a
// block lacks the tensors its kind lacks and its MLP has its kind's shape. The serial tensor holds
// the blocks' slices one after the other, block `layer`'s from layer_offset on.
int64_t block_tensor_size(TensorId t, const GPTConfig& cfg, int layer);
int64_t layer_offset(TensorId t, const GPTConfig& cfg, int layer);
// The std of a kNormal tensor: 0.02, scaled by 1/sqrt(2L) for a residual projection of GPT-2
// (Hugging Face's Llama initialises every matrix with std 0.02, unscaled).
float init_std(const TensorSpec& s, const GPTConfig& cfg);

}  // namespace mpf
