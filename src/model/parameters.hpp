// GPT-2's parameters as named tensors over one slab (llm.c's ParameterTensors), in llm.c's
// checkpoint order, so the slab is the checkpoint body and the DP all-reduce is one buffer.
// Gradients use the same struct over a second slab.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/types.hpp"
#include "model/config.hpp"

namespace mpf {

inline constexpr int kNumParameterTensors = 16;

struct ParameterTensors {
  Tensor wte;       // (Vp, C) token embedding, also the LM head
  Tensor wpe;       // (maxT, C) position embedding
  Tensor ln1w;      // (L, C)
  Tensor ln1b;      // (L, C)
  Tensor qkvw;      // (L, 3C, C) rows: [Q | K | V], head h = rows h*hs..(h+1)*hs of each block
  Tensor qkvb;      // (L, 3C)
  Tensor attprojw;  // (L, C, C)
  Tensor attprojb;  // (L, C)
  Tensor ln2w;      // (L, C)
  Tensor ln2b;      // (L, C)
  Tensor fcw;       // (L, 4C, C)
  Tensor fcb;       // (L, 4C)
  Tensor fcprojw;   // (L, C, 4C)
  Tensor fcprojb;   // (L, C)
  Tensor lnfw;      // (C)
  Tensor lnfb;      // (C)

  // The tensors in llm.c order, for loops over all of them.
  std::array<Tensor*, kNumParameterTensors> list();
};

// How a tensor is initialised and optimised (GPT-2's scheme).
struct ParameterInfo {
  const char* name;
  enum class Init { Normal, Zero, One } init;
  float std;          // for Normal
  bool weight_decay;  // AdamW decays the matrices only
};

// Sizes (elements) of the 16 tensors, in llm.c order.
std::array<int64_t, kNumParameterTensors> parameter_sizes(const GPTConfig& cfg);
// Name, init and decay of each tensor, in llm.c order: normal(0, 0.02) for weights, with the
// residual projections (attprojw, fcprojw) scaled by 1/sqrt(2L); zero biases; LayerNorm 1 / 0.
std::array<ParameterInfo, kNumParameterTensors> parameter_infos(const GPTConfig& cfg);

struct TpShard;

// One slab and its named views: the whole model, or one tensor-parallel rank's shard of it.
struct Parameters {
  GPTConfig cfg;                                      // the full model
  std::array<int64_t, kNumParameterTensors> sizes{};  // local sizes of the 16 tensors
  Slab slab;
  ParameterTensors t;
  int64_t count = 0;

  // Allocates a zeroed slab for `shard`'s part of the model; `label` names it ("mpf::params").
  // The slab is padded with zeros to a multiple of pad_to (the DP size, for ZeRO's even shards).
  static Parameters allocate(const TpShard& shard, const std::string& label, int pad_to = 1);
  // The whole model (one rank, no tensor parallelism).
  static Parameters allocate(const GPTConfig& cfg, const std::string& label);
};

// Fills every tensor from (seed, tensor name, element index) with a counter-based RNG (DESIGN.md
// invariant 1). The index is the element's position in the serial, unpadded tensor (the shard
// maps local to global), and padded token rows are zero, so no value depends on padding or on
// which rank holds it.
void initialize(Parameters& params, const TpShard& shard, uint64_t seed);
void initialize(Parameters& params, uint64_t seed);

}  // namespace mpf
