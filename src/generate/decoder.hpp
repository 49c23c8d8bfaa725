// GPT-2's forward for generating one sequence on a tensor-parallel rank: the prompt in one pass,
// then one position per new token, each block attending over its KV cache (kv_cache.hpp). It runs
// the training model's own pieces on the rank's shard (the vocab-parallel embedding, gpt.hpp's
// block_forward with the cached attention as its core, the tied vocab-parallel head) and
// communicates over `tp` only through the TP regions. With a 1-rank `tp` it is the serial model.
//
// Without the cache (kv_cache = false) every append runs the training forward over the whole
// sequence so far: the baseline the cache is checked and timed against. That path allocates the
// activations of the sequence's length on each call.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "core/types.hpp"
#include "generate/kv_cache.hpp"
#include "model/activations.hpp"
#include "model/parameters.hpp"

namespace mpf {

class Decoder {
 public:
  // `params` are the rank's shard of the whole model (no pipeline stages); `capacity` is the
  // longest sequence this decoder will hold (at most the model's max_seq_len). Allocates the
  // cache and one block's worth of activations for `capacity` rows. `groups`: the run's (its TP
  // group, and its EP group, which a mixture of experts' tokens are exchanged over).
  Decoder(const TpShard& shard, const ParameterTensors& params, int capacity,
          const ModelGroups& groups, bool kv_cache = true);

  // Collective over tp (and EP). Appends `tokens` (at least one; length() + tokens.size() <=
  // capacity()) and returns the logits that follow the last of them: this rank's vocabulary shard,
  // Vl floats, of which the columns >= V are padding.
  Tensor append(const std::vector<int32_t>& tokens);
  // Forgets the sequence (the next append starts at position 0).
  void reset() { length_ = 0; }
  int length() const { return length_; }
  int capacity() const { return capacity_; }
  bool kv_cache() const { return kv_cache_; }
  const TpShard& shard() const { return shard_; }
  const KVCache& cache() const { return cache_; }

 private:
  // The blocks over the n positions [length_ - n, length_), from the embedded input x (n,C);
  // returns the last block's output (n,C).
  Tensor cached_blocks(Tensor x, int n);
  // The training forward over the whole sequence, then the head on its last position.
  Tensor recompute();
  // The head on one row (1,C): final LayerNorm, then this rank's logits (in head_slab_).
  Tensor head(Tensor row);

  TpShard shard_;
  ParameterTensors params_;
  ModelGroups groups_;
  MPI_Comm tp_;
  bool kv_cache_;
  int capacity_;
  int length_ = 0;
  KVCache cache_;
  Slab latent_scratch_;     // MLA's absorbed queries and outputs (mla_cached_attention_forward)
  Activations work_;        // one block's activations for `capacity` rows, reused by every block
  Slab head_slab_;          // lnf (C), its mean and rstd, logits (Vl)
  Tokens tokens_;           // (capacity) the sequence on the device
  HostTokens host_tokens_;  // the same on the host
};

}  // namespace mpf
