#include "generate/training_sample.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "generate/token_text.hpp"

namespace mpf {

int32_t sample_start_token(const Tokenizer* tokenizer, int vocab) {
  if (tokenizer && tokenizer->eot >= 0) return tokenizer->eot;
  if (vocab == 50257) return 50256;  // GPT-2's end-of-text
  return vocab > '\n' ? '\n' : 0;
}

TrainingSample::TrainingSample(const TpShard& shard, const ParameterTensors& params, int tokens,
                               std::optional<Tokenizer> tokenizer, const ModelGroups& groups,
                               bool runs, bool prints)
    : tokens_(tokens), tokenizer_(std::move(tokenizer)), prints_(prints) {
  if (!runs) return;
  // The start token and each new one but the last are fed.
  const int capacity = std::min(shard.cfg.max_seq_len, tokens);
  decoder_ = std::make_unique<Decoder>(shard, params, capacity, groups);
  sampler_ = std::make_unique<TokenSampler>(shard, Sampling{}, groups.tp);
}

void TrainingSample::print(int step) {
  if (!decoder_) return;
  const Tokenizer* tokenizer = tokenizer_ ? &*tokenizer_ : nullptr;
  const int vocab = decoder_->shard().cfg.vocab;
  TokenText text(tokenizer, vocab);
  const int32_t start = sample_start_token(tokenizer, vocab);
  decoder_->reset();
  Tensor logits = decoder_->append({start});
  std::string out;
  int generated = 0;
  for (;;) {
    const int32_t id = sampler_->next(logits, uint64_t(generated));
    ++generated;
    if (tokenizer && id == tokenizer->eot) break;
    out += text.next(id);
    if (generated == tokens_ || decoder_->length() == decoder_->capacity()) break;
    logits = decoder_->append({id});
  }
  if (!prints_) return;
  std::printf("sample after step %d (greedy, %d tokens from token %d):\n---\n%s\n---\n", step,
              generated, int(start), out.c_str());
  std::fflush(stdout);
}

}  // namespace mpf
