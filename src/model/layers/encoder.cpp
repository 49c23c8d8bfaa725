#include "model/layers/encoder.hpp"

#include <Kokkos_Sort.hpp>

#include "core/parallel.hpp"

namespace mpf {

void encoder_forward(Tensor out, const Tokens& tokens, Tensor wte, Tensor wpe, int B, int T, int C,
                     int vocab_begin, int vocab_shard, bool add_positions,
                     const PositionRuns& given) {
  const PositionRuns positions = given.rows > 0 ? given : PositionRuns::contiguous(T);
  for_each_2d(
      "mpf::encoder_forward", int64_t(B) * T, C, KOKKOS_LAMBDA(int64_t bt, int c) {
        const int64_t t = positions.position(int(bt % T)), row = int64_t(tokens(bt)) - vocab_begin;
        const bool mine = row >= 0 && row < vocab_shard;
        out(bt * C + c) =
            (mine ? wte(row * C + c) : 0.0f) + (add_positions ? wpe(t * C + c) : 0.0f);
      });
}

namespace {
// The device shape's keys: token · BT + position, sorted so that the positions of each token are
// together and in order. Grown when needed, kept, released when Kokkos finalizes.
Kokkos::View<int64_t*, MemSpace> sorted_keys(int64_t n) {
  static Kokkos::View<int64_t*, MemSpace> keys;
  static const bool hooked = (Kokkos::push_finalize_hook([] { keys = {}; }), true);
  (void)hooked;
  if (int64_t(keys.extent(0)) != n) {
    keys = {};
    keys = Kokkos::View<int64_t*, MemSpace>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "mpf::encoder::keys"), n);
  }
  return keys;
}
}  // namespace

void encoder_backward_weight(Tensor dwte, Tensor dwpe, Tensor dout, const Tokens& tokens, int B,
                             int T, int C, int vocab_begin, int vocab_shard,
                             const PositionRuns& given) {
  const int64_t BT = int64_t(B) * T;
  const PositionRuns rows_at = given.rows > 0 ? given : PositionRuns::contiguous(T);
  const bool positions = dwpe.extent(0) > 0;  // a model without a position table (Llama) has none
  if (!device_shaped()) {
    // One channel per iteration: a token that occurs twice is then added by one thread, in (b,t)
    // order, with no atomics and the same result for any thread count.
    for_each_heavy(
        "mpf::encoder_backward_weight", C, KOKKOS_LAMBDA(int64_t c) {
          for (int64_t bt = 0; bt < BT; ++bt) {
            const int64_t row = int64_t(tokens(bt)) - vocab_begin;
            if (row >= 0 && row < vocab_shard) dwte(row * C + c) += dout(bt * C + c);
          }
          for (int64_t t = 0; t < (positions ? T : 0); ++t) {
            float acc = 0.0f;
            for (int64_t b = 0; b < B; ++b) acc += dout((b * T + t) * C + c);
            dwpe(int64_t(rows_at.position(int(t))) * C + c) += acc;
          }
        });
    return;
  }
  // A GPU needs more than C threads. The positions are sorted by token (keys token·BT + position
  // are unique, so any sort gives the same order); the first position of each token's run then
  // adds, for one channel each, the run's rows in position order: the host shape's additions in
  // its order, without atomics.
  const Kokkos::View<int64_t*, MemSpace> keys = sorted_keys(BT);
  for_each(
      "mpf::encoder_backward_keys", BT,
      KOKKOS_LAMBDA(int64_t bt) { keys(bt) = int64_t(tokens(bt)) * BT + bt; });
  Kokkos::sort(keys);
  for_each_2d(
      "mpf::encoder_backward_wte", BT, C, KOKKOS_LAMBDA(int64_t i, int c) {
        const int64_t token = keys(i) / BT;
        if (i > 0 && keys(i - 1) / BT == token) return;  // not the first of its run
        const int64_t row = token - vocab_begin;
        if (row < 0 || row >= vocab_shard) return;
        float acc = dwte(row * C + c);
        for (int64_t j = i; j < BT && keys(j) / BT == token; ++j)
          acc += dout((keys(j) % BT) * C + c);
        dwte(row * C + c) = acc;
      });
  if (!positions) return;
  for_each_2d(
      "mpf::encoder_backward_wpe", T, C, KOKKOS_LAMBDA(int64_t t, int c) {
        float acc = 0.0f;
        for (int64_t b = 0; b < B; ++b) acc += dout((b * T + t) * C + c);
        dwpe(int64_t(rows_at.position(int(t))) * C + c) += acc;
      });
}

}  // namespace mpf
