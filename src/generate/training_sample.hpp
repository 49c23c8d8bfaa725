// mpiformer-train --sample-every N: a greedy sample of the model being trained, printed by world
// rank 0 every N steps, as llm.c prints one while it trains. It starts from the tokenizer's
// end-of-text token (llm.c's start), else from GPT-2's 50256 for a 50257-token vocabulary, else
// from a newline (byte 10: a line start in byte-level text).
//
// The TP group of data-parallel rank 0 runs it collectively on its own shards through the same
// Decoder as mpiformer-generate (the other DP ranks hold the same parameters and skip it). It
// reads the parameters and writes only its own buffers, so training's numbers do not change.
// Pipeline layouts are refused at start-up: a stage holds only its blocks.
#pragma once

#include <mpi.h>

#include <memory>
#include <optional>

#include "generate/decoder.hpp"
#include "generate/sampler.hpp"
#include "io/llmc_tokenizer.hpp"

namespace mpf {

class TrainingSample {
 public:
  // `runs`: this rank is in the TP group that samples. Allocates the decoder's buffers there.
  TrainingSample(const TpShard& shard, const ParameterTensors& params, int tokens,
                 std::optional<Tokenizer> tokenizer, const ModelGroups& groups, bool runs,
                 bool prints);
  // Collective over the groups' tp on the ranks that run it; a no-op on the others.
  void print(int step);

 private:
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<TokenSampler> sampler_;  // greedy
  int tokens_;
  std::optional<Tokenizer> tokenizer_;
  bool prints_;
};

// The token a sample starts from (see above).
int32_t sample_start_token(const Tokenizer* tokenizer, int vocab);

}  // namespace mpf
