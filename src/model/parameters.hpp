// GPT-2's parameters (llm.c's ParameterTensors) as views into one slab. The tensors keep
// llm.c's names, shapes and order (model/tensors.hpp), which stay the order on disk (the
// checkpoint files) and of initialisation; the slab itself is layer-major:
//   wte | wpe | block 0: ln1w ln1b qkvw qkvb attprojw attprojb ln2w ln2b fcw fcb fcprojw fcprojb
//       | block 1 ... | block L-1 | lnfw | lnfb | zero padding
// so one block's parameters, and its gradients in the second slab laid out alike, are one
// contiguous stretch. The backward finishes block by block, and a data-parallel bucket holding a
// block's gradients can start its reduction as soon as that block's W is done
// (optim/grad_buckets.hpp), as Megatron's buckets do over its per-layer parameters.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/types.hpp"
#include "model/config.hpp"
#include "model/tensors.hpp"

namespace mpf {

// One block's slice of each per-layer tensor (llm.c's shapes without the L).
struct LayerParameters {
  Tensor ln1w;      // (C)
  Tensor ln1b;      // (C)
  Tensor qkvw;      // ((NH+2KVH)·hs, C) rows: [Q | K | V], head h = rows h*hs..(h+1)*hs of each
  Tensor qkvb;      // (3C) GPT-2 only
  Tensor attprojw;  // (C, NH·hs)
  Tensor attprojb;  // (C)
  Tensor ln2w;      // (C)
  Tensor ln2b;      // (C)
  Tensor fcw;       // (4C, C) GPT-2; (2F, C) Llama: rows [gate | up]; (E, 2F, C) experts
  Tensor fcb;       // (4C)
  Tensor fcprojw;   // (C, F); (E, C, F) experts
  Tensor fcprojb;   // (C)
  Tensor q_normw;   // (hs) Qwen3's per-head RMSNorm of Q (shared by the heads)
  Tensor k_normw;   // (hs) and of K
  Tensor routerw;   // (E, C) a mixture of experts' router
  Tensor sfcw;      // (2Fs, C) Qwen2-MoE's shared expert: rows [gate | up]
  Tensor sfcprojw;  // (C, Fs)
  Tensor sgatew;    // (C) its gate's row
  // Multi-head latent attention (model/mla.hpp), in place of qkvw; r_q, r_kv the latent ranks,
  // dn, dr, dv the no-rope, rope and V head sizes:
  Tensor qaw;      // (r_q, C) q_a_proj
  Tensor qanw;     // (r_q) q_a_layernorm
  Tensor qbw;      // (NH·(dn + dr), r_q) q_b_proj (or (.., C) q_proj without r_q), by head
  Tensor kvaw;     // (r_kv + dr, C) kv_a_proj_with_mqa
  Tensor kvanw;    // (r_kv) kv_a_layernorm
  Tensor kvbw;     // (NH·(dn + dv), r_kv) kv_b_proj, each head's [K | V]
  Tensor moebias;  // (E) DeepSeekMoE's routing bias (e_score_correction_bias), never trained
  // A multi-token prediction module's block only (model/mtp.hpp), else empty:
  Tensor mtpenw;  // (C) enorm
  Tensor mtphnw;  // (C) hnorm
  Tensor mtpehw;  // (C, 2C) eh_proj over [enorm(embedding) | hnorm(h)]
  Tensor mtpshw;  // (C) shared_head.norm
};

class BlockGate;

struct ParameterTensors {
  Tensor wte;                           // (Vp, C) token embedding, also the LM head
  Tensor wpe;                           // (maxT, C) position embedding
  std::vector<LayerParameters> blocks;  // this rank's blocks, in model order
  Tensor lnfw;                          // (C)
  Tensor lnfb;                          // (C)
  Tensor lmhead;                        // (Vp, C) an untied model's LM head; else empty
  // ZeRO-2/3 (optim/sharded_blocks.hpp): told before a block's views are read or its gradients
  // written, it points them at whole copies; null: the views are the slab's, always whole.
  BlockGate* gate = nullptr;
};

// A stretch of the slab holding one tensor, or one block's slice of a per-layer tensor.
struct SlabPiece {
  TensorId tensor = TensorId::wte;
  int block = -1;      // local block of a per-layer tensor's slice; -1 for the others
  int64_t offset = 0;  // in the slab
  int64_t length = 0;
  int64_t first = 0;  // index in the local tensor of the piece's first element
};

struct TpShard;

// Where each local tensor element sits in the slab (the layer-major order above). Checkpoint
// I/O, initialisation and the optimizer address tensors through it; the model through the views.
class SlabLayout {
 public:
  SlabLayout() = default;
  // sizes: the local sizes of the tensors; blocks: the local blocks (per-layer tensors hold
  // sizes[t] / blocks elements per block).
  SlabLayout(const PerTensor<int64_t>& sizes, int blocks);
  // The local sizes of the tensors and, for the per-layer ones, each local block's (which differ
  // between a mixed model's dense and experts' blocks).
  SlabLayout(const PerTensor<int64_t>& sizes, const std::vector<PerTensor<int64_t>>& block_sizes);
  // A shard's: its tensors, block by block.
  static SlabLayout of(const TpShard& shard);
  // of(shard)'s count() and each block's stretch length, without building its pieces: the
  // planner asks them of millions of layouts.
  static int64_t count_of(const TpShard& shard);
  static std::vector<int64_t> block_lengths(const TpShard& shard);

  int64_t count() const { return count_; }  // without padding
  int blocks() const { return blocks_; }
  // The pieces in slab order; empty tensors have none.
  const std::vector<SlabPiece>& pieces() const { return pieces_; }
  // The piece holding slab position `offset` (< count()).
  const SlabPiece& piece_at(int64_t offset) const;
  // Local block `block`'s stretch of the slab: [first, second).
  std::pair<int64_t, int64_t> block_range(int block) const;
  // Local elements [j, j + n) of `tensor` as slab stretches: f(local index, slab offset, length),
  // in ascending order.
  template <class F>
  void for_each_run(TensorId tensor, int64_t j, int64_t n, F&& f) const {
    const std::vector<int64_t>& first = first_[tensor];  // per-layer: each block's first element
    while (n > 0) {
      if (first.empty()) {  // not per layer: one stretch
        f(j, start_[tensor] + j, n);
        return;
      }
      const size_t b = size_t(std::upper_bound(first.begin(), first.end(), j) - first.begin()) - 1;
      const int64_t left = first[b + 1] - j, len = n < left ? n : left;
      f(j, block_start_[b] + in_block_[tensor][b] + (j - first[b]), len);
      j += len;
      n -= len;
    }
  }

 private:
  PerTensor<int64_t> start_;  // tensors that are not per layer: slab offset of element 0
  // Per-layer tensors: the local index of each block's first element (blocks + 1 values) and the
  // tensor's offset within each block's stretch, which starts at block_start_.
  PerTensor<std::vector<int64_t>> first_, in_block_;
  std::vector<int64_t> block_start_;
  int64_t count_ = 0;
  int blocks_ = 0;
  std::vector<SlabPiece> pieces_;
};

struct TpShard;

// One slab and its named views: the whole model, or one tensor-parallel rank's (and pipeline
// stage's) shard of it.
struct Parameters {
  GPTConfig cfg;             // the full model
  PerTensor<int64_t> sizes;  // local sizes of the tensors
  SlabLayout layout;
  Slab slab;
  ParameterTensors t;
  int64_t count = 0;

  // Allocates a zeroed slab for `shard`'s part of the model; `label` names it ("mpf::params").
  // The slab is padded with zeros to a multiple of pad_to (the DP size, for ZeRO's even shards).
  static Parameters allocate(const TpShard& shard, const std::string& label, int pad_to = 1);
  // The floats allocate() gives the slab: the shard's parameters padded to a multiple of pad_to.
  static int64_t slab_floats(const TpShard& shard, int pad_to = 1);
  // The whole model (one rank, no tensor parallelism).
  static Parameters allocate(const GPTConfig& cfg, const std::string& label);

  // As allocate(), but the blocks' stretch of the slab is left untouched (not zeroed): on the
  // host its pages take no memory until written. ZeRO-2's gradients and ZeRO-3's parameters
  // write only this rank's shard of it.
  static Parameters allocate_sparse_blocks(const TpShard& shard, const std::string& label,
                                           int pad_to);

  // One piece of the slab as a tensor.
  Tensor view(const SlabPiece& piece) const {
    return Tensor(slab.data() + piece.offset, piece.length);
  }
};

// Fills every tensor from (seed, tensor name, element index) with a counter-based RNG
// (docs/design.md, invariant 1). The index is the element's position in the serial, unpadded tensor
// (the shard maps local to global), and padded token rows are zero, so no value depends on padding,
// on the slab's layout or on which rank holds it.
void initialize(Parameters& params, const TpShard& shard, uint64_t seed);
void initialize(Parameters& params, uint64_t seed);
// The same, the blocks' pieces only inside `blocks_within` (slab ranges [first, second), ZeRO-3:
// this rank's shard); the rest of the blocks' stretch is not written.
void initialize(Parameters& params, const TpShard& shard, uint64_t seed,
                const std::vector<std::pair<int64_t, int64_t>>& blocks_within);

// Points local block `block`'s views in `t` at `stretch`, a copy of its slab stretch
// (layout.block_range(block)); with `stretch` the slab's own place there, back at the slab.
void point_block(ParameterTensors& t, const SlabLayout& layout, int block, float* stretch);

}  // namespace mpf
