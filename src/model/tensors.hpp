// The parameter tensors as data: one row per tensor, GPT-2's in llm.c's order, with what sharding,
// initialisation, the optimizer, the gradient buckets and the checkpoint files need to know of
// it. They read the row's columns rather than asking which tensor they have, so another model
// family adds rows, not branches.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

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
  lnfb
};
inline constexpr int kNumParameterTensors = 16;

// One dimension of a tensor: `times` times one of the config's sizes.
struct Dim {
  int times;
  enum Of { kOne, kChannels, kPaddedVocab, kMaxSeqLen } of;
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
  kColumn,  // output rows split (each of the row blocks, `parts`)
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
  int parts;  // kColumn: the rows are `parts` blocks (qkv's Q, K, V), each split alike
  TensorInit init;
  bool residual;      // kNormal: a residual projection, its std scaled by 1/sqrt(2L) (GPT-2)
  bool weight_decay;  // AdamW decays the matrices only

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
inline constexpr Dim one{1, Dim::kOne}, C{1, Dim::kChannels}, C3{3, Dim::kChannels},
    C4{4, Dim::kChannels}, Vp{1, Dim::kPaddedVocab}, maxT{1, Dim::kMaxSeqLen};
// Every tensor's row, in llm.c's order.
// clang-format off
inline constexpr std::array<TensorSpec, kNumParameterTensors> kTensors{{
// id           name        place          rows  cols split       parts init        residual decay
  {T::wte,      "wte",      P::kTied,      Vp,   C,   S::kVocab,  1,    I::kNormal, false,   true},
  {T::wpe,      "wpe",      P::kEmbedding, maxT, C,   S::kNone,   1,    I::kNormal, false,   true},
  {T::ln1w,     "ln1w",     P::kBlocks,    C,    one, S::kNone,   1,    I::kOne,    false,   false},
  {T::ln1b,     "ln1b",     P::kBlocks,    C,    one, S::kNone,   1,    I::kZero,   false,   false},
  {T::qkvw,     "qkvw",     P::kBlocks,    C3,   C,   S::kColumn, 3,    I::kNormal, false,   true},
  {T::qkvb,     "qkvb",     P::kBlocks,    C3,   one, S::kColumn, 3,    I::kZero,   false,   false},
  {T::attprojw, "attprojw", P::kBlocks,    C,    C,   S::kRow,    1,    I::kNormal, true,    true},
  {T::attprojb, "attprojb", P::kBlocks,    C,    one, S::kNone,   1,    I::kZero,   false,   false},
  {T::ln2w,     "ln2w",     P::kBlocks,    C,    one, S::kNone,   1,    I::kOne,    false,   false},
  {T::ln2b,     "ln2b",     P::kBlocks,    C,    one, S::kNone,   1,    I::kZero,   false,   false},
  {T::fcw,      "fcw",      P::kBlocks,    C4,   C,   S::kColumn, 1,    I::kNormal, false,   true},
  {T::fcb,      "fcb",      P::kBlocks,    C4,   one, S::kColumn, 1,    I::kZero,   false,   false},
  {T::fcprojw,  "fcprojw",  P::kBlocks,    C,    C4,  S::kRow,    1,    I::kNormal, true,    true},
  {T::fcprojb,  "fcprojb",  P::kBlocks,    C,    one, S::kNone,   1,    I::kZero,   false,   false},
  {T::lnfw,     "lnfw",     P::kHead,      C,    one, S::kNone,   1,    I::kOne,    false,   false},
  {T::lnfb,     "lnfb",     P::kHead,      C,    one, S::kNone,   1,    I::kZero,   false,   false},
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

// `d` for `cfg`; with padded = false the vocabulary rows without the padding.
int64_t dim_size(Dim d, const GPTConfig& cfg, bool padded = true);
// Elements of tensor t in the serial model (every block; the padded vocabulary rows included).
int64_t tensor_size(TensorId t, const GPTConfig& cfg);
// The same without the padded vocabulary rows, which hold no parameter.
int64_t unpadded_size(TensorId t, const GPTConfig& cfg);
// The std of a kNormal tensor: 0.02, scaled by 1/sqrt(2L) for a residual projection.
float init_std(const TensorSpec& s, const GPTConfig& cfg);

}  // namespace mpf
