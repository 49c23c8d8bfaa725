#include "model/tensors.hpp"

#include <cmath>

namespace mpf {

int64_t dim_size(Dim d, const GPTConfig& cfg, bool padded) {
  int64_t n = 1;
  switch (d.of) {
    case Dim::kOne:
      break;
    case Dim::kChannels:
      n = cfg.channels;
      break;
    case Dim::kPaddedVocab:
      n = padded ? cfg.padded_vocab : cfg.vocab;
      break;
    case Dim::kMaxSeqLen:
      n = cfg.max_seq_len;
      break;
  }
  return d.times * n;
}

namespace {
int64_t elements(TensorId t, const GPTConfig& cfg, bool padded) {
  const TensorSpec& s = tensor_spec(t);
  return (s.per_layer() ? cfg.layers : 1) * dim_size(s.rows, cfg, padded) *
         dim_size(s.cols, cfg, padded);
}
}  // namespace

int64_t tensor_size(TensorId t, const GPTConfig& cfg) {
  return elements(t, cfg, true);
}

int64_t unpadded_size(TensorId t, const GPTConfig& cfg) {
  return elements(t, cfg, false);
}

float init_std(const TensorSpec& s, const GPTConfig& cfg) {
  return s.residual ? 0.02f / std::sqrt(2.0f * cfg.layers) : 0.02f;
}

}  // namespace mpf
