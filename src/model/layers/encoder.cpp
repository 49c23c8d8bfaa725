#include "model/layers/encoder.hpp"

#include "core/parallel.hpp"

namespace mpf {

void encoder_forward(Tensor out, const Tokens& tokens, Tensor wte, Tensor wpe, int B, int T, int C,
                     int vocab_begin, int vocab_shard, bool add_positions) {
  for_rows(
      "mpf::encoder_forward", int64_t(B) * T, KOKKOS_LAMBDA(int64_t bt) {
        const int64_t t = bt % T, row = int64_t(tokens(bt)) - vocab_begin;
        const bool mine = row >= 0 && row < vocab_shard;
        for (int c = 0; c < C; ++c) {
          out(bt * C + c) =
              (mine ? wte(row * C + c) : 0.0f) + (add_positions ? wpe(t * C + c) : 0.0f);
        }
      });
}

void encoder_backward_weight(Tensor dwte, Tensor dwpe, Tensor dout, const Tokens& tokens, int B,
                             int T, int C, int vocab_begin, int vocab_shard) {
  // One channel per iteration: a token that occurs twice is then added by one thread, in (b,t)
  // order, with no atomics and the same result for any thread count.
  for_rows(
      "mpf::encoder_backward_weight", C, KOKKOS_LAMBDA(int64_t c) {
        for (int64_t bt = 0; bt < int64_t(B) * T; ++bt) {
          const int64_t row = int64_t(tokens(bt)) - vocab_begin;
          if (row >= 0 && row < vocab_shard) dwte(row * C + c) += dout(bt * C + c);
        }
        for (int64_t t = 0; t < T; ++t) {
          float acc = 0.0f;
          for (int64_t b = 0; b < B; ++b) acc += dout((b * T + t) * C + c);
          dwpe(t * C + c) += acc;
        }
      });
}

}  // namespace mpf
