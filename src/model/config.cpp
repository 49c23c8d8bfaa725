#include "model/config.hpp"

#include <cstdio>

#include "core/error.hpp"
#include "model/tensors.hpp"

namespace mpf {

int pad_vocab(int vocab, int multiple) {
  return (vocab + multiple - 1) / multiple * multiple;
}

void validate(const GPTConfig& cfg, const std::string& origin) {
  auto positive = [&](int value, const char* what, const char* flag) {
    require(value > 0, std::string(what) + " must be positive, got " + std::to_string(value) +
                           " (from " + origin + "); set " + flag + " to a positive value");
  };
  positive(cfg.layers, "the number of layers", "--layers");
  positive(cfg.heads, "the number of heads", "--heads");
  positive(cfg.channels, "the channel count", "--dim");
  positive(cfg.vocab, "the vocabulary size", "--vocab");
  positive(cfg.max_seq_len, "max_seq_len", "--max-seq-len");
  require(cfg.channels % cfg.heads == 0, "channels " + std::to_string(cfg.channels) +
                                             " do not divide into " + std::to_string(cfg.heads) +
                                             " heads (from " + origin +
                                             "); choose --dim a multiple of --heads");
  require(cfg.padded_vocab >= cfg.vocab, "padded vocabulary " + std::to_string(cfg.padded_vocab) +
                                             " is smaller than vocabulary " +
                                             std::to_string(cfg.vocab) + " (from " + origin + ")");
}

int64_t parameter_count(const GPTConfig& cfg) {
  int64_t n = 0;
  for (const TensorSpec& s : kTensors) n += tensor_size(s.id, cfg);
  return n;
}

std::string describe(const GPTConfig& cfg) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "L%d H%d C%d V%d (padded %d) maxT %d", cfg.layers, cfg.heads,
                cfg.channels, cfg.vocab, cfg.padded_vocab, cfg.max_seq_len);
  return buf;
}

bool same_shape(const GPTConfig& a, const GPTConfig& b) {
  return a.max_seq_len == b.max_seq_len && a.vocab == b.vocab && a.padded_vocab == b.padded_vocab &&
         a.layers == b.layers && a.heads == b.heads && a.channels == b.channels;
}

}  // namespace mpf
