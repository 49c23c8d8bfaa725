// The tensor-parallel pieces against their serial versions, rank by rank, on a TP group of every
// rank: every rank computes the serial result itself and checks its shard's part. A group of one
// is the serial model, so each piece must then be the identity around it.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <vector>

#include "model/layers/cross_entropy.hpp"
#include "model/layers/encoder.hpp"
#include "model/layers/linear.hpp"
#include "model/shard.hpp"
#include "parallel/tp_regions.hpp"
#include "test_helpers.hpp"

namespace mpf {

using test::random_slab;
using test::rank_of;
using test::size_of;
using test::to_host;
using test::view;

namespace {
Slab from_host(const std::vector<float>& v, const char* label) {
  Slab s(std::string(label), v.size());
  auto h = Kokkos::create_mirror_view(s);
  for (size_t i = 0; i < v.size(); ++i) h(i) = v[i];
  Kokkos::deep_copy(s, h);
  return s;
}
}  // namespace

// f: identity forward, all-reduce backward; g: all-reduce forward, identity backward.
TEST(TpRegions, FAndGSumOverRanks) {
  const MPI_Comm tp = MPI_COMM_WORLD;
  const int r = rank_of(tp), T = size_of(tp);
  std::vector<float> x(5), expected(5);
  for (int i = 0; i < 5; ++i) {
    x[i] = float(r + 1) * (i + 1);
    expected[i] = float(T * (T + 1) / 2) * (i + 1);
  }
  std::vector<float> y = x;
  tp::copy_to_region_backward(y.data(), 5, tp);
  EXPECT_EQ(y, expected);
  tp::reduce_from_region_forward(x.data(), 5, tp);
  EXPECT_EQ(x, expected);
  float solo = 3.0f;
  tp::reduce_from_region_forward(&solo, 1, MPI_COMM_SELF);  // a 1-rank region is the identity
  EXPECT_EQ(solo, 3.0f);
}

// The sequence-parallel pairs: entering all-gathers rows (backward: reduce-scatter), leaving
// reduce-scatters (backward: all-gathers); without SP they are f and g.
TEST(TpRegions, SequenceParallelPairsMoveRows) {
  const MPI_Comm tp = MPI_COMM_WORLD;
  const int r = rank_of(tp), T = size_of(tp), C = 3, local = 2, R = local * T;
  tp::SequenceSplit sp{true, R, local, int64_t(r) * local};
  // Forward in: each rank computed its own rows; afterwards every rank has all of them.
  std::vector<float> full(R * C, -1.0f);
  for (int i = 0; i < local * C; ++i) full[r * local * C + i] = float(100 * r + i);
  tp::enter_forward(full.data(), C, sp, tp);
  for (int q = 0; q < T; ++q) {
    for (int i = 0; i < local * C; ++i) ASSERT_EQ(full[q * local * C + i], float(100 * q + i));
  }
  // Backward in and forward out: every rank's (R,C) partial, summed, this rank's rows kept.
  std::vector<float> partial(R * C), mine(local * C), mine2(local * C);
  for (int i = 0; i < R * C; ++i) partial[i] = float((r + 1) * (i + 1));
  tp::enter_backward(partial.data(), mine.data(), C, sp, tp);
  tp::leave_forward(partial.data(), mine2.data(), C, sp, tp);
  for (int i = 0; i < local * C; ++i) {
    const float want = float(T * (T + 1) / 2) * float(r * local * C + i + 1);
    ASSERT_EQ(mine[i], want);
    ASSERT_EQ(mine2[i], want);
  }
  // Backward out: all rows gathered from their owners.
  std::vector<float> gathered(R * C);
  tp::leave_backward(mine.data(), gathered.data(), C, sp, tp);
  for (int i = 0; i < R * C; ++i) ASSERT_EQ(gathered[i], float(T * (T + 1) / 2) * float(i + 1));
  // Without SP: enter_backward and leave_forward all-reduce in place; the others do nothing.
  tp::SequenceSplit off{false, R, R, 0};
  std::vector<float> x(R * C, float(r + 1)), y = x;
  tp::enter_forward(y.data(), C, off, tp);
  EXPECT_EQ(y, x);
  tp::enter_backward(x.data(), x.data(), C, off, tp);
  for (float v : x) ASSERT_EQ(v, float(T * (T + 1) / 2));
}

// --tp-comm-dtype bf16 (SequenceSplit's bf16): every pair's payload rounded to bf16 before it
// travels. Each rank sends k·(1 + 2^-10) for small integers k, which rounds to k (2^-10 relative
// is under half a bf16 step, 2^-8), so the sums and gathers come out as exact integers, where the
// fp32 payload would keep the 2^-10; a rank's own gathered rows are rounded too, so every rank
// holds the same values. A group of one rounds nothing.
TEST(TpRegions, Bf16PayloadsArriveRounded) {
  const MPI_Comm tp = MPI_COMM_WORLD;
  const int r = rank_of(tp), T = size_of(tp), C = 3, local = 2, R = local * T;
  const float off = 1.0f + std::ldexp(1.0f, -10);
  const auto sent = [&](int k) { return T == 1 ? float(k) * off : float(k); };
  const float ranks_sum = float(T * (T + 1) / 2);
  // f's backward and g's forward: all-reduce.
  std::vector<float> x(5), y(5);
  for (int i = 0; i < 5; ++i) x[i] = y[i] = float((r + 1) * (i + 1)) * off;
  tp::copy_to_region_backward(x.data(), 5, tp, /*bf16=*/true);
  tp::reduce_from_region_forward(y.data(), 5, tp, /*bf16=*/true);
  for (int i = 0; i < 5; ++i) {
    const float want = T == 1 ? float(i + 1) * off : ranks_sum * float(i + 1);
    ASSERT_EQ(x[i], want) << i;
    ASSERT_EQ(y[i], want) << i;
  }
  // The sequence-parallel pairs.
  tp::SequenceSplit sp{true, R, local, int64_t(r) * local, /*bf16=*/true};
  std::vector<float> full(R * C, -1.0f);
  for (int i = 0; i < local * C; ++i) full[r * local * C + i] = float(r * local * C + i + 1) * off;
  tp::enter_forward(full.data(), C, sp, tp);
  for (int i = 0; i < R * C; ++i) ASSERT_EQ(full[i], sent(i + 1)) << i;
  std::vector<float> partial(R * C), mine(local * C), mine2(local * C);
  for (int i = 0; i < R * C; ++i) partial[i] = float((r + 1) * (i + 1)) * off;
  tp::enter_backward(partial.data(), mine.data(), C, sp, tp);
  tp::leave_forward(partial.data(), mine2.data(), C, sp, tp);
  for (int i = 0; i < local * C; ++i) {
    const int k = r * local * C + i + 1;
    const float want = T == 1 ? float(k) * off : ranks_sum * float(k);
    ASSERT_EQ(mine[i], want) << i;
    ASSERT_EQ(mine2[i], want) << i;
  }
  std::vector<float> gathered(R * C), own(local * C);
  for (int i = 0; i < local * C; ++i) own[i] = float(r * local * C + i + 1) * off;
  tp::leave_backward(own.data(), gathered.data(), C, sp, tp);
  for (int i = 0; i < R * C; ++i) ASSERT_EQ(gathered[i], sent(i + 1)) << i;
}

// Column-parallel then row-parallel (the MLP's f ... g): the shards' partial outputs sum to the
// serial product, with the bias seeded once.
TEST(TpRegions, ColumnThenRowParallelLinearEqualsSerial) {
  const MPI_Comm tp = MPI_COMM_WORLD;
  const int r = rank_of(tp), T = size_of(tp);
  const int N = 6, C = 8, H = 4 * T;  // hidden width divides over the ranks
  const std::vector<float> x = to_host(random_slab("x", N * C)),
                           w1 = to_host(random_slab("w1", H * C)),
                           w2 = to_host(random_slab("w2", C * H)),
                           b2 = to_host(random_slab("b2", C));
  // Serial: y = (x · w1ᵀ) · w2ᵀ + b2.
  Slab hs("hs", N * H), ys("ys", N * C);
  const Tensor none;
  linear_forward(view(hs), none, view(from_host(x, "x")), view(from_host(w1, "w1")), none, N, C, H);
  linear_forward(view(ys), none, view(hs), view(from_host(w2, "w2")), view(from_host(b2, "b2")), N,
                 H, C);
  // Rank r: rows [r·H/T, (r+1)·H/T) of w1, the same columns of w2.
  const int h = H / T;
  std::vector<float> w1r(h * C), w2r(C * h);
  for (int i = 0; i < h; ++i) {
    for (int c = 0; c < C; ++c) w1r[i * C + c] = w1[(r * h + i) * C + c];
  }
  for (int o = 0; o < C; ++o) {
    for (int i = 0; i < h; ++i) w2r[o * h + i] = w2[o * H + r * h + i];
  }
  Slab hr("hr", N * h), yr("yr", N * C);
  linear_forward(view(hr), none, view(from_host(x, "x")), view(from_host(w1r, "w1r")), none, N, C,
                 h);
  linear_forward(view(yr), none, view(hr), view(from_host(w2r, "w2r")),
                 r == 0 ? view(from_host(b2, "b2")) : none, N, h, C);
  tp::reduce_from_region_forward(yr.data(), N * C, tp);
  const std::vector<float> a = to_host(ys), b = to_host(yr);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5f * (1 + std::fabs(a[i]))) << i;
}

// The vocab-parallel cross-entropy: losses equal the serial ones on every rank, and each rank's
// dlogits are its columns of the serial dlogits, with padded columns zero; the same whether the
// forward writes them (its dloss given) or the backward does from its row statistics.
TEST(TpRegions, VocabParallelCrossEntropyEqualsSerial) {
  for (const bool one_pass : {true, false}) {
    SCOPED_TRACE(one_pass ? "one pass" : "forward, then the gradient");
    const MPI_Comm tp = MPI_COMM_WORLD;
    const int r = rank_of(tp), T = size_of(tp);
    const int N = 5, V = 37, Vp = pad_vocab(V, 128 * T), Vl = Vp / T;
    const float dloss = 0.25f;
    const std::vector<float> z = to_host(random_slab("z", N * Vp, 3.0f));
    Tokens targets("targets", N);
    auto ht = Kokkos::create_mirror_view(targets);
    for (int n = 0; n < N; ++n) ht(n) = (11 * n + 3) % V;
    Kokkos::deep_copy(targets, ht);
    // Serial on the full logits.
    Slab full = from_host(z, "full"), losses("losses", N), stats("stats", 3 * N);
    cross_entropy_forward(view(losses), view(full), view(stats), targets, N, V, 0, Vp,
                          MPI_COMM_SELF, dloss);
    // This rank's columns.
    std::vector<float> zr(N * Vl);
    for (int n = 0; n < N; ++n) {
      for (int j = 0; j < Vl; ++j) zr[n * Vl + j] = z[n * Vp + r * Vl + j];
    }
    Slab part = from_host(zr, "part"), lossr("lossr", N), statsr("statsr", 3 * N);
    if (one_pass) {
      cross_entropy_forward(view(lossr), view(part), view(statsr), targets, N, V, r * Vl, Vl, tp,
                            dloss);
    } else {
      cross_entropy_forward(view(lossr), view(part), view(statsr), targets, N, V, r * Vl, Vl, tp);
      EXPECT_EQ(to_host(part), zr);  // the losses only
      cross_entropy_gradient(view(part), view(statsr), targets, dloss, N, V, r * Vl, Vl);
    }
    const std::vector<float> ls = to_host(losses), lr = to_host(lossr), ds = to_host(full),
                             dr = to_host(part);
    for (int n = 0; n < N; ++n) EXPECT_NEAR(ls[n], lr[n], 1e-5f * ls[n]) << "row " << n;
    for (int n = 0; n < N; ++n) {
      for (int j = 0; j < Vl; ++j) {
        const float want = r * Vl + j < V ? ds[n * Vp + r * Vl + j] : 0.0f;
        ASSERT_NEAR(dr[n * Vl + j], want, 1e-7f) << "row " << n << " column " << r * Vl + j;
      }
    }
  }
}

// The vocab-parallel embedding: the ranks' outputs sum to the serial embedding; each rank's wte
// gradient is its rows of the serial gradient.
TEST(TpRegions, VocabParallelEmbeddingEqualsSerial) {
  const MPI_Comm tp = MPI_COMM_WORLD;
  const int r = rank_of(tp), T = size_of(tp);
  const int B = 2, Tn = 4, C = 6, V = 20, Vl = (V + T - 1) / T, maxT = 8;
  const std::vector<float> wte = to_host(random_slab("wte", Vl * T * C));
  const Slab wpe = random_slab("wpe", maxT * C), dout = random_slab("dout", B * Tn * C);
  Tokens tokens("tokens", B * Tn);
  auto h = Kokkos::create_mirror_view(tokens);
  const int ids[] = {0, 19, 7, 7, 12, 3, 19, 1};
  for (int i = 0; i < B * Tn; ++i) h(i) = ids[i];
  Kokkos::deep_copy(tokens, h);
  Slab out("out", B * Tn * C), outr("outr", B * Tn * C), dwte("dwte", Vl * T * C),
      dwpe("dwpe", maxT * C), dwter("dwter", Vl * C), dwper("dwper", maxT * C);
  encoder_forward(view(out), tokens, view(from_host(wte, "wte")), view(wpe), B, Tn, C, 0, Vl * T,
                  true);
  encoder_backward_weight(view(dwte), view(dwpe), view(dout), tokens, B, Tn, C, 0, Vl * T);
  const std::vector<float> mine(wte.begin() + r * Vl * C, wte.begin() + (r + 1) * Vl * C);
  encoder_forward(view(outr), tokens, view(from_host(mine, "mine")), view(wpe), B, Tn, C, r * Vl,
                  Vl, r == 0);
  tp::reduce_from_region_forward(outr.data(), B * Tn * C, tp);
  encoder_backward_weight(view(dwter), view(dwper), view(dout), tokens, B, Tn, C, r * Vl, Vl);
  EXPECT_EQ(to_host(out), to_host(outr));  // exact: the other ranks add zeros
  const std::vector<float> g = to_host(dwte), gr = to_host(dwter);
  for (int i = 0; i < Vl * C; ++i) ASSERT_EQ(gr[i], g[r * Vl * C + i]) << i;
  EXPECT_EQ(to_host(dwpe), to_host(dwper));  // wpe is replicated: every rank has its full gradient
}

// The shard map is a partition: over all ranks every serial element appears exactly once.
TEST(TpShard, ShardsPartitionTheModel) {
  const int T = size_of(MPI_COMM_WORLD);
  const GPTConfig cfg{16, 50, 128, 2, 4, 8};
  for (const TensorSpec& spec : kTensors) {
    const TensorId i = spec.id;
    const int64_t real = unpadded_size(i, cfg);
    std::vector<int> seen(real, 0);
    for (int r = 0; r < T; ++r) {
      const TpShard s = make_tp_shard(cfg, r, T);
      for (int64_t j = 0; j < s.sizes()[i]; ++j) {
        const int64_t g = s.global_index(i, j);
        if (g >= 0) seen.at(g) += 1;
      }
      if (!s.is_split(i)) break;  // replicated: one rank's copy covers it
    }
    for (int64_t g = 0; g < real; ++g)
      ASSERT_EQ(seen[g], 1) << "tensor " << spec.name << " element " << g;
  }
}

}  // namespace mpf
